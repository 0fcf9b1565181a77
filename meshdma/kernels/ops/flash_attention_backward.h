// Flash attention backward (FlashAttention-2) as two pallas_call kernels.
//
// Given the forward's q, k, v, out and row log-sum-exp `lse` (from
// `FlashAttention(..., &lse)`) and the output gradient d_out, computes dq,
// dk, dv without materialising the [Sq, Skv] score matrix. Per (query block
// i, key block j), P = exp(scale * Q_i K_j^T - lse_i) is recomputed
// blockwise, and with delta_i = rowsum(dO_i * O_i):
//   dV_j += P^T dO_i,  dP = dO_i V_j^T,  dS = P * (dP - delta_i),
//   dQ_i += scale * dS K_j,  dK_j += scale * dS^T Q_i.
// One kernel ("flash_attention_bwd") with grid (b, kv head, key block j,
// (query head in group, query block i)) computes each tile's P and dS once:
// dK_j and dV_j accumulate in f32 VMEM scratch while the last axis sweeps
// every query block of every query head that shares the kv head (so MQA/GQA
// gradients are summed over the group), and are written once; dQ of the
// group's query rows accumulates in an f32 scratch of [group, Sq, D] over
// every (j, i) and is written at the group's last grid point (its VMEM grows
// with Sq: 4 * group * Sq * D bytes, plus the output block). Causal: blocks
// entirely above the diagonal are skipped and not copied.
//
// Layouts and dtypes as `FlashAttention` (kernels/ops/flash_attention.h): q,
// out, d_out, dq [B, H, Sq, D]; k, v, dk, dv [B, Hkv, Skv, D]; all one dtype
// (f32, bf16 or f16; bf16/f16 are widened per block, accumulation is f32);
// lse f32 [B, H, Sq]. Any Sq, Skv (ragged blocks are masked). Options are the
// forward's (`block_q`, `block_k`, `causal`, `sm_scale`), and must match the
// forward's `causal` and `sm_scale`; `masks` must be the forward's (no
// gradient flows to `ab`).
#ifndef MESHDMA_KERNELS_OPS_FLASH_ATTENTION_BACKWARD_H_
#define MESHDMA_KERNELS_OPS_FLASH_ATTENTION_BACKWARD_H_

#include "absl/status/status.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/kernels/ops/flash_attention.h"

namespace meshdma {

absl::Status FlashAttentionBackward(const ArrayRef& q, const ArrayRef& k,
                                    const ArrayRef& v, const ArrayRef& out,
                                    const ArrayRef& d_out, const ArrayRef& lse,
                                    const ArrayRef& dq, const ArrayRef& dk,
                                    const ArrayRef& dv,
                                    const FlashAttentionOptions& options = {},
                                    const FlashAttentionMasks& masks = {});

}  // namespace meshdma

#endif  // MESHDMA_KERNELS_OPS_FLASH_ATTENTION_BACKWARD_H_
