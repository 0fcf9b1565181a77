// The command line of every meshdma program (meshdma-bench, meshdma-info,
// meshdma-bench-kernels, mpi-path-probe, the examples).
//
// Flags are Abseil flags: a program defines them with `ABSL_FLAG` and reads
// them with `absl::GetFlag`; values are parsed by Abseil's own parsers (and
// `AbslParseFlag` for `ByteSize`). This module only walks `argv`, because
// `absl::ParseCommandLine` exits the process itself on an error (every MPI
// rank printing), knows no one-letter aliases and lists source files in its
// `--help`. Accepted spellings:
//
//   --name=VALUE   --name VALUE   -name VALUE      (Abseil's)
//   -x VALUE       -xVALUE                          (a letter from `aliases`)
//   --flag  --noflag  --flag=true|false             (booleans take no
//                                                    separate value)
//
// '-' and '_' are the same inside a long name (`--no-baseline` is the flag
// `no_baseline`). "--" ends the flags. Errors name the flag and the value.
#ifndef MESHDMA_TOOLS_FLAGS_H_
#define MESHDMA_TOOLS_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshdma::cli {

// A one-letter alias of a long flag: {'b', "minbytes"} makes `-b 8` and
// `-b8` set `--minbytes`.
struct Alias {
  char letter;
  const char* flag;
};

// The values an integer, `ByteSize` or floating-point flag may take when
// given: {"page", 1, 4096} makes `--page 0` an error naming the flag and the
// value (a floating-point flag also rejects NaN; with `infinite`, "inf" is
// taken too, as the variables of seconds take it).
struct Range {
  const char* flag;
  int64_t min;
  int64_t max;
  bool infinite = false;
};

// The words a string flag may take when given: {"algo", {"auto", "ring"}}
// makes `--algo bogus` an error naming the flag, the value and the words.
struct Choice {
  const char* flag;
  std::vector<const char*> words;
};

struct Program {
  const char* name;      // "meshdma-bench": prefixes errors and the usage.
  const char* synopsis;  // What follows "usage: NAME " (may be empty).
  const char* summary;   // One paragraph printed above the flags.
  std::vector<Alias> aliases;
  const char* footer = "";  // Printed after the flags (environment, ...).
  std::vector<Range> ranges = {};    // Checked by `Parse`, listed by `Usage`.
  std::vector<Choice> choices = {};  // The same.
};

// Parses `argv` into the program's Abseil flags and returns the positional
// arguments (without argv[0]). `--help`, `-h` and `-help` return Cancelled
// with the usage text; anything else wrong returns InvalidArgument with
// "flag -b (--minbytes): bad value 'x': ..." or "unknown flag '--foo'"; a
// given value outside the program's `ranges` is "flag --page: bad value '0':
// not in [1, 4096]". Flags are set in order: on an error, earlier ones keep
// their new values.
absl::StatusOr<std::vector<std::string>> Parse(const Program& program, int argc,
                                               char** argv);

// The usage: synopsis, summary, then every flag the program defines (not
// Abseil's own) with its alias, help text and default, then the footer.
std::string Usage(const Program& program);

// The usual end of flag handling in `main`: on --help prints the usage to
// stdout and exits 0; on an error prints "NAME: error" and a hint to stderr
// and exits 2; positional arguments are an error unless `allow_positional`.
// Under mpirun only rank 0 prints (every rank exits the same way).
std::vector<std::string> ParseOrExit(const Program& program, int argc,
                                     char** argv,
                                     bool allow_positional = false);

// How `ParseOrExit` ends on `status`: Cancelled prints its message (the
// usage) to stdout and exits 0; anything else prints "NAME: message" and a
// hint to stderr and exits 2. Only rank 0 prints. For checks a program makes
// after parsing (a value that depends on another flag).
[[noreturn]] void ExitWithStatus(const Program& program,
                                 const absl::Status& status);

// "flag --page: bad value '0': REASON", quoting the value as it was given.
absl::Status BadValue(const Program& program, absl::string_view name,
                      absl::string_view reason);

// Whether flag `name` was set on the command line by the last `Parse` (by any
// spelling).
bool Given(absl::string_view name);

// Checks that depend on several flags, made after `Parse` and before
// anything is allocated; errors name every flag involved and its value.
//
// `low` must not exceed `high` (two integer or ByteSize flags):
// "flag --seq-min: bad value '100': more than --seq-max (10)".
absl::Status CheckOrder(const Program& program, absl::string_view low,
                        absl::string_view high);
// One factor of a size: the value of a flag, or a constant (`flag` null,
// `what` naming it, such as "bytes per float").
struct Factor {
  const char* flag;
  int64_t value;
  const char* what = "";
};
// The product of `factors` (each >= 0) must not overflow and must not
// exceed `limit` bytes (`limit_what` names it, such as "this host's
// memory"): "flags --seq '1048576' x --ffn '1048576' x 4 (bytes per float) =
// 4T bytes for the MLP activations, more than this host's memory (62G)".
absl::Status CheckProduct(const Program& program,
                          const std::vector<Factor>& factors,
                          absl::string_view what, int64_t limit,
                          absl::string_view limit_what);
// This host's physical memory in bytes (a large value when unknown).
int64_t HostMemoryBytes();

// The rank mpirun gave this process (from the launcher's environment, so it
// is known before MPI_Init), or 0.
int LauncherRank();

// A byte count: "8", "4K", "1M", "256M", "1G" (powers of 1024; K/M/G/T in
// either case, optionally followed by "B" or "iB"). Negative, fractional and
// overflowing values are errors.
struct ByteSize {
  int64_t bytes = 0;
};
bool AbslParseFlag(absl::string_view text, ByteSize* size, std::string* error);
std::string AbslUnparseFlag(ByteSize size);

// "8", "1K", "4M", "1.5G": readable sizes for tables and plots (exact
// powers of two print without a fraction).
std::string FormatBytes(int64_t bytes);

}  // namespace meshdma::cli

#endif  // MESHDMA_TOOLS_FLAGS_H_
