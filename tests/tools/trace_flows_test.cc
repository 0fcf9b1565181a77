// A timeline trace of a two-rank ring: every device pushes three blocks to
// its right neighbour on DMA semaphores it names, then signals a REGULAR
// semaphore on it. Rank 0 then hands the file to check_trace.py (Python's
// json module, an independent parser) with the launch's devices, which
// checks the track names, that every flow starts on the device that sent and
// ends on the device the DMA or signal went to, the semaphore names, the
// bytes-in-flight counters returning to zero, and that the two ranks' clocks
// agree: the bound the trace states is below 5 ms and no arrow points back
// in time by more than it.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/semaphore.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma {
namespace {

TEST(Trace, FlowsNamesAndClocks) {
  const std::string dir = ::testing::TempDir();
  const std::string trace = dir + "/trace_flows.json";
  const std::string devices = dir + "/trace_flows_devices.txt";
  RuntimeOptions o;
  o.trace_path = trace;
  auto rt = Runtime::Create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  const Mesh mesh = *(*rt)->MakeMesh1D("x");
  const int n = mesh.size();
  absl::Status s = (*rt)->Run(mesh, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    MESHDMA_ASSIGN_OR_RETURN(auto src, AllocateSymmetric<float>({1024}));
    MESHDMA_ASSIGN_OR_RETURN(auto dst, AllocateSymmetric<float>({1024}));
    return RunKernel({.name = "ring"}, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(
          auto send, AllocateSemaphore(SemaphoreType::kDma, "ring_send"));
      MESHDMA_ASSIGN_OR_RETURN(
          auto recv, AllocateSemaphore(SemaphoreType::kDma, "ring_recv"));
      MESHDMA_ASSIGN_OR_RETURN(
          auto ping, AllocateSemaphore(SemaphoreType::kRegular, "ping"));
      for (int step = 0; step < 3; ++step) {
        auto copy = make_async_remote_copy(src, dst, send, recv, (me + 1) % n);
        MESHDMA_RETURN_IF_ERROR(copy.start());
        MESHDMA_RETURN_IF_ERROR(copy.wait());
      }
      MESHDMA_RETURN_IF_ERROR(
          semaphore_signal(ping, 1, DeviceId{(me + 1) % n}));
      return semaphore_wait(ping, 1);
    });
  });
  ASSERT_TRUE(s.ok()) << s;
  const Launch launch = (*rt)->launch();
  ASSERT_TRUE((*rt)->Shutdown().ok());
  if (launch.rank() != 0) return;
  {
    std::ofstream f(devices);
    for (const GlobalDevice& d : launch.devices()) {
      f << d.global_index << " " << d.rank << " " << d.core << "\n";
    }
  }
  const std::string cmd = std::string("python3 ") + MESHDMA_CHECK_TRACE_PY +
                          " " + trace + " " + devices;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

// 2000 DMAs per device with MESHDMA_TRACE_MAX_EVENTS=200: each process keeps
// its last 200 records of each kind, and the file says how many it dropped.
TEST(Trace, MemoryIsBounded) {
  const std::string trace = ::testing::TempDir() + "/trace_bounded.json";
  ASSERT_EQ(setenv("MESHDMA_TRACE_MAX_EVENTS", "200", 1), 0);
  RuntimeOptions o;
  o.trace_path = trace;
  auto rt = Runtime::Create(o);
  unsetenv("MESHDMA_TRACE_MAX_EVENTS");
  ASSERT_TRUE(rt.ok()) << rt.status();
  const Mesh mesh = *(*rt)->MakeMesh1D("x");
  const int n = mesh.size();
  constexpr int kDmas = 2000;
  absl::Status s = (*rt)->Run(mesh, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    MESHDMA_ASSIGN_OR_RETURN(auto src, AllocateSymmetric<float>({2}));
    MESHDMA_ASSIGN_OR_RETURN(auto dst, AllocateSymmetric<float>({2}));
    return RunKernel({.name = "many"}, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(auto send,
                               AllocateSemaphore(SemaphoreType::kDma));
      MESHDMA_ASSIGN_OR_RETURN(auto recv,
                               AllocateSemaphore(SemaphoreType::kDma));
      for (int i = 0; i < kDmas; ++i) {
        auto copy = make_async_remote_copy(src, dst, send, recv, (me + 1) % n);
        MESHDMA_RETURN_IF_ERROR(copy.start());
        MESHDMA_RETURN_IF_ERROR(copy.wait());
      }
      return absl::OkStatus();
    });
  });
  ASSERT_TRUE(s.ok()) << s;
  const int ranks = (*rt)->launch().num_processes();
  const bool writer = (*rt)->launch().rank() == 0;
  ASSERT_TRUE((*rt)->Shutdown().ok());
  if (!writer) return;
  std::ifstream f(trace);
  std::string line, other;
  int64_t lines = 0;
  while (std::getline(f, line)) {
    ++lines;
    if (line.find("\"otherData\"") != std::string::npos) other = line;
  }
  // Unbounded, every DMA alone leaves several events per device.
  EXPECT_LT(lines, ranks * 200 * 3 + 100) << "lines in " << trace;
  EXPECT_NE(other.find("\"max_events_per_rank\":200"), std::string::npos)
      << other;
  EXPECT_EQ(other.find("\"dropped_events\":[0"), std::string::npos) << other;
  EXPECT_NE(other.find("\"dropped_events\":["), std::string::npos) << other;
}

}  // namespace
}  // namespace meshdma
