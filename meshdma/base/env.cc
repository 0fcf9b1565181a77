#include "meshdma/base/env.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "meshdma/base/status_macros.h"

namespace meshdma::base_internal {
namespace {

absl::Status Invalid(const char* name, const std::string& value,
                     absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat(name, "='", value, "' is not ", expected));
}

absl::Status CheckType(const config::Variable& var, config::Type type) {
  if (var.type == type) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(var.name, " is a ", config::TypeName(var.type),
                   ", read as a ", config::TypeName(type)));
}

// Edits (insertions, deletions, substitutions) from `a` to `b`.
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::vector<std::string> UnknownVariables(char** environment) {
  // Step 1: every known name.
  std::vector<absl::string_view> known;
  for (const config::Variable* v : config::AllVariables()) {
    known.push_back(v->name);
  }
  for (const config::ScriptVariable& v : config::ScriptVariables()) {
    known.push_back(v.name);
  }
  // Step 2: each MESHDMA_ name of the environment that is none of them,
  // with the closest.
  std::vector<std::string> lines;
  for (char** e = environment; e != nullptr && *e != nullptr; ++e) {
    const absl::string_view entry(*e);
    const absl::string_view name = entry.substr(0, entry.find('='));
    if (!absl::StartsWith(name, "MESHDMA_") ||
        std::find(known.begin(), known.end(), name) != known.end()) {
      continue;
    }
    absl::string_view closest = known.front();
    for (absl::string_view k : known) {
      if (EditDistance(name, k) < EditDistance(name, closest)) closest = k;
    }
    lines.push_back(absl::StrCat(name,
                                 " is not a meshdma variable and is ignored; "
                                 "did you mean ",
                                 closest, "?"));
  }
  return lines;
}

int LauncherRank() {
  for (const char* var :
       {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "RANK"}) {
    const char* v = std::getenv(var);
    int rank = 0;
    if (v != nullptr && absl::SimpleAtoi(v, &rank) && rank >= 0) return rank;
  }
  return -1;
}

void WarnUnknownVariablesOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (LauncherRank() > 0) return;
    for (const std::string& line : UnknownVariables(environ)) {
      std::fprintf(stderr, "meshdma: warning: %s\n", line.c_str());
    }
  });
}

std::optional<std::string> EnvString(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

absl::StatusOr<std::optional<int64_t>> EnvInt(const char* name, int64_t min,
                                              int64_t max) {
  std::optional<std::string> v = EnvString(name);
  if (!v.has_value()) return std::nullopt;
  int64_t n = 0;
  if (!absl::SimpleAtoi(*v, &n) || n < min || n > max) {
    return Invalid(name, *v,
                   absl::StrCat("an integer in [", min, ", ", max, "]"));
  }
  return n;
}

absl::StatusOr<std::optional<double>> EnvDouble(const char* name,
                                                double min_exclusive,
                                                double max) {
  std::optional<std::string> v = EnvString(name);
  if (!v.has_value()) return std::nullopt;
  double x = 0;
  if (!absl::SimpleAtod(*v, &x) || !std::isfinite(x) || x <= min_exclusive ||
      x > max) {
    return Invalid(
        name, *v, absl::StrCat("a number in (", min_exclusive, ", ", max, "]"));
  }
  return x;
}

absl::StatusOr<std::optional<absl::Duration>> EnvSeconds(const char* name,
                                                         double max_seconds) {
  std::optional<std::string> v = EnvString(name);
  if (!v.has_value()) return std::nullopt;
  const std::string lower = absl::AsciiStrToLower(*v);
  if (lower == "inf" || lower == "infinity") return absl::InfiniteDuration();
  double x = 0;
  if (!absl::SimpleAtod(*v, &x) || !std::isfinite(x) || x <= 0 ||
      x > max_seconds) {
    return Invalid(
        name, *v,
        absl::StrCat("a number of seconds in (0, ", max_seconds, "] or inf"));
  }
  return absl::Seconds(x);
}

absl::StatusOr<std::optional<bool>> EnvBool(const char* name) {
  std::optional<std::string> v = EnvString(name);
  if (!v.has_value()) return std::nullopt;
  const std::string lower = absl::AsciiStrToLower(*v);
  if (lower == "1" || lower == "true" || lower == "yes") return true;
  if (lower == "0" || lower == "false" || lower == "no") return false;
  return Invalid(name, *v, "one of 1, true, yes, 0, false, no");
}

absl::StatusOr<std::optional<std::string>> EnvChoice(
    const char* name, std::initializer_list<absl::string_view> choices) {
  std::optional<std::string> v = EnvString(name);
  if (!v.has_value()) return std::nullopt;
  for (absl::string_view c : choices) {
    if (*v == c) return v;
  }
  return Invalid(name, *v,
                 absl::StrCat("one of ", absl::StrJoin(choices, ", ")));
}

std::optional<std::string> EnvString(const config::Variable& var) {
  return EnvString(var.name);
}

absl::StatusOr<std::optional<int64_t>> EnvInt(const config::Variable& var) {
  MESHDMA_RETURN_IF_ERROR(CheckType(var, config::Type::kInt));
  return EnvInt(var.name, var.min, var.max);
}

absl::StatusOr<std::optional<absl::Duration>> EnvSeconds(
    const config::Variable& var) {
  MESHDMA_RETURN_IF_ERROR(CheckType(var, config::Type::kSeconds));
  return EnvSeconds(var.name, static_cast<double>(var.max));
}

absl::StatusOr<std::optional<bool>> EnvBool(const config::Variable& var) {
  MESHDMA_RETURN_IF_ERROR(CheckType(var, config::Type::kBool));
  return EnvBool(var.name);
}

absl::StatusOr<std::optional<std::string>> EnvChoice(
    const config::Variable& var) {
  MESHDMA_RETURN_IF_ERROR(CheckType(var, config::Type::kChoice));
  std::optional<std::string> v = EnvString(var.name);
  if (!v.has_value()) return std::nullopt;
  for (absl::string_view c : absl::StrSplit(var.choices, '|')) {
    if (*v == c) return v;
  }
  return Invalid(var.name, *v, absl::StrCat("one of ", config::RangeText(var)));
}

}  // namespace meshdma::base_internal
