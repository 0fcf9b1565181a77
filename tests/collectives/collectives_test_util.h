// Shared pieces of the collectives tests: runtimes for each tier, typed
// element access through `double`, the input every device contributes, and
// the comparison of a result with its reference.
#ifndef MESHDMA_TESTS_COLLECTIVES_COLLECTIVES_TEST_UTIL_H_
#define MESHDMA_TESTS_COLLECTIVES_COLLECTIVES_TEST_UTIL_H_

#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "meshdma/base/dtype.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/topology/launch.h"
#include "tests/instrumented_build.h"

namespace meshdma::testing {

// Device counts swept in one process (threads); under mpirun the launch
// decides (processes x MESHDMA_DEVICES_PER_PROCESS).
inline const std::vector<int>& ThreadDeviceCounts() {
  static const std::vector<int> counts = {1, 2, 3, 4, 5, 6, 8};
  return counts;
}

inline RuntimeOptions OptionsFor(int devices) {
  RuntimeOptions o;
  o.heap_bytes = 64ll << 20;
  if (std::getenv(kWaitTimeoutEnv) == nullptr)
    o.wait_timeout = absl::Seconds(60);
  o.pin_threads = false;  // More devices than cores in the sweep.
  if (devices > 0) o.launch.devices_per_process = devices;
  return o;
}

// Calls `fn(runtime)` once per tier configuration: under mpirun once with the
// launch's devices, alone once per count of `ThreadDeviceCounts`. Failures
// name the device count.
inline void ForEachRuntime(const std::function<void(Runtime&)>& fn) {
  std::vector<int> counts = {0};
  if (!LaunchedByMpi() && std::getenv(kDevicesPerProcessEnv) == nullptr) {
    counts = ThreadDeviceCounts();
  }
  for (int n : counts) {
    auto rt = Runtime::Create(OptionsFor(n));
    ASSERT_TRUE(rt.ok()) << rt.status();
    SCOPED_TRACE(absl::StrCat((*rt)->num_devices(), " devices, ",
                              (*rt)->launch().num_processes(), " process(es)"));
    fn(**rt);
  }
}

inline double Load(const ArrayRef& a, int64_t i) {
  return base_internal::LoadAsDouble(a.dtype(), a.data(), i);
}

inline void Store(const ArrayRef& a, int64_t i, double v) {
  base_internal::StoreFromDouble(a.dtype(), a.data(), i, v);
}

// Element `i` of the input of the device with LOGICAL id `device`: small
// integers, exact in every type and in sums over a few devices (u8: 0..250).
inline double InputValue(int device, int64_t i, DType t) {
  if (t == DType::kU8) return static_cast<double>((device * 31 + i) % 251);
  return static_cast<double>((device * 7 + i * 3 + (i >> 5)) % 17) - 8;
}

inline bool IsFloat(DType t) {
  return t == DType::kF16 || t == DType::kBF16 || t == DType::kF32 ||
         t == DType::kF64;
}

// |got - want| within the type's rounding of a mean (exact for everything
// else, which the inputs make exact).
inline bool Close(double got, double want, DType t) {
  double tol = 0;
  if (t == DType::kF16 || t == DType::kBF16) tol = 1e-2;
  if (t == DType::kF32) tol = 1e-5;
  if (t == DType::kF64) tol = 1e-12;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

// OK, or an error naming `what`, the first wrong element and how many are
// wrong.
inline absl::Status CheckArray(const std::string& what, const ArrayRef& got,
                               const std::function<double(int64_t)>& want) {
  int64_t wrong = 0, first = -1;
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    if (!Close(Load(got, i), want(i), got.dtype())) {
      if (first < 0) first = i;
      ++wrong;
    }
  }
  if (wrong == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(
      what, ": ", wrong, " of ", got.num_elements(), " elements wrong; first ",
      first, " is ", Load(got, first), ", expected ", want(first)));
}

}  // namespace meshdma::testing

#endif  // MESHDMA_TESTS_COLLECTIVES_COLLECTIVES_TEST_UTIL_H_
