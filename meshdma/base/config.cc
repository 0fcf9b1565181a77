#include "meshdma/base/config.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace meshdma::config {

absl::Span<const Variable* const> AllVariables() {
  static constexpr const Variable* kAll[] = {
      &kHeapBytes,
      &kDmaMode,
      &kWaitTimeout,
      &kSpinNs,
      &kRemoteSpinNs,

      &kMpiPiecedBytes,
      &kRemoteTransport,
      &kTcpCongestion,
      &kFusedTransfer,
      &kCheck,
      &kTrace,
      &kTraceMaxEvents,
      &kHangDir,
      &kSocketInterface,
      &kChannelProtocol,
      &kDevicesPerProcess,
      &kForceInterhost,
      &kSimulatedHosts,
      &kDebug,
      &kDebugSubsys,
      &kDebugFile,
  };
  return kAll;
}

const char* TypeName(Type type) {
  switch (type) {
    case Type::kBool:
      return "bool";
    case Type::kInt:
      return "int";
    case Type::kSeconds:
      return "seconds";
    case Type::kChoice:
      return "choice";
    case Type::kString:
      return "string";
  }
  return "?";
}

std::string RangeText(const Variable& var) {
  switch (var.type) {
    case Type::kBool:
      return "1/true/yes, 0/false/no";
    case Type::kInt:
      return absl::StrCat("[", var.min, ", ", var.max, "]");
    case Type::kSeconds:
      return absl::StrCat("(0, ", var.max, "] or inf");
    case Type::kChoice:
      return absl::StrReplaceAll(var.choices, {{"|", ", "}});
    case Type::kString:
      return "";
  }
  return "";
}

}  // namespace meshdma::config
