#include "meshdma/kernels/internal/vector_math.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "meshdma/base/dtype.h"
#include "meshdma/kernels/internal/clones.h"

// GCC 12 warns inside its own AVX-512 intrinsics, whose undefined operand
// initializes itself (GCC bug 105593); nothing here reads such a value.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace meshdma::kernels_internal {
namespace {

// RowMax and ExpShiftSum stream rows 16 lanes at a time: in AVX-512
// intrinsics (RowMax16, ExpShiftSum16), elsewhere as two `F8`s through the
// templates below (GCC turns an F32x16 comparison into 16 scalar ones on
// AVX2). NarrowProduct's 16 columns are two `F8`s.
constexpr int kLanes = 16;
constexpr int kHalf = kF8Lanes;
static_assert(kLanes == 2 * kHalf && kLanes == kF32x16Lanes);

// The 16 lanes as `kParts` vectors of V (floats) and VI (their int twins).
template <typename V, typename VI>
struct Lanes {
  static constexpr int kWidth = sizeof(V) / sizeof(float);
  static constexpr int kParts = kLanes / kWidth;
};

template <typename V, typename VI>
[[gnu::always_inline]] inline float RowMaxOf(const float* x, int64_t n) {
  using L = Lanes<V, VI>;
  V m[L::kParts];
  for (V& part : m) part = V{} - std::numeric_limits<float>::infinity();
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    for (int h = 0; h < L::kParts; ++h) {
      V v;
      std::memcpy(&v, x + k + h * L::kWidth, sizeof(v));
      m[h] = v > m[h] ? v : m[h];
    }
  }
  float r = -std::numeric_limits<float>::infinity();
  for (int l = 0; l < kLanes; ++l) {
    const float v = m[l / L::kWidth][l % L::kWidth];
    r = v > r ? v : r;
  }
  for (; k < n; ++k) r = x[k] > r ? x[k] : r;
  return r;
}

// v = exp(v) lane by lane, for v already clamped to [-87.3, 88.7] (or NaN):
// range reduction to [-ln2/2, ln2/2] and a degree-6 polynomial (Cephes expf
// coefficients). (By reference: a vector return value's ABI differs
// between the clones.)
template <typename V, typename VI>
[[gnu::always_inline]] inline void ExpClampedInPlace(V& v) {
  V fx = v * 1.44269504088896341f;
  fx = (fx + 12582912.0f) - 12582912.0f;  // Round to nearest.
  const V r = v - fx * 0.693359375f + fx * 2.12194440e-4f;
  V y = r * 1.9875691500E-4f + 1.3981999507E-3f;
  y = y * r + 8.3334519073E-3f;
  y = y * r + 4.1665795894E-2f;
  y = y * r + 1.6666665459E-1f;
  y = y * r + 5.0000001201E-1f;
  y = y * r * r + r + 1.0f;
  const VI e = (__builtin_convertvector(fx, VI) + 127) << 23;
  v = y * reinterpret_cast<V>(e);
}

template <typename V, typename VI>
[[gnu::always_inline]] inline float ExpShiftSumOf(float* x, int64_t n,
                                                  float shift) {
  using L = Lanes<V, VI>;
  V sum[L::kParts];
  for (V& part : sum) part = V{} + 0.0f;
  const V hi = V{} + 88.7f, lo = V{} - 87.3f;
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
    for (int h = 0; h < L::kParts; ++h) {
      V v;
      std::memcpy(&v, p + h * L::kWidth, sizeof(v));
      v = v - shift;
      // Clamped to [-87.3, 88.7] (a NaN stays NaN: both tests are false for
      // it), so that the exponent's conversion to int is defined; lanes
      // below are zeroed after, above the result is already +inf.
      const VI underflow = v < lo;
      v = hi < v ? hi : v;
      v = v < lo ? lo : v;
      ExpClampedInPlace<V, VI>(v);
      v = reinterpret_cast<V>(reinterpret_cast<VI>(v) & ~underflow);
      std::memcpy(p + h * L::kWidth, &v, sizeof(v));
      if (p != tail) sum[h] += v;
    }
  }
  // The lanes' sums, then the tail's terms one by one.
  float r = 0;
  for (int l = 0; l < kLanes; ++l) r += sum[l / L::kWidth][l % L::kWidth];
  for (int64_t k = n - n % kLanes; k < n; ++k) {
    x[k] = tail[k % kLanes];
    r += x[k];
  }
  return r;
}

// AVX-512's shape of each (the other, 8x2, is declared in the header).
// RowMax in four independent maxima of 16 lanes, so that the maximum's
// latency does not bound a row (it did, at a third of the softmax's time),
// then the ragged tail masked. A NaN is passed over, as in RowMaxOf:
// vmaxps returns its second operand, the running maximum, for one.
[[gnu::target("avx512f")]] float RowMax16(const float* x, int64_t n) {
  const __m512 lowest = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 m[4] = {lowest, lowest, lowest, lowest};
  int64_t k = 0;
  for (; k + 4 * kLanes <= n; k += 4 * kLanes) {
    for (int p = 0; p < 4; ++p) {
      m[p] = _mm512_max_ps(_mm512_loadu_ps(x + k + p * kLanes), m[p]);
    }
  }
  for (; k + kLanes <= n; k += kLanes) {
    m[0] = _mm512_max_ps(_mm512_loadu_ps(x + k), m[0]);
  }
  if (k < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - k)) - 1);
    m[1] = _mm512_max_ps(_mm512_mask_loadu_ps(lowest, tail, x + k), m[1]);
  }
  return _mm512_reduce_max_ps(
      _mm512_max_ps(_mm512_max_ps(m[0], m[1]), _mm512_max_ps(m[2], m[3])));
}
// ExpShiftSumOf's AVX-512 form, in fewer instructions: the exponent is
// applied by vscalefps (which also gives +inf past float's range) and the
// lanes below -87.3 are zeroed by its mask, so only +inf needs a clamp (to
// 100, whose result is +inf already). A NaN stays NaN: the mask keeps
// unordered lanes, and the clamp returns its second operand for them.
[[gnu::target("avx512f"), gnu::always_inline]] inline __m512 ExpShifted16(
    __m512 v) {
  const __mmask16 keep =
      _mm512_cmp_ps_mask(v, _mm512_set1_ps(-87.3f), _CMP_NLT_UQ);
  v = _mm512_min_ps(_mm512_set1_ps(100.0f), v);
  const __m512 fx = _mm512_roundscale_ps(
      _mm512_mul_ps(v, _mm512_set1_ps(1.44269504088896341f)),
      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // r = v - fx ln 2, ln 2 in two parts (Cody and Waite), then Cephes' degree
  // 6 polynomial, as ExpClampedInPlace.
  __m512 r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), v);
  r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_fmadd_ps(r, _mm512_set1_ps(1.9875691500E-4f),
                             _mm512_set1_ps(1.3981999507E-3f));
  for (float c : {8.3334519073E-3f, 4.1665795894E-2f, 1.6666665459E-1f,
                  5.0000001201E-1f}) {
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(c));
  }
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r),
                      _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_maskz_scalef_ps(keep, y, fx);
}

[[gnu::target("avx512f")]] float ExpShiftSum16(float* x, int64_t n,
                                               float shift) {
  const __m512 s = _mm512_set1_ps(shift);
  __m512 sum = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    const __m512 v = ExpShifted16(_mm512_sub_ps(_mm512_loadu_ps(x + k), s));
    _mm512_storeu_ps(x + k, v);
    sum = _mm512_add_ps(sum, v);
  }
  float r = _mm512_reduce_add_ps(sum);
  // The ragged tail: its lanes only, the others masked off.
  if (k < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - k)) - 1);
    const __m512 v =
        ExpShifted16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + k), s));
    _mm512_mask_storeu_ps(x + k, tail, v);
    r += _mm512_mask_reduce_add_ps(tail, v);
  }
  return r;
}

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

// RowTileProduct's tile: kRows rows by 64 columns of c in kRows x 4
// registers, each step broadcasting one element of each row of a (a load,
// not a shuffle, which would take an FMA's port) into one row of b.
constexpr int kTileRows = 6;  // 24 accumulators of AVX-512's 32 registers.
// The rows of b one sweep of the tiles reads: 16 KiB, which stay in L1
// while every tile of rows multiplies them (64 measured best against 32
// and 128: `meshdma-bench-kernels --sections 4`).
constexpr int64_t kTileDepth = 64;

template <int kRows>
[[gnu::target("avx512f"), gnu::always_inline]] inline void ProductTile(
    int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
    bool accumulate, float* c, int64_t ldc) {
  constexpr int kVectors = kRowTileColumns / 16;
  __m512 t[kRows][kVectors];
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < kVectors; ++j) {
      t[r][j] = accumulate ? _mm512_loadu_ps(c + r * ldc + 16 * j)
                           : _mm512_setzero_ps();
    }
  }
  for (int64_t i = 0; i < k; ++i) {
    __m512 row[kVectors];
    for (int j = 0; j < kVectors; ++j) {
      row[j] = _mm512_loadu_ps(b + i * ldb + 16 * j);
    }
    for (int r = 0; r < kRows; ++r) {
      const __m512 x = _mm512_set1_ps(a[r * lda + i]);
      for (int j = 0; j < kVectors; ++j) {
        t[r][j] = _mm512_fmadd_ps(x, row[j], t[r][j]);
      }
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < kVectors; ++j) {
      _mm512_storeu_ps(c + r * ldc + 16 * j, t[r][j]);
    }
  }
}

[[gnu::target("avx512f")]] void RowTileProduct16(int64_t m, int64_t n,
                                                 int64_t k, const float* a,
                                                 int64_t lda, const float* b,
                                                 int64_t ldb, bool accumulate,
                                                 float* c, int64_t ldc) {
  for (int64_t col = 0; col < n; col += kRowTileColumns) {
    // k == 0 still applies beta (the first sweep).
    for (int64_t i = 0; i == 0 || i < k; i += kTileDepth) {
      const int64_t depth = std::min(kTileDepth, k - i);
      const bool sum = i > 0 || accumulate;
      const float* bi = b + i * ldb + col;
      int64_t r = 0;
      for (; r + kTileRows <= m; r += kTileRows) {
        ProductTile<kTileRows>(depth, a + r * lda + i, lda, bi, ldb, sum,
                               c + r * ldc + col, ldc);
      }
      for (; r < m; ++r) {
        ProductTile<1>(depth, a + r * lda + i, lda, bi, ldb, sum,
                       c + r * ldc + col, ldc);
      }
    }
  }
}

}  // namespace

MESHDMA_CLONES float RowMax8x2(const float* x, int64_t n) {
  return RowMaxOf<F8, I8>(x, n);
}

MESHDMA_CLONES float ExpShiftSum8x2(float* x, int64_t n, float shift) {
  return ExpShiftSumOf<F8, I8>(x, n, shift);
}

float RowMax(const float* x, int64_t n) {
  return HasAvx512() ? RowMax16(x, n) : RowMax8x2(x, n);
}

// The 8x2 form runs the ragged tail as one more 16 lanes padded with -inf
// and gives the same bits as 16 scalar lanes would; the AVX-512 form
// (ExpShifted16) contracts the polynomial's products and sums to FMA and
// applies the exponent with vscalefps, which may change a result's last
// bit.
float ExpShiftSum(float* x, int64_t n, float shift) {
  return HasAvx512() ? ExpShiftSum16(x, n, shift) : ExpShiftSum8x2(x, n, shift);
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

namespace {

// Rows r[0..16) become columns: the classic three rounds of 2 x 2 block
// swaps (floats, pairs of floats, then 128-bit lanes twice).
[[gnu::target("avx512f"), gnu::always_inline]] inline void Transpose16(
    __m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    for (int h = 0; h < 2; ++h) {
      const __m512d a = _mm512_castps_pd(t[i + h]);
      const __m512d b = _mm512_castps_pd(t[i + 2 + h]);
      r[i + 2 * h] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
      r[i + 2 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    }
  }
  // r[4q + p] holds, in lane L, the 4 x 4 block (rows 4q.., column 4L + p).
  for (int q = 0; q < 16; q += 8) {
    for (int p = 0; p < 4; ++p) {
      t[q + p] = _mm512_shuffle_f32x4(r[q + p], r[q + 4 + p], 0x88);
      t[q + 4 + p] = _mm512_shuffle_f32x4(r[q + p], r[q + 4 + p], 0xdd);
    }
  }
  for (int p = 0; p < 8; ++p) {
    r[p] = _mm512_shuffle_f32x4(t[p], t[8 + p], 0x88);
    r[8 + p] = _mm512_shuffle_f32x4(t[p], t[8 + p], 0xdd);
  }
}

// The whole 16 x 16 blocks of rows16 x cols16 of src (leading dimension
// ld_src).
[[gnu::target("avx512f")]] void TransposeScaled16(const float* src,
                                                  int64_t ld_src,
                                                  int64_t rows16,
                                                  int64_t cols16, float scale,
                                                  float* dst, int64_t ld_dst) {
  const __m512 f = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < rows16; i += 16) {
    for (int64_t j = 0; j < cols16; j += 16) {
      __m512 r[16];
      for (int k = 0; k < 16; ++k) {
        r[k] = _mm512_mul_ps(f, _mm512_loadu_ps(src + (i + k) * ld_src + j));
      }
      Transpose16(r);
      for (int k = 0; k < 16; ++k) {
        _mm512_storeu_ps(dst + (j + k) * ld_dst + i, r[k]);
      }
    }
  }
}

}  // namespace

bool RowTilesRun() { return HasAvx512(); }

void TransposeScaled(const float* src, int64_t rows, int64_t cols, float scale,
                     float* dst, int64_t ld_dst) {
  // The 16 x 16 blocks, then the ragged rows and columns one by one.
  const int64_t rows16 = HasAvx512() ? rows / 16 * 16 : 0;
  const int64_t cols16 = HasAvx512() ? cols / 16 * 16 : 0;
  if (rows16 > 0 && cols16 > 0) {
    TransposeScaled16(src, cols, rows16, cols16, scale, dst, ld_dst);
  }
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = i < rows16 ? cols16 : 0; j < cols; ++j) {
      dst[j * ld_dst + i] = scale * src[i * cols + j];
    }
  }
}

bool RowTileProduct(int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb,
                    float beta, float* c, int64_t ldc) {
  if (!HasAvx512() || n % kRowTileColumns != 0 || alpha != 1.0f ||
      (beta != 0.0f && beta != 1.0f)) {
    return false;
  }
  RowTileProduct16(m, n, k, a, lda, b, ldb, beta == 1.0f, c, ldc);
  return true;
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
