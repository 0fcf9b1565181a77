// Blocked matmul on a 3-D grid (i, j, k), the Pallas TPU matmul tutorial's
// kernel: x blocks [bm, bk] at (i, k), y blocks [bk, bn] at (k, j), the output
// block (i, j) fixed while k sweeps, an f32 accumulator in VMEM scratch
// zeroed at k == 0, and a fused activation applied at the last k step.
// Any m, n, k: edge blocks are partial; their zero padding contributes
// nothing to the products.
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
  int64_t block_m = 256;
  int64_t block_n = 256;
  int64_t block_k = 256;
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
