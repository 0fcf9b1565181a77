// Small helpers the numbered examples share: the random inputs they check
// against references, the median of timings and the exit status. Their flags
// are Abseil flags parsed by tools/flags.h.
#ifndef MESHDMA_EXAMPLES_EXAMPLE_UTIL_H_
#define MESHDMA_EXAMPLES_EXAMPLE_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace meshdma::examples {

// Uniform values in [-scale, scale], reproducible from `seed`.
inline std::vector<float> Random(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// The end of an example's `main`: 0 on success, else the error on stderr and
// 2 for a bad flag value, 1 for a failed run.
inline int Finish(const char* example, const absl::Status& s) {
  if (s.ok()) return 0;
  std::fprintf(stderr, "%s: %s\n", example, std::string(s.message()).c_str());
  return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace meshdma::examples

#endif  // MESHDMA_EXAMPLES_EXAMPLE_UTIL_H_
