// Fuzzes the command-line walker and the value parsers of every meshdma
// program (tools/flags.h): the input, split at NUL bytes, is argv.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "tools/flags.h"

ABSL_FLAG(int64_t, fuzz_count, 1, "an integer with a range");
ABSL_FLAG(meshdma::cli::ByteSize, fuzz_bytes, {}, "a byte size");
ABSL_FLAG(double, fuzz_factor, 2.0, "a number");
ABSL_FLAG(bool, fuzz_check, false, "a boolean");
ABSL_FLAG(std::string, fuzz_name, "", "a string");
ABSL_FLAG(int, fuzz_page, 16, "an int with a range");

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const meshdma::cli::Program kProgram{
      .name = "fuzz",
      .synopsis = "[flags]",
      .summary = "flags fuzzer",
      .aliases = {{'n', "fuzz_count"},
                  {'b', "fuzz_bytes"},
                  {'f', "fuzz_factor"},
                  {'c', "fuzz_check"}},
      .ranges = {{"fuzz_count", 0, 1 << 20}, {"fuzz_page", 1, 4096}},
  };
  std::vector<std::string> args = {"fuzz"};
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  args.push_back(cur);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  (void)meshdma::cli::Parse(kProgram, static_cast<int>(args.size()),
                            argv.data());
  // The byte-size parser and its printers on the whole input.
  meshdma::cli::ByteSize bytes;
  std::string error;
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (meshdma::cli::AbslParseFlag(text, &bytes, &error)) {
    (void)meshdma::cli::AbslUnparseFlag(bytes);
    (void)meshdma::cli::FormatBytes(bytes.bytes);
  }
  return 0;
}
