// The block matrix product every kernel uses for f32 (QK^T, PV, matmul
// tiles), and the library behind it. meshdma calls OpenBLAS's `cblas_sgemm`,
// single-threaded: each device is already a thread, so the BLAS must not
// start its own. OpenBLAS's thread count is process-wide: it is 1 while any
// meshdma product runs and the process's own count otherwise, so that other
// callers in the process (torch's matmuls) keep their threads. The choice
// was measured against Eigen and a hand loop: at the kernels' block sizes
// (64-512) OpenBLAS ran 4-6x Eigen built with the library's portable flags
// and 10x the loop (`build/bench/meshdma-bench-kernels`). Two shapes skip
// OpenBLAS, whose packing of A costs most where B is narrow (2n flops per
// element of A packed): B of at most 8 columns (a row kernel that reads A
// once), and, on AVX-512, B of 64 or 128 columns with alpha 1, attention's
// P V (row tiles that read A where it lies; kernels_internal::RowTileProduct).
#ifndef MESHDMA_KERNELS_BLAS_H_
#define MESHDMA_KERNELS_BLAS_H_

#include <cstdint>

#include "absl/status/status.h"

namespace meshdma {

// C[m, n] = alpha * op(A) op(B) + beta * C, row-major, with leading
// dimensions `lda`, `ldb`, `ldc`; op(A) is [m, k] (A stored [k, m] when
// `transpose_a`), op(B) is [k, n] (B stored [n, k] when `transpose_b`).
// InvalidArgument, naming the operand, when a size is negative or beyond
// BLAS's int, a leading dimension is shorter than its row, or a pointer is
// null for a non-empty operand.
absl::Status CheckedGemm(bool transpose_a, bool transpose_b, int64_t m,
                         int64_t n, int64_t k, float alpha, const float* a,
                         int64_t lda, const float* b, int64_t ldb, float beta,
                         float* c, int64_t ldc);

// The same sizes checked, for `Gemm` and `GemmNaive`.
absl::Status CheckGemmArgs(bool transpose_a, bool transpose_b, int64_t m,
                           int64_t n, int64_t k, const float* a, int64_t lda,
                           const float* b, int64_t ldb, const float* c,
                           int64_t ldc);

// `CheckedGemm` for callers whose sizes come from validated shapes (the
// kernels): a bad size aborts the process with the message rather than
// reaching the BLAS.
void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
          float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
          float beta, float* c, int64_t ldc);

// The same product by a straightforward loop (reference and comparison).
void GemmNaive(bool transpose_a, bool transpose_b, int64_t m, int64_t n,
               int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// "OpenBLAS 0.3.21 (1 thread, core SkylakeX)".
const char* BlasDescription();

}  // namespace meshdma

#endif  // MESHDMA_KERNELS_BLAS_H_
