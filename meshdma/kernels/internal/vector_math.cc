#include "meshdma/kernels/internal/vector_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "meshdma/base/dtype.h"
#include "meshdma/kernels/internal/clones.h"

namespace meshdma::kernels_internal {
namespace {

// The 16 lanes of the functions below are two `F8`s.
constexpr int kLanes = 16;
constexpr int kHalf = kF8Lanes;
static_assert(kLanes == 2 * kHalf);

}  // namespace

MESHDMA_CLONES float RowMax(const float* x, int64_t n) {
  F8 m[2] = {F8{} - std::numeric_limits<float>::infinity(),
             F8{} - std::numeric_limits<float>::infinity()};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    for (int h = 0; h < 2; ++h) {
      F8 v;
      std::memcpy(&v, x + k + h * kHalf, sizeof(v));
      const I8 greater = v > m[h];
      m[h] = reinterpret_cast<F8>((reinterpret_cast<I8>(v) & greater) |
                                  (reinterpret_cast<I8>(m[h]) & ~greater));
    }
  }
  float r = -std::numeric_limits<float>::infinity();
  for (int l = 0; l < kLanes; ++l) {
    const float v = m[l / kHalf][l % kHalf];
    r = v > r ? v : r;
  }
  for (; k < n; ++k) r = x[k] > r ? x[k] : r;
  return r;
}

// exp(x - shift) by range reduction to [-ln2/2, ln2/2] and a degree-6
// polynomial (Cephes expf coefficients), 16 lanes at a time with bit-mask
// selections instead of branches; below -87.3 it is 0 (so -inf gives exactly
// 0), beyond float's range +inf. The ragged tail runs as one more vector padded
// with -inf. The same values and sum, bit for bit, as 16 scalar lanes would
// give.
MESHDMA_CLONES float ExpShiftSum(float* x, int64_t n, float shift) {
  F8 sum[2] = {F8{} + 0.0f, F8{} + 0.0f};
  const F8 hi = F8{} + 88.7f, lo = F8{} - 87.3f;
  float tail[kLanes];
  for (int64_t k = 0; k < n; k += kLanes) {
    const int64_t lanes = n - k < kLanes ? n - k : kLanes;
    float* p = x + k;
    if (lanes < kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        tail[l] = l < lanes ? p[l] : -std::numeric_limits<float>::infinity();
      }
      p = tail;
    }
    for (int h = 0; h < 2; ++h) {
      F8 v;
      std::memcpy(&v, p + h * kHalf, sizeof(v));
      v = v - shift;
      // Clamped to [-87.3, 88.7] (a NaN stays NaN: both tests are false
      // for it), so that the exponent's conversion to int below is defined;
      // lanes below are zeroed at the end, above the result is already +inf.
      const I8 underflow = v < lo;
      v = hi < v ? hi : v;
      v = v < lo ? lo : v;
      F8 fx = v * 1.44269504088896341f;
      fx = (fx + 12582912.0f) - 12582912.0f;  // Round to nearest.
      const F8 r = v - fx * 0.693359375f + fx * 2.12194440e-4f;
      F8 y = r * 1.9875691500E-4f + 1.3981999507E-3f;
      y = y * r + 8.3334519073E-3f;
      y = y * r + 4.1665795894E-2f;
      y = y * r + 1.6666665459E-1f;
      y = y * r + 5.0000001201E-1f;
      y = y * r * r + r + 1.0f;
      const I8 e = (__builtin_convertvector(fx, I8) + 127) << 23;
      y = y * reinterpret_cast<F8>(e);
      y = reinterpret_cast<F8>(reinterpret_cast<I8>(y) & ~underflow);
      std::memcpy(p + h * kHalf, &y, sizeof(y));
      if (p != tail) sum[h] += y;
    }
  }
  // The lanes' sums, then the tail's terms one by one.
  float r = 0;
  for (int l = 0; l < kLanes; ++l) r += sum[l / kHalf][l % kHalf];
  for (int64_t k = n - n % kLanes; k < n; ++k) {
    x[k] = tail[k % kLanes];
    r += x[k];
  }
  return r;
}

namespace {

// NarrowProduct's rows for a compile-time n: n accumulators of 8 lanes stay
// in registers while a row of `a` streams past once.
template <int N>
[[gnu::always_inline]] inline void NarrowRows(int64_t m, int64_t k, float alpha,
                                              const float* a, int64_t lda,
                                              const float* bt, float beta,
                                              float* c, int64_t ldc) {
  for (int64_t r = 0; r < m; ++r) {
    const float* row = a + r * lda;
    F8 acc[N];
    for (int j = 0; j < N; ++j) acc[j] = F8{} + 0.0f;
    int64_t p = 0;
    for (; p + kHalf <= k; p += kHalf) {
      F8 x;
      std::memcpy(&x, row + p, sizeof(x));
      for (int j = 0; j < N; ++j) {
        F8 y;
        std::memcpy(&y, bt + j * k + p, sizeof(y));
        acc[j] += x * y;
      }
    }
    for (int j = 0; j < N; ++j) {
      float dot = 0;
      for (int l = 0; l < kHalf; ++l) dot += acc[j][l];
      for (int64_t q = p; q < k; ++q) dot += row[q] * bt[j * k + q];
      float* out = c + r * ldc + j;
      *out = beta == 0.0f ? alpha * dot : alpha * dot + beta * *out;
    }
  }
}

}  // namespace

MESHDMA_CLONES void NarrowProduct(int64_t m, int64_t n, int64_t k, float alpha,
                                  const float* a, int64_t lda, const float* bt,
                                  float beta, float* c, int64_t ldc) {
  switch (n) {
    case 1:
      return NarrowRows<1>(m, k, alpha, a, lda, bt, beta, c, ldc);
    case 2:
      return NarrowRows<2>(m, k, alpha, a, lda, bt, beta, c, ldc);
    case 3:
      return NarrowRows<3>(m, k, alpha, a, lda, bt, beta, c, ldc);
    case 4:
      return NarrowRows<4>(m, k, alpha, a, lda, bt, beta, c, ldc);
    case 5:
      return NarrowRows<5>(m, k, alpha, a, lda, bt, beta, c, ldc);
    case 6:
      return NarrowRows<6>(m, k, alpha, a, lda, bt, beta, c, ldc);
    case 7:
      return NarrowRows<7>(m, k, alpha, a, lda, bt, beta, c, ldc);
    default:
      return NarrowRows<8>(m, k, alpha, a, lda, bt, beta, c, ldc);
  }
}

MESHDMA_CLONES void Scale(float* y, int64_t n, float a) {
  for (int64_t k = 0; k < n; ++k) y[k] *= a;
}

void OnlineSoftmaxRow(float* row, int64_t n, float* m, float* l, float* acc,
                      int64_t d) {
  const float m_new = n > 0 ? std::max(*m, RowMax(row, n)) : *m;
  if (m_new == -std::numeric_limits<float>::infinity()) {
    std::fill(row, row + n, 0.0f);
    return;
  }
  const float alpha = std::exp(*m - m_new);
  *l = alpha * *l + ExpShiftSum(row, n, m_new);
  if (alpha != 1.0f) Scale(acc, d, alpha);
  *m = m_new;
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
