// Shared fixture for runtime tests: one Runtime per test, sized for the tier
// the binary runs in. Alone, a process holds `kThreadsDevices` devices
// (threads); under mpirun each process holds the launch's default (or
// MESHDMA_DEVICES_PER_PROCESS).
#ifndef MESHDMA_TESTS_DMA_RUNTIME_TEST_UTIL_H_
#define MESHDMA_TESTS_DMA_RUNTIME_TEST_UTIL_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/topology/launch.h"

namespace meshdma::testing {

inline constexpr int kThreadsDevices = 4;

inline RuntimeOptions TierOptions(DmaMode mode) {
  RuntimeOptions o;
  o.dma_mode = mode;
  o.heap_bytes = 64ll << 20;
  o.wait_timeout = absl::Seconds(60);
  if (!LaunchedByMpi() && std::getenv(kDevicesPerProcessEnv) == nullptr) {
    o.launch.devices_per_process = kThreadsDevices;
  }
  return o;
}

// The global indices of this process's devices.
inline std::vector<int> LocalDevices(const Runtime& rt) {
  return rt.launch().DevicesOfRank(rt.launch().rank());
}

inline std::string ModeName(DmaMode mode) {
  return mode == DmaMode::kAsync ? "Async" : "Eager";
}

// Runs `fn(right)` on every device of a 1-D mesh of a runtime in checked
// mode (MESHDMA_CHECK=races), `right` being the device's right neighbour;
// devices that are their own neighbour (one device) skip it.
inline void RunCheckedOnRing(const std::function<absl::Status(int)>& fn) {
  RuntimeOptions o = TierOptions(DmaMode::kAsync);
  o.check = CheckMode::kRaces;
  auto rt = Runtime::Create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  auto mesh = (*rt)->MakeMesh1D("x");
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  absl::Status s = (*rt)->Run(*mesh, [&]() -> absl::Status {
    absl::StatusOr<int> me = axis_index("x");
    absl::StatusOr<int> n = axis_size("x");
    if (!me.ok()) return me.status();
    if (!n.ok()) return n.status();
    const int right = (*me + 1) % *n;
    return right == *me ? absl::OkStatus() : fn(right);
  });
  EXPECT_TRUE(s.ok()) << s;
}

// A fixture with one Runtime (async DMAs) and a 1-D mesh "x" over all its
// devices, for tests of verbs whose reach depends on the launch.
class OneAxisTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto rt = Runtime::Create(TierOptions(DmaMode::kAsync));
    ASSERT_TRUE(rt.ok()) << rt.status();
    rt_ = std::move(*rt);
    auto mesh = rt_->MakeMesh1D("x");
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    mesh_ = std::make_unique<Mesh>(*mesh);
  }
  // True when devices `a` and `b` (global) share a host, so that meshdma
  // lets them share memory.
  bool SameHost(int a, int b) const {
    const Launch& l = rt_->launch();
    return l.SameHost(l.devices()[a].rank, l.devices()[b].rank);
  }
  // True when devices `a` and `b` (global) are threads of one process.
  bool SameProcess(int a, int b) const {
    const Launch& l = rt_->launch();
    return l.devices()[a].rank == l.devices()[b].rank;
  }
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<Mesh> mesh_;
};

}  // namespace meshdma::testing

#endif  // MESHDMA_TESTS_DMA_RUNTIME_TEST_UTIL_H_
