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

// One array an example allocates: its size as a product of flags (and
// constants such as bytes per float), and what it holds.
struct ArraySize {
  std::vector<cli::Factor> factors;
  const char* what;
};

// Every array of `arrays` must fit in this host's memory, each flag being in
// its range: an InvalidArgument naming the flags of the first that does not
// (`cli::CheckProduct`), checked before anything is allocated.
inline absl::Status CheckArraySizes(const cli::Program& program,
                                    const std::vector<ArraySize>& arrays) {
  const int64_t memory = cli::HostMemoryBytes();
  for (const ArraySize& a : arrays) {
    absl::Status fits = cli::CheckProduct(program, a.factors, a.what, memory,
                                          "this host's memory");
    if (!fits.ok()) return fits;
  }
  return absl::OkStatus();
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
