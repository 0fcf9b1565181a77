// Flash attention forward as pallas_call kernels.
//
// Forward, per (batch, head, query block i), sweeping key blocks j on the
// last grid axis: S = scale * Q_i K_j^T, then the online softmax with the
// running row max `m` and row sum `l` in VMEM scratch and the output
// accumulator `acc` (f32) rescaled by exp(m_old - m_new) before adding
// P V_j; at the last j, O_i = acc / l. Peak memory is O(block_q * block_k)
// per device instead of naive attention's O(Sq * Skv).
//
// Layouts: q f32/bf16/f16 [B, H, Sq, D]; k, v the same dtype [B, Hkv, Skv,
// D] with H a multiple of Hkv: Hkv == H is MHA, Hkv == 1 MQA, else GQA (query
// head h reads kv head h / (H / Hkv), through the K/V index maps). Inputs of
// bf16/f16 are widened to f32 per block; all accumulation is f32; the output
// has q's dtype. Causal: query position p attends to key positions <= p; key
// blocks entirely above the diagonal are neither copied (their index map
// repeats the last needed block) nor computed. Any Sq and Skv: ragged key
// blocks are masked, ragged query rows are not written.
#ifndef MESHDMA_KERNELS_OPS_FLASH_ATTENTION_H_
#define MESHDMA_KERNELS_OPS_FLASH_ATTENTION_H_

#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/kernels/pallas_call.h"

namespace meshdma {

struct FlashAttentionOptions {
  int64_t block_q = 256;
  int64_t block_k = 256;
  bool causal = false;
  std::optional<float> sm_scale;  // Default 1 / sqrt(D).
  PipelineStats* stats = nullptr;
};

// The optional inputs of the batched kernels (JAX's and PyTorch/XLA's
// `flash_attention`), each null when absent:
//   q_segment_ids i32 [B, Sq] and kv_segment_ids i32 [B, Skv], both or
//     neither: query row r attends to key c only where their ids are equal
//     (packed sequences);
//   ab f32 [B, H, Sq, Skv]: a bias added before the scale, so the logits are
//     scale * (q k^T + ab).
// A query row with every key masked gets a zero output and an lse of -inf.
struct FlashAttentionMasks {
  const ArrayRef* q_segment_ids = nullptr;
  const ArrayRef* kv_segment_ids = nullptr;
  const ArrayRef* ab = nullptr;
};

// out = softmax(scale * (q k^T [+ ab]) [+ causal and segment masks]) v.
// `lse`, when given, is an f32 [B, H, Sq] output receiving the row
// log-sum-exp (for the backward).
absl::Status FlashAttention(const ArrayRef& q, const ArrayRef& k,
                            const ArrayRef& v, const ArrayRef& out,
                            const FlashAttentionOptions& options = {},
                            const ArrayRef* lse = nullptr,
                            const FlashAttentionMasks& masks = {});

// The single-sequence kernel: q [Sq, D], k and v [Skv, D] -> out [Sq, D], as
// in the Pallas talk. MHA is `vmap(kernel, {0, 0, 0})`, batched MHA vmaps
// that again, MQA is `vmap(kernel, {0, std::nullopt, std::nullopt})`.
absl::StatusOr<Kernel> FlashAttentionKernel(
    int64_t sq, int64_t skv, int64_t d, DType dtype,
    const FlashAttentionOptions& options = {});

}  // namespace meshdma

#endif  // MESHDMA_KERNELS_OPS_FLASH_ATTENTION_H_
