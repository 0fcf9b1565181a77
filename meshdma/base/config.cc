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
      &kCollectiveMatmulSchedule,
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

absl::Span<const ScriptVariable> ScriptVariables() {
  static constexpr ScriptVariable kAll[] = {
      {"MESHDMA_BUILD_DIR", "scripts/test.sh, scripts/demo.sh",
       "the build folder to use"},
      {"MESHDMA_TEST_MPIS", "scripts/test.sh",
       "which MPI builds the suite runs"},
      {"MESHDMA_SANITIZERS", ".ci/run, scripts/test-sanitizers.sh",
       "which sanitizer stages run (docs/sanitizers.md)"},
      {"MESHDMA_FUZZ_RUNS", "scripts/test-sanitizers.sh",
       "the fuzz stage's inputs per target"},
      {"MESHDMA_FUZZ_SECONDS", "scripts/test-sanitizers.sh",
       "the fuzz stage's longest run per target"},
      {"MESHDMA_FUZZ_VALUE", "tests/fuzz/env_fuzzer.cc",
       "the value the variable fuzzer parses"},
      {"MESHDMA_TORCH_TEST_WORLD", "tests/torch/fused_test.py",
       "ranks of the fused-op test (default 2)"},
      {"MESHDMA_SUITE_AS", "tests/torch/torch_suite.py",
       "runs meshdma under another backend's name in torch's own suite"},
      {"MESHDMA_TOOLS_DIR", "mlir/test (lit)",
       "the folder of meshdma-opt and meshdma-run"},
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
