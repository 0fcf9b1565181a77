// Options read from environment variables, parsed one way everywhere. Code
// reads a variable through its row of the configuration table (base/config.h),
// which holds its range and choices; the readers by name below serve the table
// and variables that are not the library's. Each reader returns nullopt when
// the variable is unset or empty, the parsed value when it is valid, and
// InvalidArgument naming the variable, its value and what was expected
// otherwise. `Resolve` applies the precedence every option keeps: an explicit
// option, else the environment, else the default.
#ifndef MESHDMA_BASE_ENV_H_
#define MESHDMA_BASE_ENV_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "meshdma/base/config.h"

namespace meshdma::base_internal {

// The variable's value, or nullopt when unset or empty.
std::optional<std::string> EnvString(const char* name);
// An integer in [min, max].
absl::StatusOr<std::optional<int64_t>> EnvInt(const char* name, int64_t min,
                                              int64_t max);
// A finite number in (min_exclusive, max].
absl::StatusOr<std::optional<double>> EnvDouble(const char* name,
                                                double min_exclusive,
                                                double max);
// A duration in seconds: a finite number in (0, max_seconds], or "inf" (any
// case) for no limit, returned as absl::InfiniteDuration(). NaN, negative,
// zero and larger values are errors.
absl::StatusOr<std::optional<absl::Duration>> EnvSeconds(const char* name,
                                                         double max_seconds);
// 1/true/yes or 0/false/no, in any case.
absl::StatusOr<std::optional<bool>> EnvBool(const char* name);
// One of `choices`.
absl::StatusOr<std::optional<std::string>> EnvChoice(
    const char* name, std::initializer_list<absl::string_view> choices);

// A variable of the configuration table, read with its row's type and range.
// Reading a row with the reader of another type is InternalError (a bug).
std::optional<std::string> EnvString(const config::Variable& var);
absl::StatusOr<std::optional<int64_t>> EnvInt(const config::Variable& var);
absl::StatusOr<std::optional<absl::Duration>> EnvSeconds(
    const config::Variable& var);
absl::StatusOr<std::optional<bool>> EnvBool(const config::Variable& var);
absl::StatusOr<std::optional<std::string>> EnvChoice(
    const config::Variable& var);

// One line for each variable of `environment` (a NULL-terminated
// "NAME=value" list, as `environ`) whose name starts with MESHDMA_ and is
// neither a row of the configuration table nor one of the scripts'
// variables (`config::ScriptVariables`), naming it and the known name
// closest to it: "MESHDMA_HEAP_BYTE is not a meshdma variable and is
// ignored; did you mean MESHDMA_HEAP_BYTES?".
std::vector<std::string> UnknownVariables(char** environment);
// Prints `UnknownVariables(environ)` on stderr, once per process (the
// runtime's start), and only in the launch's first process where the
// launcher numbers them (`LauncherRank`): every rank reads the same
// environment, so one warning per launch says it.
void WarnUnknownVariablesOnce();
// This process's rank as its launcher tells it in the environment (Open
// MPI's OMPI_COMM_WORLD_RANK, PMIx's PMIX_RANK, MPICH's PMI_RANK,
// torchrun's RANK), or -1 where none does.
int LauncherRank();

template <typename T>
T Resolve(const std::optional<T>& option, const std::optional<T>& env,
          T default_value) {
  if (option.has_value()) return *option;
  if (env.has_value()) return *env;
  return default_value;
}

}  // namespace meshdma::base_internal

#endif  // MESHDMA_BASE_ENV_H_
