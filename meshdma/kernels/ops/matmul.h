// Blocked matmul on a 3-D grid (i, j, k), the Pallas TPU matmul tutorial's
// kernel: x blocks [bm, bk] at (i, k), y blocks [bk, bn] at (k, j), and the
// f32 output block (i, j), resident while k sweeps, as the accumulator
// (written at k == 0, added to after), with a fused activation applied at
// the last k step. x and y are read where they lie (strided views).
// Any m, n, k: edge blocks are partial, and the products run over their
// valid parts.
#ifndef MESHDMA_KERNELS_OPS_MATMUL_H_
#define MESHDMA_KERNELS_OPS_MATMUL_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/kernels/pallas_call.h"

namespace meshdma {

enum class Activation { kNone, kRelu, kGelu, kSilu };
absl::string_view ActivationName(Activation a);
float ApplyActivation(Activation a, float v);

struct MatmulOptions {
  // 512 each way: every block product multiplies 512 x 512 x 512, where
  // OpenBLAS's packing of both operands costs a few percent (at 256, 14%
  // of the product time). Smaller blocks pipeline finer.
  int64_t block_m = 512;
  int64_t block_n = 512;
  int64_t block_k = 512;
  Activation activation = Activation::kNone;
  PipelineStats* stats = nullptr;
};

// The kernel for x f32[m, k] times y f32[k, n] into f32[m, n], as a value
// (for `vmap`: batched matmul is `vmap(*MatmulKernel(...), {0, 0})`).
absl::StatusOr<Kernel> MatmulKernel(int64_t m, int64_t n, int64_t k,
                                    const MatmulOptions& options = {});

absl::Status Matmul(const ArrayRef& x, const ArrayRef& y, const ArrayRef& out,
                    const MatmulOptions& options = {});

}  // namespace meshdma

#endif  // MESHDMA_KERNELS_OPS_MATMUL_H_
