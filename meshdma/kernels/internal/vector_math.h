// Vectorised row kernels: attention's online softmax, and a product against
// a narrow matrix. Each is compiled for AVX-512, AVX2 and baseline x86-64
// and picked at load time (`target_clones`), or at the first call (RowMax
// and ExpShiftSum, whose AVX-512 form is shaped differently), so the
// library needs no -march flag.
#ifndef MESHDMA_KERNELS_INTERNAL_VECTOR_MATH_H_
#define MESHDMA_KERNELS_INTERNAL_VECTOR_MATH_H_

#include <cstdint>

namespace meshdma::kernels_internal {

// max(x[0..n)), -inf for n == 0.
float RowMax(const float* x, int64_t n);
// x[k] = exp(x[k] - shift) in place; returns the sum of the results. Inputs
// of -inf (masked) become exactly 0, results beyond float's range +inf, a
// NaN stays NaN. Relative error about 2e-7.
float ExpShiftSum(float* x, int64_t n, float shift);
// The two above as 16 lanes of two 8-float vectors: what they run where the
// machine lacks AVX-512 (tests check both forms).
float RowMax8x2(const float* x, int64_t n);
float ExpShiftSum8x2(float* x, int64_t n, float shift);
// y[k] *= a.
void Scale(float* y, int64_t n, float a);
// One row's step of the online softmax: the row's scores `row[0..n)`
// (masked entries -inf) join the running max `*m` and sum `*l`, the row's
// accumulator `acc[0..d)` is rescaled by exp(m_old - m_new), and the row
// becomes exp(score - m_new), ready for acc += P V. A row whose every key so
// far is masked becomes zeros and leaves m, l and acc as they were.
void OnlineSoftmaxRow(float* row, int64_t n, float* m, float* l, float* acc,
                      int64_t d);
// c[r, j] = alpha * dot(a[r, 0..k), bt[j, 0..k)) + beta * c[r, j] for r < m,
// j < n, with 1 <= n <= kMaxNarrowN: a product against a narrow B given
// transposed (`bt` [n, k], contiguous) that reads each row of `a` (leading
// dimension `lda`) once. beta == 0 ignores c's old values.
inline constexpr int64_t kMaxNarrowN = 8;
void NarrowProduct(int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* bt, float beta, float* c,
                   int64_t ldc);
// c[r, j] = sum over i < k of a[r, i] b[i, j] + beta * c[r, j] for r < m,
// j < n, beta 0 or 1 (beta == 0 ignores c's old values): a product that
// reads a and b where they lie, with 6 rows by 64 columns of c in registers
// while 64 rows of b, kept in L1, stream past. A BLAS call first packs a,
// which costs most where n or k is small: attention's P V (n the head
// dimension), and its scores Q K^T (k the head dimension, against K
// transposed by TransposeScaled). Runs on AVX-512 for n a multiple of 64
// and alpha 1 (the signature is Gemm's) and returns true; else returns
// false and leaves c untouched.
inline constexpr int64_t kRowTileColumns = 64;
// True where RowTileProduct runs (AVX-512).
bool RowTilesRun();
bool RowTileProduct(int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb,
                    float beta, float* c, int64_t ldc);
// dst[j * ld_dst + i] = scale * src[i * cols + j] for i < rows, j < cols:
// a scaled transpose of a contiguous block (attention's K block into the
// K^T that RowTileProduct multiplies Q by), in 16 x 16 register blocks on
// AVX-512.
void TransposeScaled(const float* src, int64_t rows, int64_t cols, float scale,
                     float* dst, int64_t ld_dst);
// Widening conversions of a contiguous run.
void ToFloat(const uint16_t* bf16_or_f16, float* out, int64_t n, bool is_bf16);

}  // namespace meshdma::kernels_internal

#endif  // MESHDMA_KERNELS_INTERNAL_VECTOR_MATH_H_
