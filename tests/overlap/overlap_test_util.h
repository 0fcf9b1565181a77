// Shared helpers for the shard_map and overlap-kernel tests: one runtime per
// test binary (4 devices as threads alone, the launch's default under
// mpirun), seeded random host arrays and comparisons.
#ifndef MESHDMA_TESTS_OVERLAP_OVERLAP_TEST_UTIL_H_
#define MESHDMA_TESTS_OVERLAP_OVERLAP_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/topology/launch.h"

namespace meshdma::testing {

inline RuntimeOptions OverlapTestOptions() {
  RuntimeOptions o;
  o.heap_bytes = 64ll << 20;
  o.wait_timeout = absl::Seconds(60);
  o.pin_threads = false;
  if (!LaunchedByMpi() && std::getenv(kDevicesPerProcessEnv) == nullptr) {
    o.launch.devices_per_process = 4;
  }
  return o;
}

// The binary's runtime, created on first use and shut down (collectively,
// before MPI is finalised) when the test program ends.
inline std::unique_ptr<Runtime>& TestRuntimeSlot() {
  static std::unique_ptr<Runtime> rt;
  return rt;
}

class RuntimeEnvironment : public ::testing::Environment {
 public:
  void TearDown() override { TestRuntimeSlot().reset(); }
};

inline ::testing::Environment* const kRuntimeEnvironment =
    ::testing::AddGlobalTestEnvironment(new RuntimeEnvironment);

inline Runtime& TestRuntime() {
  std::unique_ptr<Runtime>& rt = TestRuntimeSlot();
  if (rt == nullptr) {
    auto r = Runtime::Create(OverlapTestOptions());
    if (!r.ok()) {
      ADD_FAILURE() << r.status();
      std::abort();
    }
    rt = *std::move(r);
  }
  return *rt;
}

inline std::vector<float> RandomVector(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

inline double MaxAbsDiff(const std::vector<float>& a,
                         const std::vector<float>& b) {
  if (a.size() != b.size()) return 1e30;
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, static_cast<double>(std::abs(a[i] - b[i])));
  }
  return m;
}

}  // namespace meshdma::testing

#endif  // MESHDMA_TESTS_OVERLAP_OVERLAP_TEST_UTIL_H_
