// Vectorised row kernels for attention's online softmax. Each is compiled
// for AVX-512, AVX2 and baseline x86-64 and picked at load time
// (`target_clones`), so the library needs no -march flag.
#ifndef MESHDMA_KERNELS_INTERNAL_VECTOR_MATH_H_
#define MESHDMA_KERNELS_INTERNAL_VECTOR_MATH_H_

#include <cstdint>

namespace meshdma::kernels_internal {

// max(x[0..n)), -inf for n == 0.
float RowMax(const float* x, int64_t n);
// x[k] = exp(x[k] - shift) in place; returns the sum of the results. Inputs
// of -inf (masked) become exactly 0. Relative error about 2e-7.
float ExpShiftSum(float* x, int64_t n, float shift);
// y[k] *= a.
void Scale(float* y, int64_t n, float a);
// Widening conversions of a contiguous run.
void ToFloat(const uint16_t* bf16_or_f16, float* out, int64_t n, bool is_bf16);

}  // namespace meshdma::kernels_internal

#endif  // MESHDMA_KERNELS_INTERNAL_VECTOR_MATH_H_
