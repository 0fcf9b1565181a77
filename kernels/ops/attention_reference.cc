#include "kernels/ops/attention_reference.h"

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

}  // namespace meshdma
