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

#include <functional>
#include <string>
#include <tuple>

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
// output, and their log-sum-exp (float32 [batch, heads, seq / n], as
// flash attention's backward takes it).
std::tuple<at::Tensor, at::Tensor> RingAttention(
    ProcessGroupMeshdma& group, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, bool causal, c10::optional<double> sm_scale,
    const std::string& layout);

// The prefill rank's keys and values of one layer: k and v, float32
// [num_kv_heads, seq_len, head_dim] each.
using KvPrefillLayer =
    std::function<std::tuple<at::Tensor, at::Tensor>(int64_t layer)>;
// Called on the decode rank once a layer's pages have arrived, with that
// layer's key and value caches (views of `cache`, [num_kv_heads,
// total_pages, page_size, head_dim]).
using KvDecodeLayer = std::function<void(
    int64_t layer, const at::Tensor& key_cache, const at::Tensor& value_cache)>;

// One prompt's KV cache, layer by layer, from rank 0 (prefill) into the page
// table `block_table` (int32 [ceil(seq_len / page_size)], distinct pages) of
// rank 1's (decode) `cache`, a float32 heap tensor (meshdma.torch.zeros)
// [num_layers, 2, num_kv_heads, total_pages, page_size, head_dim] that both
// ranks allocated alike: collectives/fused/kv_transfer.h. Both ranks call
// it; a group of the 2 ranks of the launch. `prefill` runs on the prefill
// rank, `decode` (may be empty) on the decode rank, on the device's thread:
// the decode of layer l overlaps the transfer of layer l + 1 and the
// prefill of layer l + 2. Bad arguments raise before anything runs; an
// exception in a callback ends the group.
void KvCacheTransfer(ProcessGroupMeshdma& group, const at::Tensor& cache,
                     int64_t seq_len, const at::Tensor& block_table,
                     const KvPrefillLayer& prefill,
                     const KvDecodeLayer& decode);

}  // namespace meshdma::torch_backend

#endif  // MESHDMA_PYTHON_CSRC_FUSED_OPS_H_
