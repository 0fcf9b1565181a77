#include "meshdma/collectives/fused/online_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "meshdma/kernels/blas.h"
#include "meshdma/kernels/internal/vector_math.h"

namespace meshdma {
namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
}  // namespace

OnlineAttention::OnlineAttention(OnlineAttentionShape shape, float scale,
                                 bool causal, int64_t block_q, int64_t block_k)
    : shape_(shape),
      scale_(scale),
      causal_(causal),
      block_q_(std::max<int64_t>(1, block_q)),
      block_k_(std::max<int64_t>(1, block_k)) {
  const int64_t rows = shape_.num_heads * shape_.seq_q;
  m_.resize(rows);
  l_.resize(rows);
  acc_.resize(rows * shape_.head_dim);
  s_.resize(block_q_ * block_k_);
  Reset();
}

void OnlineAttention::Reset() {
  std::fill(m_.begin(), m_.end(), kNegInf);
  std::fill(l_.begin(), l_.end(), 0.0f);
  std::fill(acc_.begin(), acc_.end(), 0.0f);
}

int64_t OnlineAttention::Attend(const float* q, const float* k, const float* v,
                                int64_t seq_k, std::span<const int64_t> q_pos,
                                std::span<const int64_t> k_pos) {
  const int64_t h_count = shape_.num_heads, sq = shape_.seq_q,
                d = shape_.head_dim;
  const int64_t group = h_count / shape_.num_kv_heads;
  int64_t products = 0;
  for (int64_t i0 = 0; i0 < sq; i0 += block_q_) {
    const int64_t bq = std::min(block_q_, sq - i0);
    // The query block's position range decides, per key block, whether the
    // causal mask hides all of it, none of it, or part.
    int64_t q_min = 0, q_max = 0;
    if (causal_) {
      q_min = *std::min_element(q_pos.begin() + i0, q_pos.begin() + i0 + bq);
      q_max = *std::max_element(q_pos.begin() + i0, q_pos.begin() + i0 + bq);
    }
    for (int64_t j0 = 0; j0 < seq_k; j0 += block_k_) {
      const int64_t bk = std::min(block_k_, seq_k - j0);
      bool partial = false;
      if (causal_) {
        const int64_t k_min =
            *std::min_element(k_pos.begin() + j0, k_pos.begin() + j0 + bk);
        const int64_t k_max =
            *std::max_element(k_pos.begin() + j0, k_pos.begin() + j0 + bk);
        if (k_min > q_max) continue;  // Entirely above the diagonal.
        partial = k_max > q_min;
      }
      for (int64_t h = 0; h < h_count; ++h) {
        ++products;
        const int64_t kvh = h / group;
        const float* qb = q + (h * sq + i0) * d;
        const float* kb = k + (kvh * seq_k + j0) * d;
        const float* vb = v + (kvh * seq_k + j0) * d;
        float* s = s_.data();
        float* m = m_.data() + h * sq + i0;
        float* l = l_.data() + h * sq + i0;
        float* acc = acc_.data() + (h * sq + i0) * d;
        // Step 1: S = scale * Q K^T for this pair of blocks.
        Gemm(false, true, bq, bk, d, scale_, qb, d, kb, d, 0.0f, s, bk);
        // Step 2: mask, then the online softmax update of m, l, acc.
        for (int64_t r = 0; r < bq; ++r) {
          float* row = s + r * bk;
          if (partial) {
            const int64_t p = q_pos[i0 + r];
            for (int64_t c = 0; c < bk; ++c) {
              if (k_pos[j0 + c] > p) row[c] = kNegInf;
            }
          }
          kernels_internal::OnlineSoftmaxRow(row, bk, &m[r], &l[r], acc + r * d,
                                             d);
        }
        // Step 3: acc += P V.
        Gemm(false, false, bq, d, bk, 1.0f, s, bk, vb, d, 1.0f, acc, d);
      }
    }
  }
  return products;
}

void OnlineAttention::Finish(float* out, float* lse) const {
  const int64_t rows = shape_.num_heads * shape_.seq_q, d = shape_.head_dim;
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = l_[r] > 0 ? 1.0f / l_[r] : 0.0f;
    for (int64_t c = 0; c < d; ++c) out[r * d + c] = acc_[r * d + c] * inv;
    if (lse != nullptr) lse[r] = l_[r] > 0 ? m_[r] + std::log(l_[r]) : kNegInf;
  }
}

}  // namespace meshdma
