#include "tools/flags.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <utility>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace meshdma::cli {
namespace {

// The flags the last `Parse` set, with the text each was given.
std::map<std::string, std::string>& GivenFlags() {
  static auto* given = new std::map<std::string, std::string>();
  return *given;
}

// Flags that the program defines, as opposed to Abseil's own (--flagfile,
// --fromenv, ...), which this parser does not offer.
bool IsProgramFlag(const absl::CommandLineFlag& flag) {
  return !flag.IsRetired() && !absl::StrContains(flag.Filename(), "absl/");
}

absl::CommandLineFlag* Find(absl::string_view name) {
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  return flag != nullptr && IsProgramFlag(*flag) ? flag : nullptr;
}

const Alias* AliasOfLetter(const Program& program, char letter) {
  for (const Alias& a : program.aliases) {
    if (a.letter == letter) return &a;
  }
  return nullptr;
}

const Alias* AliasOfFlag(const Program& program, absl::string_view flag) {
  for (const Alias& a : program.aliases) {
    if (flag == a.flag) return &a;
  }
  return nullptr;
}

// How the usage and the errors spell a flag: "-b (--minbytes)" or
// "--devices-per-process". Flags with a letter keep nccl-tests' underscores.
std::string Spelling(const Program& program, absl::string_view name) {
  if (const Alias* a = AliasOfFlag(program, name)) {
    return absl::StrCat("-", std::string(1, a->letter), " (--", name, ")");
  }
  return absl::StrCat("--", absl::StrReplaceAll(name, {{"_", "-"}}));
}

std::string Placeholder(const absl::CommandLineFlag& flag) {
  if (flag.IsOfType<ByteSize>()) return "SIZE";
  if (flag.IsOfType<int>() || flag.IsOfType<int64_t>()) return "N";
  if (flag.IsOfType<double>()) return "X";
  return "VALUE";
}

// The part of Abseil's parse error after "...specified for flag 'x'; ".
std::string ParseReason(absl::string_view error) {
  const size_t semi = error.find("; ");
  return semi == absl::string_view::npos ? ""
                                         : std::string(error.substr(semi + 2));
}

absl::Status SetFlag(const Program& program, absl::CommandLineFlag& flag,
                     absl::string_view value) {
  std::string error;
  if (!flag.ParseFrom(value, &error)) {
    const std::string reason = ParseReason(error);
    return absl::InvalidArgumentError(
        absl::StrCat("flag ", Spelling(program, flag.Name()), ": bad value '",
                     value, "'", reason.empty() ? "" : ": ", reason));
  }
  GivenFlags()[std::string(flag.Name())] = std::string(value);
  return absl::OkStatus();
}

// The value of an integer or ByteSize flag.
std::optional<int64_t> IntegerValue(const absl::CommandLineFlag& flag) {
  if (auto v = flag.TryGet<int>()) return *v;
  if (auto v = flag.TryGet<int64_t>()) return *v;
  if (auto v = flag.TryGet<ByteSize>()) return v->bytes;
  return std::nullopt;
}

std::string FormatBound(const absl::CommandLineFlag& flag, int64_t bound) {
  return flag.IsOfType<ByteSize>() ? FormatBytes(bound) : absl::StrCat(bound);
}

std::string RangeText(const absl::CommandLineFlag& flag, const Range& range) {
  return absl::StrCat("[", FormatBound(flag, range.min), ", ",
                      FormatBound(flag, range.max), "]",
                      range.infinite ? " or inf" : "");
}

const Range* RangeOf(const Program& program, absl::string_view flag) {
  for (const Range& r : program.ranges) {
    if (flag == r.flag) return &r;
  }
  return nullptr;
}

// A given value of `range.flag` must lie in the range: integers and sizes
// exactly, floating point with NaN outside every range.
absl::Status CheckRange(const Program& program, const Range& range) {
  absl::CommandLineFlag* flag = Find(range.flag);
  const std::optional<int64_t> v =
      flag == nullptr ? std::nullopt : IntegerValue(*flag);
  std::optional<double> x;
  if (flag != nullptr) {
    if (auto got = flag->TryGet<double>()) x = *got;
  }
  if (!v.has_value() && !x.has_value()) {
    return absl::InternalError(
        absl::StrCat("range for --", range.flag, " names no numeric flag"));
  }
  if (!Given(range.flag)) return absl::OkStatus();
  const bool in = v.has_value()
                      ? *v >= range.min && *v <= range.max
                      : (range.infinite && std::isinf(*x) && *x > 0) ||
                            (*x >= static_cast<double>(range.min) &&
                             *x <= static_cast<double>(range.max));
  if (in) return absl::OkStatus();
  return BadValue(program, range.flag,
                  absl::StrCat("not in ", RangeText(*flag, range)));
}

// A given value of `choice.flag` must be one of its words.
absl::Status CheckChoice(const Program& program, const Choice& choice) {
  absl::CommandLineFlag* flag = Find(choice.flag);
  std::optional<std::string> value;
  if (flag != nullptr) {
    if (auto got = flag->TryGet<std::string>()) value = *got;
  }
  if (!value.has_value()) {
    return absl::InternalError(
        absl::StrCat("choice for --", choice.flag, " names no string flag"));
  }
  if (!Given(choice.flag)) return absl::OkStatus();
  for (const char* word : choice.words) {
    if (*value == word) return absl::OkStatus();
  }
  return BadValue(
      program, choice.flag,
      absl::StrCat("expected one of ", absl::StrJoin(choice.words, ", ")));
}

absl::Status CheckRangesAndChoices(const Program& program) {
  for (const Range& range : program.ranges) {
    if (absl::Status s = CheckRange(program, range); !s.ok()) return s;
  }
  for (const Choice& choice : program.choices) {
    if (absl::Status s = CheckChoice(program, choice); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> Parse(const Program& program, int argc,
                                               char** argv) {
  GivenFlags().clear();
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h" || arg == "-help" ||
        arg == "--helpfull") {
      return absl::CancelledError(Usage(program));
    }
  }
  bool flags_done = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (flags_done || arg.size() < 2 || arg[0] != '-') {
      positional.push_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_done = true;
      continue;
    }
    // A letter alias: "-b 8" or "-b8".
    if (arg[1] != '-') {
      if (const Alias* alias = AliasOfLetter(program, arg[1])) {
        absl::CommandLineFlag* flag = Find(alias->flag);
        if (flag == nullptr) {
          return absl::InternalError(
              absl::StrCat("alias -", std::string(1, alias->letter),
                           " names no flag --", alias->flag));
        }
        if (flag->IsOfType<bool>()) {
          if (arg.size() > 2) {
            return absl::InvalidArgumentError(
                absl::StrCat("flag ", Spelling(program, flag->Name()),
                             " takes no value, got '", arg, "'"));
          }
          if (absl::Status s = SetFlag(program, *flag, "true"); !s.ok()) {
            return s;
          }
          continue;
        }
        std::string value;
        if (arg.size() > 2) {
          value = arg.substr(2);
        } else if (i + 1 < argc) {
          value = argv[++i];
        } else {
          return absl::InvalidArgumentError(absl::StrCat(
              "flag ", Spelling(program, flag->Name()), " needs a value"));
        }
        if (absl::Status s = SetFlag(program, *flag, value); !s.ok()) return s;
        continue;
      }
    }
    // A long name: "--name=value", "--name value", "-name value", "--noname".
    absl::string_view body = absl::StripPrefix(arg, arg[1] == '-' ? "--" : "-");
    std::string name(body.substr(0, body.find('=')));
    const bool has_value = body.find('=') != absl::string_view::npos;
    std::string value =
        has_value ? std::string(body.substr(body.find('=') + 1)) : "";
    absl::StrReplaceAll({{"-", "_"}}, &name);
    absl::CommandLineFlag* flag = Find(name);
    if (flag == nullptr && !has_value && absl::StartsWith(name, "no")) {
      // "--nocheck" and "--no-check".
      absl::CommandLineFlag* negated =
          Find(absl::StripPrefix(absl::StripPrefix(name, "no"), "_"));
      if (negated != nullptr && negated->IsOfType<bool>()) {
        if (absl::Status s = SetFlag(program, *negated, "false"); !s.ok()) {
          return s;
        }
        continue;
      }
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag '", absl::CEscape(arg), "'"));
    }
    if (!has_value) {
      if (flag->IsOfType<bool>()) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "flag ", Spelling(program, flag->Name()), " needs a value"));
      }
    }
    if (absl::Status s = SetFlag(program, *flag, value); !s.ok()) return s;
  }
  if (absl::Status s = CheckRangesAndChoices(program); !s.ok()) return s;
  return positional;
}

std::string Usage(const Program& program) {
  std::string out = absl::StrCat("usage: ", program.name);
  if (*program.synopsis != '\0') absl::StrAppend(&out, " ", program.synopsis);
  absl::StrAppend(&out, "\n");
  if (*program.summary != '\0')
    absl::StrAppend(&out, "\n", program.summary, "\n");
  // Flags with a letter first, in the order given; then the rest by name.
  std::vector<absl::CommandLineFlag*> flags;
  for (const Alias& a : program.aliases) {
    if (absl::CommandLineFlag* f = Find(a.flag)) flags.push_back(f);
  }
  std::vector<absl::CommandLineFlag*> rest;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (IsProgramFlag(*flag) && AliasOfFlag(program, name) == nullptr) {
      rest.push_back(flag);
    }
  }
  std::sort(rest.begin(), rest.end(),
            [](auto* a, auto* b) { return a->Name() < b->Name(); });
  flags.insert(flags.end(), rest.begin(), rest.end());
  if (!flags.empty()) absl::StrAppend(&out, "\nflags:\n");
  for (const absl::CommandLineFlag* flag : flags) {
    std::string lead;
    if (const Alias* a = AliasOfFlag(program, flag->Name())) {
      lead = absl::StrCat("-", std::string(1, a->letter), ", --", flag->Name());
    } else {
      lead =
          absl::StrCat("--", absl::StrReplaceAll(flag->Name(), {{"_", "-"}}));
    }
    if (!flag->IsOfType<bool>())
      absl::StrAppend(&lead, " ", Placeholder(*flag));
    std::string help = flag->Help();
    if (const Range* range = RangeOf(program, flag->Name())) {
      absl::StrAppend(&help, ", in ", RangeText(*flag, *range));
    }
    const std::string def = flag->DefaultValue();
    if (flag->IsOfType<bool>()) {
      // Only a switch that is on by default needs saying: --noNAME.
      if (def == "true") {
        absl::StrAppend(&help, " (on by default; --no-",
                        absl::StrReplaceAll(flag->Name(), {{"_", "-"}}),
                        " turns it off)");
      }
    } else if (!def.empty()) {
      absl::StrAppend(&help, " (default ", def, ")");
    }
    // The help text wrapped at 79 columns, indented past the flag.
    std::vector<std::string> lines(1);
    for (absl::string_view word :
         absl::StrSplit(help, ' ', absl::SkipEmpty())) {
      if (!lines.back().empty() && lines.back().size() + word.size() > 52) {
        lines.emplace_back();
      }
      absl::StrAppend(&lines.back(), lines.back().empty() ? "" : " ", word);
    }
    if (lead.size() > 24) {
      absl::StrAppend(&out, "  ", lead, "\n");
      lead.clear();
    }
    for (const std::string& line : lines) {
      absl::StrAppend(&out, absl::StrFormat("  %-24s %s\n", lead, line));
      lead.clear();
    }
  }
  if (*program.footer != '\0') absl::StrAppend(&out, "\n", program.footer);
  if (out.back() != '\n') out.push_back('\n');
  return out;
}

std::vector<std::string> ParseOrExit(const Program& program, int argc,
                                     char** argv, bool allow_positional) {
  absl::StatusOr<std::vector<std::string>> positional =
      Parse(program, argc, argv);
  if (positional.ok() && !allow_positional && !positional->empty()) {
    positional = absl::InvalidArgumentError(absl::StrCat(
        "unexpected argument '", absl::CEscape(positional->front()), "'"));
  }
  if (positional.ok()) return *std::move(positional);
  ExitWithStatus(program, positional.status());
}

void ExitWithStatus(const Program& program, const absl::Status& status) {
  const bool report = LauncherRank() == 0;
  if (status.code() == absl::StatusCode::kCancelled) {
    if (report) {
      std::fputs(std::string(status.message()).c_str(), stdout);
      std::fflush(stdout);
    }
    std::exit(0);
  }
  if (report) {
    std::fprintf(stderr, "%s: %s\nTry '%s --help' for the flags.\n",
                 program.name, std::string(status.message()).c_str(),
                 program.name);
  }
  std::exit(2);
}

absl::Status BadValue(const Program& program, absl::string_view name,
                      absl::string_view reason) {
  std::string value;
  if (auto it = GivenFlags().find(std::string(name));
      it != GivenFlags().end()) {
    value = it->second;
  } else if (absl::CommandLineFlag* flag = Find(name)) {
    value = flag->CurrentValue();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("flag ", Spelling(program, name), ": bad value '",
                   absl::CEscape(value), "': ", reason));
}

bool Given(absl::string_view name) {
  return GivenFlags().count(std::string(name)) != 0;
}

absl::Status CheckOrder(const Program& program, absl::string_view low,
                        absl::string_view high) {
  absl::CommandLineFlag* lo = Find(low);
  absl::CommandLineFlag* hi = Find(high);
  const std::optional<int64_t> a =
      lo == nullptr ? std::nullopt : IntegerValue(*lo);
  const std::optional<int64_t> b =
      hi == nullptr ? std::nullopt : IntegerValue(*hi);
  if (!a.has_value() || !b.has_value()) {
    return absl::InternalError(absl::StrCat("order of --", low, " and --", high,
                                            " names no integer flags"));
  }
  if (*a <= *b) return absl::OkStatus();
  return BadValue(program, low,
                  absl::StrCat("more than ", Spelling(program, high), " (",
                               FormatBound(*hi, *b), ")"));
}

absl::Status CheckProduct(const Program& program,
                          const std::vector<Factor>& factors,
                          absl::string_view what, int64_t limit,
                          absl::string_view limit_what) {
  // Step 1: the product, saturated at overflow.
  int64_t product = 1;
  bool overflow = false;
  std::vector<std::string> terms;
  for (const Factor& f : factors) {
    terms.push_back(
        f.flag != nullptr
            ? absl::StrCat(Spelling(program, f.flag), " '", f.value, "'")
            : absl::StrCat(f.value, " (", f.what, ")"));
    overflow = overflow || f.value < 0 ||
               __builtin_mul_overflow(product, f.value, &product);
  }
  if (!overflow && product <= limit) return absl::OkStatus();
  // Step 2: the error names every flag of the product.
  return absl::InvalidArgumentError(absl::StrCat(
      "flags ", absl::StrJoin(terms, " x "), " = ",
      overflow ? std::string("more than 2^63") : FormatBytes(product),
      " bytes for ", what, ", more than ", limit_what, " (", FormatBytes(limit),
      ")"));
}

int64_t HostMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(pages) * page;
}

int LauncherRank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    int rank = 0;
    const char* v = std::getenv(var);
    if (v != nullptr && absl::SimpleAtoi(v, &rank)) return rank;
  }
  return 0;
}

bool AbslParseFlag(absl::string_view text, ByteSize* size, std::string* error) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  // Optional "B" / "iB" after the multiplier.
  if (absl::ConsumeSuffix(&t, "iB") || absl::ConsumeSuffix(&t, "ib") ||
      absl::ConsumeSuffix(&t, "B") || absl::ConsumeSuffix(&t, "b")) {
  }
  int shift = 0;
  if (!t.empty()) {
    switch (absl::ascii_tolower(t.back())) {
      case 'k':
        shift = 10;
        break;
      case 'm':
        shift = 20;
        break;
      case 'g':
        shift = 30;
        break;
      case 't':
        shift = 40;
        break;
    }
    if (shift != 0) t.remove_suffix(1);
  }
  uint64_t v = 0;
  if (t.empty() || !absl::ascii_isdigit(t.front()) ||
      !absl::SimpleAtoi(t, &v)) {
    *error = "expected a byte count such as 8, 4K, 1M or 2G";
    return false;
  }
  const uint64_t limit = uint64_t{std::numeric_limits<int64_t>::max()};
  if (v > (limit >> shift)) {
    *error = "too large";
    return false;
  }
  size->bytes = static_cast<int64_t>(v << shift);
  return true;
}

std::string AbslUnparseFlag(ByteSize size) { return FormatBytes(size.bytes); }

std::string FormatBytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"", "K", "M", "G", "T", "P"};
  int unit = 0;
  while (unit < 5 && bytes >= (int64_t{1024} << (10 * unit))) ++unit;
  const int64_t scale = int64_t{1} << (10 * unit);
  if (bytes % scale == 0) return absl::StrCat(bytes / scale, kUnits[unit]);
  return absl::StrFormat("%.1f%s", static_cast<double>(bytes) / scale,
                         kUnits[unit]);
}

}  // namespace meshdma::cli
