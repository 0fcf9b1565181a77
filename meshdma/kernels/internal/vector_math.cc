#include "meshdma/kernels/internal/vector_math.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "meshdma/base/dtype.h"

// ThreadSanitizer's runtime is not yet set up when the dynamic loader runs
// target_clones' resolvers (IFUNC), and a TSan binary crashes at start-up:
// under TSan the functions are built once, for the baseline ISA.
#if defined(__SANITIZE_THREAD__)
#define MESHDMA_NO_CLONES 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MESHDMA_NO_CLONES 1
#endif
#endif

#if defined(MESHDMA_NO_CLONES)
#define MESHDMA_CLONES
#else
#define MESHDMA_CLONES \
  __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

namespace meshdma::kernels_internal {
namespace {
constexpr int kLanes = 16;
}

MESHDMA_CLONES float RowMax(const float* x, int64_t n) {
  float m[kLanes];
  for (int l = 0; l < kLanes; ++l)
    m[l] = -std::numeric_limits<float>::infinity();
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    for (int l = 0; l < kLanes; ++l) m[l] = x[k + l] > m[l] ? x[k + l] : m[l];
  }
  float r = -std::numeric_limits<float>::infinity();
  for (int l = 0; l < kLanes; ++l) r = m[l] > r ? m[l] : r;
  for (; k < n; ++k) r = x[k] > r ? x[k] : r;
  return r;
}

// exp(x) by range reduction to [-ln2/2, ln2/2] and a degree-6 polynomial
// (Cephes expf coefficients); branch-free so that it vectorises.
static inline float ExpApprox(float x) {
  const bool underflow = x < -87.3f;
  x = x > 88.7f ? 88.7f : x;
  x = x < -87.3f ? -87.3f : x;
  float fx = x * 1.44269504088896341f;
  // Round to nearest by the 1.5 * 2^23 trick (plain arithmetic vectorises).
  fx = (fx + 12582912.0f) - 12582912.0f;
  const float r = x - fx * 0.693359375f + fx * 2.12194440e-4f;
  float y = 1.9875691500E-4f;
  y = y * r + 1.3981999507E-3f;
  y = y * r + 8.3334519073E-3f;
  y = y * r + 4.1665795894E-2f;
  y = y * r + 1.6666665459E-1f;
  y = y * r + 5.0000001201E-1f;
  y = y * r * r + r + 1.0f;
  const int32_t e = (static_cast<int32_t>(fx) + 127) << 23;
  float scale;
  std::memcpy(&scale, &e, 4);
  return underflow ? 0.0f : y * scale;
}

MESHDMA_CLONES float ExpShiftSum(float* x, int64_t n, float shift) {
  float s[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float e = ExpApprox(x[k + l] - shift);
      x[k + l] = e;
      s[l] += e;
    }
  }
  float r = 0;
  for (int l = 0; l < kLanes; ++l) r += s[l];
  for (; k < n; ++k) {
    x[k] = ExpApprox(x[k] - shift);
    r += x[k];
  }
  return r;
}

MESHDMA_CLONES void Scale(float* y, int64_t n, float a) {
  for (int64_t k = 0; k < n; ++k) y[k] *= a;
}

MESHDMA_CLONES void ToFloat(const uint16_t* in, float* out, int64_t n,
                            bool is_bf16) {
  if (is_bf16) {
    for (int64_t k = 0; k < n; ++k) {
      const uint32_t u = static_cast<uint32_t>(in[k]) << 16;
      std::memcpy(&out[k], &u, 4);
    }
    return;
  }
  for (int64_t k = 0; k < n; ++k) {
    Half h;
    h.bits = in[k];
    out[k] = static_cast<float>(h);
  }
}

}  // namespace meshdma::kernels_internal
