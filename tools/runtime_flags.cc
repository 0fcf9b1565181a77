#include "tools/runtime_flags.h"

#include <cmath>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

ABSL_FLAG(int, devices_per_process, 0,
          "devices (threads) per process, 1..1024; unset: MESHDMA_DEVICES_"
          "PER_PROCESS, else the host's cores divided among its processes");
ABSL_FLAG(bool, force_interhost, false,
          "treat every process as its own host (the MPI path on one machine)");
ABSL_FLAG(std::string, dma_mode, "",
          "async or eager; empty: MESHDMA_DMA_MODE, else async");
ABSL_FLAG(meshdma::cli::ByteSize, heap_bytes, meshdma::cli::ByteSize{0},
          "symmetric heap per device, 16K..1T; 0: MESHDMA_HEAP_BYTES, else "
          "256M");
ABSL_FLAG(double, wait_timeout_s, 0,
          "wait timeout in seconds, or inf for none; 0: "
          "MESHDMA_WAIT_TIMEOUT_S, else 120");

namespace meshdma::cli {

const char kRuntimeFlagsFooter[] =
    "The settings flags mirror RuntimeOptions; unset, the environment "
    "decides\n(MESHDMA_DEVICES_PER_PROCESS, MESHDMA_FORCE_INTERHOST, "
    "MESHDMA_DMA_MODE,\nMESHDMA_HEAP_BYTES, MESHDMA_WAIT_TIMEOUT_S, "
    "MESHDMA_SPIN_NS, MESHDMA_TRACE,\nMESHDMA_DEBUG, MESHDMA_DEBUG_SUBSYS, "
    "MESHDMA_DEBUG_FILE).\n";

absl::StatusOr<RuntimeOptions> RuntimeOptionsFromFlags(const Program& program) {
  RuntimeOptions options;
  if (Given("devices_per_process")) {
    const int dpp = absl::GetFlag(FLAGS_devices_per_process);
    if (dpp < 1 || dpp > 1024) {
      return BadValue(program, "devices_per_process", "not in [1, 1024]");
    }
    options.launch.devices_per_process = dpp;
  }
  if (Given("force_interhost")) {
    options.launch.force_interhost = absl::GetFlag(FLAGS_force_interhost);
  }
  if (Given("dma_mode")) {
    const std::string mode = absl::GetFlag(FLAGS_dma_mode);
    if (mode != "async" && mode != "eager") {
      return BadValue(program, "dma_mode", "expected async or eager");
    }
    options.dma_mode = mode == "async" ? DmaMode::kAsync : DmaMode::kEager;
  }
  if (Given("heap_bytes")) {
    // 0 leaves the heap to MESHDMA_HEAP_BYTES; else the runtime's range.
    const int64_t bytes = absl::GetFlag(FLAGS_heap_bytes).bytes;
    if (bytes != 0 && (bytes < kMinHeapBytes || bytes > kMaxHeapBytes)) {
      return BadValue(
          program, "heap_bytes",
          absl::StrCat("not 0 and not in [", FormatBytes(kMinHeapBytes), ", ",
                       FormatBytes(kMaxHeapBytes), "]"));
    }
    if (bytes > 0) options.heap_bytes = bytes;
  }
  if (Given("wait_timeout_s")) {
    // As MESHDMA_WAIT_TIMEOUT_S: seconds up to 1e9, or inf for no timeout;
    // 0 leaves it to that variable.
    const double seconds = absl::GetFlag(FLAGS_wait_timeout_s);
    if (std::isinf(seconds) && seconds > 0) {
      options.wait_timeout = absl::InfiniteDuration();
    } else if (!(seconds >= 0) || seconds > 1e9) {
      return BadValue(program, "wait_timeout_s", "not in [0, 1e9] or inf");
    } else if (seconds > 0) {
      options.wait_timeout = absl::Seconds(seconds);
    }
  }
  return options;
}

RuntimeOptions ParseRuntimeOptionsOrExit(const Program& program, int argc,
                                         char** argv) {
  ParseOrExit(program, argc, argv);
  absl::StatusOr<RuntimeOptions> options = RuntimeOptionsFromFlags(program);
  if (!options.ok()) ExitWithStatus(program, options.status());
  return *std::move(options);
}

}  // namespace meshdma::cli
