// Online-softmax attention over key/value blocks that arrive one at a time
// (the flash-attention recurrence, kept across calls). Ring attention feeds
// it the KV block in hand at each ring step; the KV-cache transfer example
// and the tensor-parallel block use it for their local attention.
//
// State per (query head, query row): the running max `m`, the running sum
// `l` and the f32 accumulator `acc` [D]. `Attend` folds in one KV block:
// S = scale * Q K^T, masked where a key's position is greater than the
// query's (causal), then m, l, acc are rescaled and P V added. Sub-blocks
// that the mask hides entirely are skipped, sub-blocks it does not touch are
// not masked, so a causal block costs what its unmasked part costs.
// `Finish` writes out = acc / l and, optionally, lse = m + log(l).
#ifndef MESHDMA_COLLECTIVES_FUSED_ONLINE_ATTENTION_H_
#define MESHDMA_COLLECTIVES_FUSED_ONLINE_ATTENTION_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"

namespace meshdma {

struct OnlineAttentionShape {
  int64_t num_heads = 1;     // H (query heads)
  int64_t num_kv_heads = 1;  // Hkv; H must be a multiple
  int64_t seq_q = 1;         // query rows per head
  int64_t head_dim = 1;      // D
};

class OnlineAttention {
 public:
  // Block sizes of the inner loop (rows of Q, rows of K per product).
  OnlineAttention(OnlineAttentionShape shape, float scale, bool causal,
                  int64_t block_q = 128, int64_t block_k = 128);

  // Resets m, l, acc for a new sweep.
  void Reset();

  // Folds in one KV block. q: f32 [H, seq_q, D]; k, v: f32 [Hkv, seq_k, D]
  // (contiguous). `q_pos` [seq_q] and `k_pos` [seq_k] are the global
  // sequence positions of the rows (used only when causal); within a run of
  // block_q (block_k) rows they should be increasing for the skip test to
  // be tight (any order is correct). Returns the number of (head, q-block,
  // k-block) products computed (for load-balance checks).
  int64_t Attend(const float* q, const float* k, const float* v, int64_t seq_k,
                 std::span<const int64_t> q_pos,
                 std::span<const int64_t> k_pos);

  // out: f32 [H, seq_q, D]; lse: f32 [H, seq_q] or null. Rows that saw no
  // key get 0 and lse -inf.
  void Finish(float* out, float* lse = nullptr) const;

  const OnlineAttentionShape& shape() const { return shape_; }

 private:
  OnlineAttentionShape shape_;
  float scale_;
  bool causal_;
  int64_t block_q_, block_k_;
  std::vector<float> m_, l_, acc_, s_;
};

}  // namespace meshdma

#endif  // MESHDMA_COLLECTIVES_FUSED_ONLINE_ATTENTION_H_
