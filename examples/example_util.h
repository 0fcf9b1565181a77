// Small helpers the numbered examples share: the random inputs they check
// against references, the median of timings and the exit status. Their flags
// are Abseil flags parsed by tools/flags.h (`ExampleProgram`).
#ifndef MESHDMA_EXAMPLES_EXAMPLE_UTIL_H_
#define MESHDMA_EXAMPLES_EXAMPLE_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tools/flags.h"
#include "tools/runtime_flags.h"

namespace meshdma::examples {

// The command line of an example: its own flags (with `ranges`) and the
// runtime's settings (tools/runtime_flags.h).
inline cli::Program ExampleProgram(const char* name, const char* summary,
                                   std::vector<cli::Range> ranges = {}) {
  return {.name = name,
          .synopsis = "[flags]   (also under mpirun -np N)",
          .summary = summary,
          .aliases = {},
          .footer = cli::kRuntimeFlagsFooter,
          .ranges = std::move(ranges)};
}

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
