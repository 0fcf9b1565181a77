#include "meshdma/kernels/ops/attention_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace meshdma {

std::vector<float> ReferenceAttention(const std::vector<float>& q,
                                      const std::vector<float>& k,
                                      const std::vector<float>& v, int64_t b,
                                      int64_t h, int64_t hkv, int64_t sq,
                                      int64_t skv, int64_t d, float scale,
                                      bool causal, std::vector<float>* lse) {
  std::vector<float> out(b * h * sq * d, 0.0f);
  if (lse != nullptr) lse->assign(b * h * sq, 0.0f);
  std::vector<double> s(skv);
  const int64_t group = h / hkv;
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hi = 0; hi < h; ++hi) {
      const float* qh = q.data() + (bi * h + hi) * sq * d;
      const int64_t kh = (bi * hkv + hi / group) * skv * d;
      for (int64_t i = 0; i < sq; ++i) {
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < skv; ++j) {
          if (causal && j > i) {
            s[j] = -std::numeric_limits<double>::infinity();
            continue;
          }
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += double(qh[i * d + c]) * k[kh + j * d + c];
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < skv; ++j) {
          s[j] = std::isinf(s[j]) ? 0.0 : std::exp(s[j] - mx);
          sum += s[j];
        }
        float* o = out.data() + ((bi * h + hi) * sq + i) * d;
        for (int64_t c = 0; c < d; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < skv; ++j) acc += s[j] * v[kh + j * d + c];
          o[c] = sum > 0 ? static_cast<float>(acc / sum) : 0.0f;
        }
        if (lse != nullptr)
          (*lse)[(bi * h + hi) * sq + i] =
              static_cast<float>(mx + std::log(sum));
      }
    }
  }
  return out;
}

std::vector<float> ReferencePagedAttention(
    const std::vector<float>& query, const std::vector<float>& key_cache,
    const std::vector<float>& value_cache,
    const std::vector<int32_t>& context_lens,
    const std::vector<int32_t>& block_tables, int64_t num_seqs, int64_t h,
    int64_t hkv, int64_t total_pages, int64_t page_size, int64_t pages_per_seq,
    int64_t d, float scale) {
  std::vector<float> out(num_seqs * h * d, 0.0f);
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t len = context_lens[s];
    if (len == 0) continue;
    std::vector<float> k(hkv * len * d), v(hkv * len * d);
    for (int64_t kh = 0; kh < hkv; ++kh) {
      for (int64_t t = 0; t < len; ++t) {
        const int64_t page = block_tables[s * pages_per_seq + t / page_size];
        const int64_t src =
            ((kh * total_pages + page) * page_size + t % page_size) * d;
        for (int64_t c = 0; c < d; ++c) {
          k[(kh * len + t) * d + c] = key_cache[src + c];
          v[(kh * len + t) * d + c] = value_cache[src + c];
        }
      }
    }
    std::vector<float> q(query.begin() + s * h * d,
                         query.begin() + (s + 1) * h * d);
    // q as [1, H, 1, D], k/v as [1, Hkv, len, D].
    auto o = ReferenceAttention(q, k, v, 1, h, hkv, 1, len, d, scale, false);
    std::copy(o.begin(), o.end(), out.begin() + s * h * d);
  }
  return out;
}

void ReferenceAttentionBackward(const std::vector<float>& q,
                                const std::vector<float>& k,
                                const std::vector<float>& v,
                                const std::vector<float>& d_out, int64_t b,
                                int64_t h, int64_t hkv, int64_t sq, int64_t skv,
                                int64_t d, float scale, bool causal,
                                std::vector<float>* dq, std::vector<float>* dk,
                                std::vector<float>* dv) {
  std::vector<double> gq(b * h * sq * d, 0.0), gk(b * hkv * skv * d, 0.0),
      gv(b * hkv * skv * d, 0.0);
  std::vector<double> p(skv), dp(skv);
  const int64_t group = h / hkv;
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hi = 0; hi < h; ++hi) {
      const int64_t qh = (bi * h + hi) * sq * d;
      const int64_t kh = (bi * hkv + hi / group) * skv * d;
      for (int64_t i = 0; i < sq; ++i) {
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < skv; ++j) {
          if (causal && j > i) {
            p[j] = -std::numeric_limits<double>::infinity();
            continue;
          }
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += double(q[qh + i * d + c]) * k[kh + j * d + c];
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < skv; ++j) {
          p[j] = std::isinf(p[j]) ? 0.0 : std::exp(p[j] - mx);
          sum += p[j];
        }
        double pdp = 0;  // sum_j P_ij dP_ij
        for (int64_t j = 0; j < skv; ++j) {
          p[j] = sum > 0 ? p[j] / sum : 0.0;
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += double(d_out[qh + i * d + c]) * v[kh + j * d + c];
          dp[j] = dot;
          pdp += p[j] * dot;
        }
        for (int64_t j = 0; j < skv; ++j) {
          const double ds = p[j] * (dp[j] - pdp);
          for (int64_t c = 0; c < d; ++c) {
            gv[kh + j * d + c] += p[j] * d_out[qh + i * d + c];
            gq[qh + i * d + c] += scale * ds * k[kh + j * d + c];
            gk[kh + j * d + c] += scale * ds * q[qh + i * d + c];
          }
        }
      }
    }
  }
  dq->assign(gq.begin(), gq.end());
  dk->assign(gk.begin(), gk.end());
  dv->assign(gv.begin(), gv.end());
}

}  // namespace meshdma
