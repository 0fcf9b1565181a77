// Small helpers the numbered examples share: strict command-line flags, the
// random inputs they check against references, and the median of timings.
#ifndef MESHDMA_EXAMPLES_EXAMPLE_UTIL_H_
#define MESHDMA_EXAMPLES_EXAMPLE_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace meshdma::examples {

// `--name VALUE` integer flags and `--name` switches. An unknown flag, a
// missing or non-numeric value, or a negative one is an error naming it;
// `--help` lists the flags with their defaults (returned as Cancelled).
class FlagParser {
 public:
  void Int(std::string name, int64_t* value) {
    flags_.push_back({std::move(name), value, nullptr, nullptr, false});
  }
  void Int(std::string name, int* value) {
    flags_.push_back({std::move(name), nullptr, value, nullptr, false});
  }
  // Present on the command line: `*value = when_set`.
  void Switch(std::string name, bool* value, bool when_set) {
    flags_.push_back({std::move(name), nullptr, nullptr, value, when_set});
  }

  absl::Status Parse(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--help" || arg == "-h") return absl::CancelledError(Usage());
      auto it = std::find_if(flags_.begin(), flags_.end(),
                             [&](const Flag& f) { return f.name == arg; });
      if (it == flags_.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("unknown flag '", arg, "'\n", Usage()));
      }
      if (it->as_bool != nullptr) {
        *it->as_bool = it->when_set;
        continue;
      }
      int64_t v = 0;
      if (i + 1 >= argc || !absl::SimpleAtoi(argv[i + 1], &v) || v < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag ", arg, " needs a non-negative integer, got '",
                         i + 1 < argc ? argv[i + 1] : "", "'"));
      }
      ++i;
      if (it->as_int64 != nullptr) *it->as_int64 = v;
      if (it->as_int != nullptr) *it->as_int = static_cast<int>(v);
    }
    return absl::OkStatus();
  }

  std::string Usage() const {
    std::string s = "flags:";
    for (const Flag& f : flags_) {
      if (f.as_bool != nullptr) {
        absl::StrAppend(&s, " [", f.name, "]");
      } else {
        absl::StrAppend(&s, " [", f.name, " N (",
                        f.as_int64 ? *f.as_int64 : *f.as_int, ")]");
      }
    }
    return s;
  }

 private:
  struct Flag {
    std::string name;
    int64_t* as_int64;
    int* as_int;
    bool* as_bool;
    bool when_set;
  };
  std::vector<Flag> flags_;
};

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

// The end of every example's `main`: 0 on success, the usage on --help, the
// error otherwise (2 for bad flags, 1 for a failed run).
inline int Finish(const char* example, const absl::Status& s) {
  if (s.ok()) return 0;
  if (s.code() == absl::StatusCode::kCancelled) {
    std::printf("%s %s\n", example, std::string(s.message()).c_str());
    return 0;
  }
  std::fprintf(stderr, "%s: %s\n", example, std::string(s.message()).c_str());
  return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace meshdma::examples

#endif  // MESHDMA_EXAMPLES_EXAMPLE_UTIL_H_
