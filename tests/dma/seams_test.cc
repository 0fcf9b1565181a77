// The seams later tools build on: the Observer sees every DMA, signal and
// wait, and the C ABI reaches the same verbs; and the seam to MPI: how the
// runtime sends depends on the path MPI's settings give it.
#include <pthread.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/c_api.h"
#include "meshdma/dma/internal/peer_watch.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/observer.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"
#include "meshdma/dma/trace.h"
#include "tests/dma/runtime_test_util.h"

namespace meshdma {
namespace {

class CountingObserver : public Observer {
 public:
  void OnKernelBegin(int, absl::string_view) override { ++kernels; }
  void OnDmaStart(const DmaEvent& e) override {
    ++dma_starts;
    bytes += e.bytes;
  }
  void OnDmaComplete(const DmaEvent&) override { ++dma_completes; }
  void OnSignal(int, int, Semaphore sem, int64_t inc) override {
    if (sem.type() != SemaphoreType::kBarrier) signals += inc;
  }
  void OnWaitBegin(int, WaitKind kind, Semaphore, int64_t, int64_t) override {
    if (kind != WaitKind::kBarrier) ++waits;
  }
  void OnWaitEnd(int, WaitKind kind, Semaphore, int64_t, bool ok) override {
    if (kind != WaitKind::kBarrier && ok) ++waits_ok;
  }
  std::atomic<int> kernels{0}, dma_starts{0}, dma_completes{0}, waits{0},
      waits_ok{0};
  std::atomic<int64_t> bytes{0}, signals{0};
};

TEST(ObserverTest, SeesEveryDmaSignalAndWait) {
  CountingObserver obs;
  RuntimeOptions o = testing::TierOptions(DmaMode::kAsync);
  o.observer = &obs;
  auto rt = Runtime::Create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  const int n = (*rt)->num_devices();
  absl::Status s = (*rt)->Run(*(*rt)->MakeMesh1D(), [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    MESHDMA_ASSIGN_OR_RETURN(auto buf, AllocateSymmetric<float>({1024}));
    MESHDMA_ASSIGN_OR_RETURN(auto out, AllocateSymmetric<float>({1024}));
    return RunKernel({.name = "observed"}, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(auto send,
                               AllocateSemaphore(SemaphoreType::kDma));
      MESHDMA_ASSIGN_OR_RETURN(auto recv,
                               AllocateSemaphore(SemaphoreType::kDma));
      MESHDMA_ASSIGN_OR_RETURN(auto reg,
                               AllocateSemaphore(SemaphoreType::kRegular));
      for (int i = 0; i < 3; ++i) {
        auto copy = make_async_remote_copy(buf, out, send, recv, (me + 1) % n);
        MESHDMA_RETURN_IF_ERROR(copy.start());
        MESHDMA_RETURN_IF_ERROR(copy.wait());
      }
      MESHDMA_RETURN_IF_ERROR(semaphore_signal(reg, 5, (me + 1) % n));
      return semaphore_wait(reg, 5);
    });
  });
  ASSERT_TRUE(s.ok()) << s;
  const int local = (*rt)->num_local_devices();
  EXPECT_EQ(obs.kernels.load(), local);
  EXPECT_EQ(obs.dma_starts.load(), 3 * local);
  EXPECT_EQ(obs.dma_completes.load(), 3 * local);
  EXPECT_EQ(obs.bytes.load(), 3 * local * 4096);
  EXPECT_EQ(obs.signals.load(), 5 * local);
  EXPECT_EQ(obs.waits.load(), 7 * local);  // 3 x (send + recv) + 1.
  EXPECT_EQ(obs.waits_ok.load(), 7 * local);
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos;
       p = text.find(what, p + 1))
    ++n;
  return n;
}

// The timeline trace holds a track per device with its kernel, compute span,
// DMAs (start and completion paired by id), signals and waits with expected
// and observed counts; rank 0 writes one file for the whole launch.
TEST(TraceTest, RingExchangeIsTraced) {
  const std::string path = ::testing::TempDir() + "meshdma_trace_test.json";
  RuntimeOptions o = testing::TierOptions(DmaMode::kAsync);
  o.trace_path = path;
  auto rt = Runtime::Create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  const int n = (*rt)->num_devices();
  const int rank = (*rt)->launch().rank();
  absl::Status s = (*rt)->Run(*(*rt)->MakeMesh1D(), [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    MESHDMA_ASSIGN_OR_RETURN(auto buf, AllocateSymmetric<float>({256}));
    MESHDMA_ASSIGN_OR_RETURN(auto out, AllocateSymmetric<float>({256}));
    return RunKernel({.name = "traced_ring"}, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(auto send,
                               AllocateSemaphore(SemaphoreType::kDma));
      MESHDMA_ASSIGN_OR_RETURN(auto recv,
                               AllocateSemaphore(SemaphoreType::kDma));
      auto copy = make_async_remote_copy(buf, out, send, recv, (me + 1) % n);
      MESHDMA_RETURN_IF_ERROR(copy.start());
      { TraceSpan span("compute while the copy flies"); }
      return copy.wait();
    });
  });
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE((*rt)->Shutdown().ok());
  if (rank != 0) return;
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << path;
  const std::string text((std::istreambuf_iterator<char>(f)),
                         std::istreambuf_iterator<char>());
  EXPECT_EQ(text.rfind("{\"displayTimeUnit\":\"ns\",", 0), 0u);
  EXPECT_NE(text.find("\"traceEvents\":["), std::string::npos);
  EXPECT_EQ(Count(text, "{"), Count(text, "}"));
  EXPECT_EQ(
      Count(text, "\"name\":\"traced_ring\",\"cat\":\"kernel\",\"ph\":\"B\""),
      n);
  EXPECT_EQ(
      Count(text, "\"name\":\"traced_ring\",\"cat\":\"kernel\",\"ph\":\"E\""),
      n);
  EXPECT_EQ(Count(text, "\"cat\":\"dma\",\"ph\":\"b\""), n);
  EXPECT_EQ(Count(text, "\"cat\":\"dma\",\"ph\":\"e\""), n);
  EXPECT_EQ(Count(text, "compute while the copy flies"), 2 * n);
  EXPECT_EQ(Count(text, "\"name\":\"wait_send\",\"cat\":\"wait\",\"ph\":\"B\""),
            n);
  EXPECT_EQ(Count(text, "\"name\":\"wait_recv\",\"cat\":\"wait\",\"ph\":\"B\""),
            n);
  EXPECT_GE(Count(text, "\"expected\":1024,\"observed\":"), 2 * n);
  EXPECT_EQ(Count(text, "\"process_name\""), (*rt)->launch().num_processes());
  std::remove(path.c_str());
}

TEST(CApiTest, RingExchangeThroughTheCAbi) {
  auto rt = Runtime::Create(testing::TierOptions(DmaMode::kAsync));
  ASSERT_TRUE(rt.ok()) << rt.status();
  const int n = (*rt)->num_devices();
  absl::Status s = (*rt)->Run(*(*rt)->MakeMesh1D(), [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(auto src, AllocateSymmetric<int32_t>({64}));
    MESHDMA_ASSIGN_OR_RETURN(auto dst, AllocateSymmetric<int32_t>({64}));
    return RunKernel({.name = "c_abi"}, [&]() -> absl::Status {
      int32_t me = -1, size = -1;
      EXPECT_EQ(meshdma_logical_device_id(&me), 0);
      EXPECT_EQ(meshdma_axis_size("x", &size), 0);
      EXPECT_EQ(size, n);
      for (int i = 0; i < 64; ++i) src.data_as<int32_t>()[i] = me * 64 + i;
      meshdma_semaphore send, recv, reg;
      EXPECT_EQ(meshdma_allocate_semaphore(MESHDMA_SEMAPHORE_DMA, &send), 0);
      EXPECT_EQ(meshdma_allocate_semaphore(MESHDMA_SEMAPHORE_DMA, &recv), 0);
      EXPECT_EQ(meshdma_allocate_semaphore(MESHDMA_SEMAPHORE_REGULAR, &reg), 0);
      meshdma_view s_view{src.data(),
                          src.heap_offset(),
                          static_cast<int32_t>(DType::kI32),
                          1,
                          {64},
                          {1}};
      meshdma_view d_view{dst.data(),
                          dst.heap_offset(),
                          static_cast<int32_t>(DType::kI32),
                          1,
                          {64},
                          {1}};
      EXPECT_EQ(meshdma_async_remote_copy_start(&s_view, &d_view, send, recv,
                                                (me + 1) % n),
                0)
          << meshdma_last_error();
      EXPECT_EQ(meshdma_dma_wait_send(send, 256), 0);
      EXPECT_EQ(meshdma_dma_wait_recv(recv, 256), 0);
      EXPECT_EQ(dst.data_as<int32_t>()[5], ((me + n - 1) % n) * 64 + 5);
      EXPECT_EQ(meshdma_semaphore_signal_remote(reg, 2, (me + 1) % n), 0);
      EXPECT_EQ(meshdma_semaphore_wait(reg, 2), 0);
      int64_t v = -1;
      EXPECT_EQ(meshdma_semaphore_read(reg, &v), 0);
      EXPECT_EQ(v, 0);
      // Errors come back as codes with a message.
      EXPECT_EQ(meshdma_semaphore_wait(send, 1),
                static_cast<int>(absl::StatusCode::kInvalidArgument));
      EXPECT_THAT(meshdma_last_error(), ::testing::HasSubstr("DMA semaphore"));
      d_view.heap_offset += 64;  // Lies about where data lives.
      EXPECT_NE(
          meshdma_async_remote_copy_start(&s_view, &d_view, send, recv, 0), 0);
      EXPECT_THAT(meshdma_last_error(), ::testing::HasSubstr("heap_offset"));
      return absl::OkStatus();
    });
  });
  EXPECT_TRUE(s.ok()) << s;
}

// A view whose stride reaches 2^40 elements away is an error code, whether it
// claims to be in the symmetric heap or not, never a wild copy.
TEST(CApiTest, HugeNegativeStrideIsAnError) {
  auto rt = Runtime::Create(testing::TierOptions(DmaMode::kAsync));
  ASSERT_TRUE(rt.ok()) << rt.status();
  absl::Status s = (*rt)->Run(*(*rt)->MakeMesh1D(), [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(auto src, AllocateSymmetric<int32_t>({64}));
    MESHDMA_ASSIGN_OR_RETURN(auto dst, AllocateSymmetric<int32_t>({64}));
    return RunKernel({.name = "c_abi_stride"}, [&]() -> absl::Status {
      int32_t me = -1;
      EXPECT_EQ(meshdma_logical_device_id(&me), 0);
      meshdma_semaphore send, recv;
      EXPECT_EQ(meshdma_allocate_semaphore(MESHDMA_SEMAPHORE_DMA, &send), 0);
      EXPECT_EQ(meshdma_allocate_semaphore(MESHDMA_SEMAPHORE_DMA, &recv), 0);
      std::vector<int32_t> host(64);
      const int64_t stride = -(int64_t{1} << 40);
      meshdma_view bad_sym{
          src.data(), src.heap_offset(), static_cast<int32_t>(DType::kI32), 1,
          {2},        {stride}};
      meshdma_view bad_host{host.data(), -1,  static_cast<int32_t>(DType::kI32),
                            1,           {2}, {stride}};
      meshdma_view d_view{dst.data(),
                          dst.heap_offset(),
                          static_cast<int32_t>(DType::kI32),
                          1,
                          {2},
                          {1}};
      EXPECT_NE(meshdma_async_copy_start(&bad_sym, &d_view, send), 0);
      EXPECT_THAT(meshdma_last_error(), ::testing::HasSubstr("src"));
      EXPECT_NE(meshdma_async_copy_start(&bad_host, &d_view, send), 0);
      EXPECT_THAT(meshdma_last_error(), ::testing::HasSubstr("src"));
      EXPECT_NE(
          meshdma_async_remote_copy_start(&d_view, &bad_sym, send, recv, me),
          0);
      EXPECT_THAT(meshdma_last_error(), ::testing::HasSubstr("dst"));
      return absl::OkStatus();
    });
  });
  EXPECT_TRUE(s.ok()) << s;
}

// Whether the launcher's environment leaves MPI only the network between
// processes of one machine: Open MPI's btl list without its shared-memory
// component, or MPICH's MPIR_CVAR_NOLOCAL.
bool EnvironmentForbidsMpiSharedMemory() {
  if (const char* nolocal = std::getenv("MPIR_CVAR_NOLOCAL")) {
    return std::string(nolocal) != "0";
  }
  // Open MPI's setting means nothing to another MPI.
  const char* btl = std::getenv("OMPI_MCA_btl");
  if (btl == nullptr || *btl == '\0' ||
      std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr) {
    return false;
  }
  std::string list = btl;
  const bool exclude = list[0] == '^';
  if (exclude) list.erase(0, 1);
  bool listed = false;
  for (absl::string_view c : absl::StrSplit(list, ',')) {
    listed = listed || c == "vader" || c == "sm";
  }
  return listed == exclude;
}

// Puts above 60 KiB leave in pieces of 60 KiB towards other machines, and
// towards a process of this machine when MPI reaches it over the network
// (the interhost_tcp variants). Through MPI's shared memory, puts above its
// eager size (where MPI tells it) and up to 16 KiB leave in pieces of that
// size, unless the machine is oversubscribed; oversubscribed, a put just
// past Open MPI's fastest path (256 bytes of message) leaves as two messages
// on it.
constexpr int64_t kNetworkPieceBytes = 60 << 10;
TEST(MpiPathTest, PiecesFollowTheMpiPath) {
  // MESHDMA_MPI_PIECED_BYTES, when the launcher sets it, overrides the
  // default towards every other process.
  const char* told_env = std::getenv(kMpiPiecedBytesEnv);
  RuntimeOptions options = testing::TierOptions(DmaMode::kAsync);
  options.remote_transport = RemoteTransport::kMpi;  // Its pieces.
  {
    auto rt = Runtime::Create(options);
    ASSERT_TRUE(rt.ok()) << rt.status();
    const Launch& launch = (*rt)->launch();
    const std::string& mine = launch.processes()[launch.rank()].hostname;
    const bool network = EnvironmentForbidsMpiSharedMemory();
    for (int r = 0; r < launch.num_processes(); ++r) {
      SCOPED_TRACE(absl::StrCat("rank ", r));
      const bool same_machine = launch.processes()[r].hostname == mine;
      // Through MPI's shared memory (same machine, not forbidden), Open MPI
      // tells its eager size and puts go in pieces of it; MPICH does not.
      const bool shared = same_machine && !network;
      const bool eager_known =
          shared && std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
      int64_t expected = kDefaultMpiPiecedBytes;
      if (r == launch.rank()) {
        expected = 0;
        EXPECT_EQ((*rt)->mpi_piece_bytes(r), 0);
        EXPECT_EQ((*rt)->mpi_fast_bytes(r), 0);
      } else {
        EXPECT_EQ((*rt)->mpi_fast_bytes(r),
                  eager_known && (*rt)->oversubscribed() ? 256 : 0);
        if (shared) {
          expected = eager_known && !(*rt)->oversubscribed()
                         ? kDefaultMpiSharedMemoryPiecedBytes
                         : 0;
        }
        if (told_env != nullptr) expected = std::atoll(told_env);
        if (eager_known) {
          // Open MPI's default eager size there: 4 KiB, headers included.
          EXPECT_GE((*rt)->mpi_piece_bytes(r), 1024);
          EXPECT_LT((*rt)->mpi_piece_bytes(r), 4096);
        } else {
          EXPECT_EQ((*rt)->mpi_piece_bytes(r), kNetworkPieceBytes);
        }
      }
      EXPECT_EQ((*rt)->mpi_pieced_bytes(r), expected);
    }
  }
  RuntimeOptions told = options;
  told.mpi_pieced_bytes = 123456;
  auto rt = Runtime::Create(told);
  ASSERT_TRUE(rt.ok()) << rt.status();
  const Launch& launch = (*rt)->launch();
  for (int r = 0; r < launch.num_processes(); ++r) {
    if (r != launch.rank()) {
      EXPECT_EQ((*rt)->mpi_pieced_bytes(r), 123456);
    }
  }
}

// The transport to other hosts is the one chosen: "tcp" or "mpi" where some
// device is on another host, "" where every device is reached through memory.
// (Every test binary that runs between hosts moves its data through both:
// its `.interhost` variants through TCP, its `.interhost_mpi` through MPI.)
TEST(RemoteTransportTest, IsTheOneChosen) {
  for (const RemoteTransport choice :
       {RemoteTransport::kTcp, RemoteTransport::kMpi}) {
    RuntimeOptions options = testing::TierOptions(DmaMode::kAsync);
    options.remote_transport = choice;
    auto rt = Runtime::Create(options);
    ASSERT_TRUE(rt.ok()) << rt.status();
    const Launch& launch = (*rt)->launch();
    const std::string& my_host = launch.processes()[launch.rank()].host_key;
    bool other_hosts = false;
    for (const ProcessInfo& p : launch.processes()) {
      other_hosts |= p.host_key != my_host;
    }
    const std::string expected = !other_hosts                      ? ""
                                 : choice == RemoteTransport::kTcp ? "tcp"
                                                                   : "mpi";
    EXPECT_EQ((*rt)->remote_transport(), expected);
  }
}

// meshdma's threads carry names (`top -H`, `perf`, `gdb`): each device's
// thread "meshdma-dev<global index>", and the remote transport's progress
// thread "meshdma-<transport>" where some device is on another host.
TEST(ThreadNamesTest, DevicesAndProgressThreadsAreNamed) {
  auto runtime = Runtime::Create(testing::TierOptions(DmaMode::kAsync));
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  Runtime& rt = **runtime;
  auto mesh = rt.MakeMesh1D("x");
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  std::vector<std::string> names(rt.num_devices());
  absl::Status s = rt.Run(*mesh, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
    char name[16] = {};
    pthread_getname_np(pthread_self(), name, sizeof(name));
    names[me] = name;
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  const Launch& launch = rt.launch();
  for (int g = 0; g < rt.num_devices(); ++g) {
    if (launch.devices()[g].rank != launch.rank()) continue;
    EXPECT_EQ(names[*mesh->LogicalIdOfGlobal(g)],
              absl::StrCat("meshdma-dev", g));
  }
  std::vector<std::string> threads;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    threads.push_back(name);
  }
  // Every process of these launches runs on this machine: with others,
  // one thread watches them for exit (where the kernel has pidfds).
  if (launch.num_processes() > 1 && dma_internal::PeerWatch::Supported()) {
    EXPECT_THAT(threads, ::testing::Contains("meshdma-watch"));
  }
  const std::string transport = rt.remote_transport();
  if (transport.empty()) return;
  EXPECT_THAT(threads, ::testing::Contains("meshdma-" + transport));
}

// Processes told different remote transports cannot talk: every process's
// Runtime::Create fails, naming the choices, where some device is on another
// host (and succeeds where none is: no remote transport is made).
TEST(RemoteTransportTest, DifferentChoicesAreAnError) {
  auto probe = Runtime::Create(testing::TierOptions(DmaMode::kAsync));
  ASSERT_TRUE(probe.ok()) << probe.status();
  const Launch& launch = (*probe)->launch();
  const bool other_hosts = !(*probe)->remote_transport().empty();
  const int rank = launch.rank();
  const int processes = launch.num_processes();
  ASSERT_TRUE((*probe)->Shutdown().ok());
  probe->reset();
  if (processes < 2) GTEST_SKIP() << "one process";
  RuntimeOptions options = testing::TierOptions(DmaMode::kAsync);
  options.remote_transport =
      rank == 0 ? RemoteTransport::kTcp : RemoteTransport::kMpi;
  auto rt = Runtime::Create(options);
  if (!other_hosts) {
    EXPECT_TRUE(rt.ok()) << rt.status();
    return;
  }
  ASSERT_FALSE(rt.ok());
  EXPECT_THAT(rt.status().message(),
              ::testing::HasSubstr("chose different remote transports"));
  EXPECT_THAT(rt.status().message(), ::testing::HasSubstr("told:tcp"));
  EXPECT_THAT(rt.status().message(), ::testing::HasSubstr("told:mpi"));
}

// Whether this launch's processes sit on more than one host (a runtime
// made and shut down to find out).
absl::StatusOr<bool> LaunchHasOtherHosts() {
  MESHDMA_ASSIGN_OR_RETURN(
      std::unique_ptr<Runtime> probe,
      Runtime::Create(testing::TierOptions(DmaMode::kAsync)));
  const bool other_hosts = !probe->remote_transport().empty();
  MESHDMA_RETURN_IF_ERROR(probe->Shutdown());
  return other_hosts;
}

// The interface the TCP transport listens on, when named: one that exists
// serves (the loopback here), one that does not fails every process alike.
TEST(RemoteTransportTest, NamedInterface) {
  const absl::StatusOr<bool> other_hosts = LaunchHasOtherHosts();
  ASSERT_TRUE(other_hosts.ok()) << other_hosts.status();
  if (!*other_hosts) GTEST_SKIP() << "no other hosts";
  RuntimeOptions options = testing::TierOptions(DmaMode::kAsync);
  options.remote_transport = RemoteTransport::kTcp;
  setenv("MESHDMA_SOCKET_IFNAME", "meshdma-none", 1);
  {
    auto rt = Runtime::Create(options);
    ASSERT_FALSE(rt.ok());
    EXPECT_THAT(rt.status().message(),
                ::testing::HasSubstr("MESHDMA_SOCKET_IFNAME=meshdma-none names "
                                     "no interface that is up"));
  }
  setenv("MESHDMA_SOCKET_IFNAME", "lo", 1);
  {
    auto rt = Runtime::Create(options);
    ASSERT_TRUE(rt.ok()) << rt.status();
    EXPECT_EQ((*rt)->remote_transport(), "tcp");
  }
  unsetenv("MESHDMA_SOCKET_IFNAME");
}

// The TCP connections' congestion control, when named: one the kernel
// takes serves, and so does "system" (the kernel's default); a name it
// refuses fails every process alike, naming the variable.
TEST(RemoteTransportTest, NamedCongestionControl) {
  const absl::StatusOr<bool> other_hosts = LaunchHasOtherHosts();
  ASSERT_TRUE(other_hosts.ok()) << other_hosts.status();
  if (!*other_hosts) GTEST_SKIP() << "no other hosts";
  RuntimeOptions options = testing::TierOptions(DmaMode::kAsync);
  options.remote_transport = RemoteTransport::kTcp;
  setenv("MESHDMA_TCP_CONGESTION", "meshdma-none", 1);
  {
    auto rt = Runtime::Create(options);
    ASSERT_FALSE(rt.ok());
    EXPECT_EQ(rt.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(rt.status().message(),
                ::testing::HasSubstr("MESHDMA_TCP_CONGESTION=meshdma-none: "
                                     "the kernel refused it"));
  }
  for (const char* name : {"reno", "system"}) {
    setenv("MESHDMA_TCP_CONGESTION", name, 1);
    auto rt = Runtime::Create(options);
    ASSERT_TRUE(rt.ok()) << name << ": " << rt.status();
    EXPECT_EQ((*rt)->remote_transport(), "tcp");
    if (std::string(name) == "reno") {
      EXPECT_EQ((*rt)->tcp_congestion(), "reno");
    }
    EXPECT_FALSE((*rt)->tcp_congestion().empty());
  }
  // The option wins over the variable, and a refused one names the option.
  options.tcp_congestion = "meshdma-none";
  {
    auto rt = Runtime::Create(options);
    ASSERT_FALSE(rt.ok());
    EXPECT_THAT(rt.status().message(),
                ::testing::HasSubstr("RuntimeOptions::tcp_congestion="
                                     "meshdma-none: the kernel refused it"));
  }
  unsetenv("MESHDMA_TCP_CONGESTION");
}

}  // namespace
}  // namespace meshdma
