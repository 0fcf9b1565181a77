// Writing JSON by hand in the tools' machine-readable outputs
// (`meshdma-bench -J`, `meshdma-info --json`).
#ifndef MESHDMA_TOOLS_JSON_H_
#define MESHDMA_TOOLS_JSON_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace meshdma::cli {

// `s` as a quoted JSON string, with quotes, backslashes and control
// characters escaped.
inline std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c < 0x20) {
      absl::StrAppend(&out, absl::StrFormat("\\u%04x", c));
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

}  // namespace meshdma::cli

#endif  // MESHDMA_TOOLS_JSON_H_
