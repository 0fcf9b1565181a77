#include "meshdma/base/logging.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "meshdma/base/env.h"

namespace meshdma {
namespace {

struct SubsysName {
  uint32_t bit;
  const char* name;
};
constexpr SubsysName kSubsysNames[] = {
    {kLogInit, "init"},
    {kLogTopology, "topology"},
    {kLogTransport, "transport"},
    {kLogDma, "dma"},
    {kLogCollectives, "collectives"},
    {kLogKernels, "kernels"},
};

std::string HostName() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

// The destination, opened on first use and kept open (never closed: lines
// may be written from static destructors).
struct Sink {
  std::mutex mu;
  FILE* file = nullptr;
  std::string prefix;  // "HOST:PID:"
};

Sink& GetSink() {
  static Sink* sink = [] {
    auto* s = new Sink();
    s->prefix = absl::StrCat(HostName(), ":", getpid(), ":");
    s->file = stderr;
    const std::string& path = GetLogConfig().file;
    if (!path.empty()) {
      const std::string name = absl::StrReplaceAll(
          path, {{"%h", HostName()}, {"%p", absl::StrCat(getpid())}});
      if (FILE* f = std::fopen(name.c_str(), "a")) {
        s->file = f;
      } else {
        std::fprintf(stderr,
                     "meshdma: MESHDMA_DEBUG_FILE='%s' cannot be opened; "
                     "logging to stderr\n",
                     name.c_str());
      }
    }
    return s;
  }();
  return *sink;
}

void Write(absl::string_view level, absl::string_view subsys,
           absl::string_view message) {
  Sink& sink = GetSink();
  const long tid = syscall(SYS_gettid);
  std::string out;
  for (absl::string_view line : absl::StrSplit(message, '\n')) {
    if (line.empty()) continue;
    absl::StrAppend(&out, sink.prefix, tid, " meshdma ", level, " ", subsys,
                    subsys.empty() ? "" : ": ", line, "\n");
  }
  std::lock_guard<std::mutex> lock(sink.mu);
  std::fputs(out.c_str(), sink.file);
  std::fflush(sink.file);
}

}  // namespace

LogLevel ParseLogLevel(absl::string_view text, std::string* unknown) {
  const std::string t = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(text));
  if (t.empty() || t == "NONE" || t == "0") return LogLevel::kNone;
  if (t == "WARN" || t == "WARNING") return LogLevel::kWarn;
  if (t == "INFO") return LogLevel::kInfo;
  if (t == "TRACE") return LogLevel::kTrace;
  if (unknown != nullptr) *unknown = std::string(text);
  return LogLevel::kWarn;
}

uint32_t ParseLogSubsys(absl::string_view text, std::string* unknown) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  if (t.empty()) return kLogAll;
  const bool invert = absl::ConsumePrefix(&t, "^");
  uint32_t mask = 0;
  std::vector<std::string> bad;
  for (absl::string_view word : absl::StrSplit(t, ',', absl::SkipEmpty())) {
    const std::string w =
        absl::AsciiStrToLower(absl::StripAsciiWhitespace(word));
    if (w == "all") {
      mask = kLogAll;
      continue;
    }
    bool found = false;
    for (const SubsysName& s : kSubsysNames) {
      if (w == s.name) {
        mask |= s.bit;
        found = true;
      }
    }
    if (!found) bad.push_back(std::string(word));
  }
  if (unknown != nullptr) *unknown = absl::StrJoin(bad, ",");
  return invert ? ~mask : mask;
}

absl::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kNone:
      return "NONE";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kTrace:
      return "TRACE";
  }
  return "?";
}

absl::string_view LogSubsysName(uint32_t subsys) {
  for (const SubsysName& s : kSubsysNames) {
    if (s.bit == subsys) return s.name;
  }
  return "";
}

const LogConfig& GetLogConfig() {
  static const LogConfig* config = [] {
    auto* c = new LogConfig();
    std::string bad_level, bad_subsys;
    if (std::optional<std::string> v =
            base_internal::EnvString(config::kDebug)) {
      c->level = ParseLogLevel(*v, &bad_level);
    }
    if (std::optional<std::string> v =
            base_internal::EnvString(config::kDebugSubsys)) {
      c->subsys = ParseLogSubsys(*v, &bad_subsys);
    }
    if (std::optional<std::string> v =
            base_internal::EnvString(config::kDebugFile)) {
      c->file = *v;
    }
    // Reported through the sink, which reads this config: after it is set.
    if (!bad_level.empty() || !bad_subsys.empty()) {
      std::fprintf(stderr,
                   "meshdma: ignoring %s%s%s%s%s (levels: NONE WARN INFO "
                   "TRACE; subsystems: init topology transport dma "
                   "collectives kernels ALL)\n",
                   bad_level.empty() ? "" : "MESHDMA_DEBUG=", bad_level.c_str(),
                   !bad_level.empty() && !bad_subsys.empty() ? " and " : "",
                   bad_subsys.empty() ? "" : "MESHDMA_DEBUG_SUBSYS words ",
                   bad_subsys.c_str());
    }
    return c;
  }();
  return *config;
}

void LogMessage(LogLevel level, uint32_t subsys, absl::string_view message) {
  if (!LogEnabled(level, subsys)) return;
  Write(LogLevelName(level), LogSubsysName(subsys), message);
}

void LogError(absl::string_view message) { Write("ERROR", "", message); }

bool LogFirstTime(absl::string_view key) {
  static std::mutex* mu = new std::mutex();
  static auto* seen = new std::set<std::string, std::less<>>();
  std::lock_guard<std::mutex> lock(*mu);
  return seen->insert(std::string(key)).second;
}

}  // namespace meshdma
