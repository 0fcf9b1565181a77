#include "meshdma/base/status_macros.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace meshdma::base_internal {

absl::Status AddCallSite(const absl::Status& status, std::string_view file,
                         int line) {
  // Keep only the path from the library or repository root ("dma/runtime.cc",
  // "python/csrc/group_ops.cc"), not the build machine's absolute path.
  for (std::string_view root :
       {"/base/", "/topology/", "/dma/", "/kernels/", "/collectives/",
        "/examples/", "/bench/", "/tests/", "/tools/", "/python/"}) {
    if (size_t pos = file.rfind(root); pos != std::string_view::npos) {
      file.remove_prefix(pos + 1);
      break;
    }
  }
  return absl::Status(
      status.code(),
      absl::StrCat(status.message(), "\n  -> ",
                   absl::string_view(file.data(), file.size()), ":", line));
}

}  // namespace meshdma::base_internal
