// What the library says about itself, when asked (NCCL_DEBUG's model).
//
//   MESHDMA_DEBUG=WARN|INFO|TRACE       how much; unset or NONE: nothing
//   MESHDMA_DEBUG_SUBSYS=init,transport which subsystems (comma-separated
//                                       names below, ALL, or ^name,... for
//                                       all but those); default ALL
//   MESHDMA_DEBUG_FILE=path             append there instead of stderr; %h
//                                       becomes the host name, %p the pid
//
// WARN: problems the library worked around (a thread it could not pin).
// INFO: once per process, the launch, the runtime's settings and where each
// came from, the path to every peer, and each collective algorithm choice.
// TRACE: also every kernel entry and exit on every device.
//
// Each line reads "HOST:PID:TID meshdma LEVEL subsys: message". The
// environment is read once, on the first use; `MESHDMA_LOG` costs one
// predictable branch when its level or subsystem is off. Errors that no
// caller can receive (a failed shutdown in a destructor) use `LogError` and
// are printed whatever MESHDMA_DEBUG says.
#ifndef MESHDMA_BASE_LOGGING_H_
#define MESHDMA_BASE_LOGGING_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace meshdma {

enum class LogLevel { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

// Subsystems, one bit each; MESHDMA_DEBUG_SUBSYS names them in lower case.
enum LogSubsys : uint32_t {
  kLogInit = 1u << 0,         // "init": launch and runtime settings
  kLogTopology = 1u << 1,     // "topology": hosts, cores, pinning
  kLogTransport = 1u << 2,    // "transport": the path to each peer
  kLogDma = 1u << 3,          // "dma": kernels, DMAs, semaphores
  kLogCollectives = 1u << 4,  // "collectives": algorithm choices
  kLogKernels = 1u << 5,      // "kernels": pallas_call, pipelines
  kLogAll = ~0u,
};

// The settings as read from the environment (once).
struct LogConfig {
  LogLevel level = LogLevel::kNone;
  uint32_t subsys = kLogAll;
  std::string file;  // Empty: stderr.
};
const LogConfig& GetLogConfig();

// Parses MESHDMA_DEBUG / MESHDMA_DEBUG_SUBSYS values; unknown words are
// ignored and reported in `unknown` (comma-separated) when non-null.
LogLevel ParseLogLevel(absl::string_view text, std::string* unknown);
uint32_t ParseLogSubsys(absl::string_view text, std::string* unknown);
// "WARN", "INFO", ...; "transport", ...
absl::string_view LogLevelName(LogLevel level);
absl::string_view LogSubsysName(uint32_t subsys);

inline bool LogEnabled(LogLevel level, uint32_t subsys) {
  const LogConfig& c = GetLogConfig();
  return level <= c.level && (c.subsys & subsys) != 0;
}

// Writes one line (or several, each prefixed) if enabled.
void LogMessage(LogLevel level, uint32_t subsys, absl::string_view message);
// Always written (stderr, or MESHDMA_DEBUG_FILE).
void LogError(absl::string_view message);
// True the first time this process asks about `key`: for "once" messages.
bool LogFirstTime(absl::string_view key);

}  // namespace meshdma

// MESHDMA_LOG(kInfo, kLogTransport, "rank ", r, " reaches ", n, " peers")
#define MESHDMA_LOG(level, subsys, ...)                                \
  do {                                                                 \
    if (::meshdma::LogEnabled(::meshdma::LogLevel::level, (subsys))) { \
      ::meshdma::LogMessage(::meshdma::LogLevel::level, (subsys),      \
                            ::absl::StrCat(__VA_ARGS__));              \
    }                                                                  \
  } while (0)

// MESHDMA_LOG_ONCE(kInfo, kLogCollectives, key, "message", ...): the first
// time this process logs `key` (evaluated only when the level and subsystem
// are on), for choices made on every call.
#define MESHDMA_LOG_ONCE(level, subsys, key, ...)                      \
  do {                                                                 \
    if (::meshdma::LogEnabled(::meshdma::LogLevel::level, (subsys)) && \
        ::meshdma::LogFirstTime(key)) {                                \
      ::meshdma::LogMessage(::meshdma::LogLevel::level, (subsys),      \
                            ::absl::StrCat(__VA_ARGS__));              \
    }                                                                  \
  } while (0)

#endif  // MESHDMA_BASE_LOGGING_H_
