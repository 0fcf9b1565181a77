// Shared helpers for the kernel tests: one runtime per test binary (a process
// may hold only one), a 2-device mesh, and a way to run a check on every
// device and collect failures.
#ifndef MESHDMA_TESTS_KERNELS_KERNEL_TEST_UTIL_H_
#define MESHDMA_TESTS_KERNELS_KERNEL_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/dma/runtime.h"

namespace meshdma::testing {

inline Runtime& TestRuntime() {
  static Runtime* rt = [] {
    RuntimeOptions o;
    o.launch.devices_per_process = 2;
    o.pin_threads = false;
    auto r = Runtime::Create(o);
    if (!r.ok()) {
      ADD_FAILURE() << r.status();
      std::abort();
    }
    return r->release();
  }();
  return *rt;
}

// Runs `fn` SPMD on every device of a 1-D mesh "x" over all devices.
inline absl::Status RunOnDevices(std::function<absl::Status()> fn) {
  Runtime& rt = TestRuntime();
  auto mesh = rt.MakeMesh1D("x");
  if (!mesh.ok()) return mesh.status();
  return rt.Run(*mesh, std::move(fn));
}

inline std::vector<float> RandomVector(int64_t n, uint32_t seed,
                                       float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

template <typename T>
ArrayRef View(std::vector<T>& v, std::vector<int64_t> shape) {
  return *ArrayRef::FromPointer(v.data(), kDTypeOf<T>, shape);
}

inline double MaxAbsDiff(const std::vector<float>& a,
                         const std::vector<float>& b) {
  double m = a.size() == b.size() ? 0.0 : 1e30;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    m = std::max(m, static_cast<double>(std::abs(a[i] - b[i])));
  }
  return m;
}

}  // namespace meshdma::testing

#endif  // MESHDMA_TESTS_KERNELS_KERNEL_TEST_UTIL_H_
