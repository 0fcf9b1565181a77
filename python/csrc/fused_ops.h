// meshdma's fused communication kernels on a meshdma process group: each a
// collective (every rank of the group calls it, in the same order as the
// group's other calls) whose communication overlaps its compute
// (collectives/fused/). They run over the launch's mesh axis, so the group
// must hold every rank of the launch. float32 CPU tensors; a bad argument
// raises on its rank before anything is queued (ValueError, TypeError);
// a failure inside the kernel ends the group, as a failed collective does.
// No autograd.
#ifndef MESHDMA_PYTHON_CSRC_FUSED_OPS_H_
#define MESHDMA_PYTHON_CSRC_FUSED_OPS_H_

#include <string>

#include "python/csrc/process_group_meshdma.h"

namespace meshdma::torch_backend {

// all_gather(x) @ w: x [m / n, k] this rank's rows, w [k, n_out] -> [m, n_out].
at::Tensor AllGatherMatmul(ProcessGroupMeshdma& group, const at::Tensor& x,
                           const at::Tensor& w);

// reduce_scatter(x @ w) over rows: x [m, k / n] and w [k / n, n_out], this
// rank's slices of the contraction -> rows block `rank` [m / n, n_out] of
// the sum.
at::Tensor MatmulReduceScatter(ProcessGroupMeshdma& group, const at::Tensor& x,
                               const at::Tensor& w);

// Attention over a sequence sharded across the ranks: q [batch, heads,
// seq / n, head_dim], k and v [batch, kv_heads, seq / n, head_dim] this
// rank's rows in `layout` ("contiguous": rank i holds rows [i S/n, (i+1)
// S/n); "zigzag": chunks i and 2n-1-i of 2n, which balances causal work);
// sm_scale defaults to 1/sqrt(head_dim). Returns this rank's rows of the
// output.
at::Tensor RingAttention(ProcessGroupMeshdma& group, const at::Tensor& q,
                         const at::Tensor& k, const at::Tensor& v, bool causal,
                         c10::optional<double> sm_scale,
                         const std::string& layout);

}  // namespace meshdma::torch_backend

#endif  // MESHDMA_PYTHON_CSRC_FUSED_OPS_H_
