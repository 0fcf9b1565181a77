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

}  // namespace meshdma

#endif  // MESHDMA_KERNELS_OPS_ATTENTION_REFERENCE_H_
