// Naive attention references (for tests and benchmarks): the full score
// matrix in memory, double accumulation.
#ifndef MESHDMA_KERNELS_OPS_ATTENTION_REFERENCE_H_
#define MESHDMA_KERNELS_OPS_ATTENTION_REFERENCE_H_

#include <cstdint>
#include <vector>

namespace meshdma {

// q [B, H, Sq, D], k/v [B, Hkv, Skv, D] as f32 vectors; returns out and, if
// `lse` is non-null, the row log-sum-exp. Query head h uses kv head
// h / (H / Hkv). Causal masks key positions > query position.
std::vector<float> ReferenceAttention(const std::vector<float>& q,
                                      const std::vector<float>& k,
                                      const std::vector<float>& v, int64_t b,
                                      int64_t h, int64_t hkv, int64_t sq,
                                      int64_t skv, int64_t d, float scale,
                                      bool causal,
                                      std::vector<float>* lse = nullptr);

// Paged decode attention by gathering: for each sequence, copy its first
// context_lens[s] tokens out of the pages named by its block table into
// contiguous K/V and run `ReferenceAttention` with one query. query
// [num_seqs, H, D]; caches [Hkv, total_pages, page_size, D]; block_tables
// [num_seqs, pages_per_seq]. A sequence of length 0 gets zeros.
std::vector<float> ReferencePagedAttention(
    const std::vector<float>& query, const std::vector<float>& key_cache,
    const std::vector<float>& value_cache,
    const std::vector<int32_t>& context_lens,
    const std::vector<int32_t>& block_tables, int64_t num_seqs, int64_t h,
    int64_t hkv, int64_t total_pages, int64_t page_size, int64_t pages_per_seq,
    int64_t d, float scale);

// Attention backward by the explicit softmax Jacobian, in double: for each
// head, P = softmax(scale * q k^T [causal]), dV = P^T dO, dP = dO V^T,
// dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik), dQ = scale dS K, dK = scale dS^T
// Q; dK and dV of a kv head sum over the query heads that share it. Shapes
// as `ReferenceAttention`; `d_out` is like q.
void ReferenceAttentionBackward(const std::vector<float>& q,
                                const std::vector<float>& k,
                                const std::vector<float>& v,
                                const std::vector<float>& d_out, int64_t b,
                                int64_t h, int64_t hkv, int64_t sq, int64_t skv,
                                int64_t d, float scale, bool causal,
                                std::vector<float>* dq, std::vector<float>* dk,
                                std::vector<float>* dv);

}  // namespace meshdma

#endif  // MESHDMA_KERNELS_OPS_ATTENTION_REFERENCE_H_
