#include "meshdma/dma/check/hang_report.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "meshdma/base/deadline.h"
#include "meshdma/base/env.h"

namespace meshdma::dma_internal {
namespace {

// Board lines: "process <rank> <pid> <written_ns> <host>", then per device
// "device <g> <waiting> <sem> <expected> <current> <verb>", "name <text>",
// "inflight <text>", "sent <t>:<sem>:<ns> ...".
std::optional<ProcessHangState> ReadBoard(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  ProcessHangState p;
  std::string line;
  bool have_process = false;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key;
    ls >> key;
    if (key == "process") {
      ls >> p.rank >> p.pid >> p.written_ns >> p.host;
      have_process = true;
    } else if (key == "device") {
      DeviceHangState d;
      int waiting = 0;
      ls >> d.device >> waiting >> d.sem_offset >> d.expected >> d.current >>
          d.verb;
      d.waiting = waiting != 0;
      p.devices.push_back(d);
    } else if (!p.devices.empty()) {
      std::string rest;
      std::getline(ls, rest);
      if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
      if (key == "name") p.devices.back().sem_name = rest;
      if (key == "inflight") p.devices.back().inflight = rest;
      if (key == "sent") {
        for (absl::string_view item : absl::StrSplit(rest, ' ')) {
          std::vector<std::string> f = absl::StrSplit(item, ':');
          if (f.size() != 3) continue;
          const size_t t = std::stoul(f[0]);
          auto& d = p.devices.back();
          if (d.last_sent_sem.size() <= t) {
            d.last_sent_sem.resize(t + 1, -1);
            d.last_sent_ns.resize(t + 1, 0);
          }
          d.last_sent_sem[t] = std::stoll(f[1]);
          d.last_sent_ns[t] = std::stoll(f[2]);
        }
      }
    }
  }
  if (!have_process) return std::nullopt;
  return p;
}

// "stopped", "gone" or "running" for a process on this host.
std::string ProcessCondition(int64_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat) return "gone";
  std::string s((std::istreambuf_iterator<char>(stat)), {});
  const size_t close = s.rfind(')');
  if (close != std::string::npos && close + 2 < s.size()) {
    const char state = s[close + 2];
    if (state == 'T' || state == 't') return "stopped";
    if (state == 'Z' || state == 'X') return "gone";
  }
  return "running";
}

std::string LocalHost() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

}  // namespace

HangBoard::HangBoard(uint64_t tag, int rank, int num_processes)
    : tag_(tag), rank_(rank), num_processes_(num_processes) {
  dir_ = base_internal::EnvString(config::kHangDir)
             .value_or(base_internal::EnvString("TMPDIR").value_or("/tmp"));
}

HangBoard::~HangBoard() {
  unlink(PathOf(rank_).c_str());
  ForgetFirst();
}

void HangBoard::ForgetFirst() {
  if (rank_ == 0) {
    unlink(absl::StrCat(dir_, "/meshdma-hang-", absl::Hex(tag_), "-first")
               .c_str());
    unlink(ReportPath().c_str());
  }
}

std::string HangBoard::ReportPath() const {
  return absl::StrCat(dir_, "/meshdma-hang-", absl::Hex(tag_), "-report");
}

void HangBoard::SaveReport(const std::string& report) {
  // Write then rename, so that readers never see half a report.
  const std::string path = ReportPath();
  const std::string tmp = absl::StrCat(path, ".tmp");
  if (FILE* f = std::fopen(tmp.c_str(), "w")) {
    std::fwrite(report.data(), 1, report.size(), f);
    std::fclose(f);
    std::rename(tmp.c_str(), path.c_str());
  }
}

std::string HangBoard::SavedReport(absl::Duration wait) {
  const base_internal::Deadline deadline = base_internal::Deadline::After(wait);
  for (;;) {
    std::ifstream in(ReportPath());
    if (in) return std::string((std::istreambuf_iterator<char>(in)), {});
    if (deadline.Expired()) return "";
    absl::SleepFor(absl::Milliseconds(20));
  }
}

std::string HangBoard::PathOf(int rank) const {
  return absl::StrCat(dir_, "/meshdma-hang-", absl::Hex(tag_), "-", rank);
}

void HangBoard::Publish(const ProcessHangState& state) {
  std::string text = absl::StrCat("process ", state.rank, " ", state.pid, " ",
                                  state.written_ns, " ", state.host, "\n");
  for (const DeviceHangState& d : state.devices) {
    absl::StrAppend(&text, "device ", d.device, " ", d.waiting ? 1 : 0, " ",
                    d.sem_offset, " ", d.expected, " ", d.current, " ",
                    d.verb.empty() ? "-" : d.verb, "\nname ", d.sem_name,
                    "\ninflight ", d.inflight, "\nsent");
    for (size_t t = 0; t < d.last_sent_sem.size(); ++t) {
      if (d.last_sent_sem[t] < 0) continue;
      absl::StrAppend(&text, " ", t, ":", d.last_sent_sem[t], ":",
                      d.last_sent_ns[t]);
    }
    text += "\n";
  }
  // Write then rename, so that readers never see half a board.
  const std::string path = PathOf(rank_);
  const std::string tmp = absl::StrCat(path, ".tmp");
  if (FILE* f = std::fopen(tmp.c_str(), "w")) {
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
    std::rename(tmp.c_str(), path.c_str());
  }
}

bool HangBoard::ClaimFirst() {
  const std::string first_path =
      absl::StrCat(dir_, "/meshdma-hang-", absl::Hex(tag_), "-first");
  const int fd = open(first_path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  if (fd < 0) return false;
  close(fd);
  return true;
}

namespace {

// Waiting devices by global index.
using DeviceStates = std::map<int, DeviceHangState>;
// Wait-for edges: a waiting device to the devices it waits for.
using WaitForEdges = std::map<int, std::vector<int>>;

// One line per process (its condition as seen from `host`, where it runs),
// then one per device; collects every device's state into `devices`.
std::vector<std::string> DescribeProcesses(
    const std::vector<std::optional<ProcessHangState>>& boards,
    const std::string& host, int64_t since_ns, DeviceStates& devices) {
  std::vector<std::string> lines;
  for (size_t r = 0; r < boards.size(); ++r) {
    const auto& b = boards[r];
    if (!b.has_value()) {
      lines.push_back(absl::StrCat(
          "  rank ", r,
          ": no state board (gone before start-up, or on "
          "another host: set MESHDMA_HANG_DIR to a directory every host "
          "shares)"));
      continue;
    }
    std::string condition;
    if (b->host == host) {
      condition = ProcessCondition(b->pid);
      if (condition == "running" && b->written_ns < since_ns) {
        condition =
            "running, no device waiting (busy in compute or elsewhere "
            "outside meshdma); devices as of start-up";
      }
    } else {
      condition = "on host " + b->host;
    }
    lines.push_back(
        absl::StrCat("  rank ", r, " (pid ", b->pid, "): ", condition));
    for (const DeviceHangState& d : b->devices) {
      devices[d.device] = d;
      if (d.waiting) {
        lines.push_back(
            absl::StrCat("    device ", d.device, ": ", d.verb, " on ",
                         d.sem_name, ": expected >= ", d.expected, ", current ",
                         d.current, "; DMAs in flight: ", d.inflight));
      } else {
        lines.push_back(
            absl::StrCat("    device ", d.device,
                         ": not waiting; DMAs in flight: ", d.inflight));
      }
    }
  }
  return lines;
}

// The wait-for graph, one line per waiting device: it waits for whoever
// last signalled (or sent a DMA to) the semaphore it waits on. Fills
// `edges`.
std::vector<std::string> WaitForGraph(const DeviceStates& devices,
                                      WaitForEdges& edges) {
  std::vector<std::string> graph;
  for (const auto& [g, d] : devices) {
    if (!d.waiting) continue;
    std::vector<std::string> from;
    for (const auto& [e, s] : devices) {
      if (static_cast<size_t>(g) < s.last_sent_sem.size() &&
          s.last_sent_sem[g] == d.sem_offset) {
        edges[g].push_back(e);
        from.push_back(absl::StrCat(
            "device ", e, s.waiting ? " (waiting)" : " (not waiting)"));
      }
    }
    graph.push_back(absl::StrCat(
        "    device ", g, " -> ",
        from.empty() ? std::string("? (no device has signalled or sent to "
                                   "this semaphore yet)")
                     : absl::StrJoin(from, ", "),
        from.empty() ? "" : "  [last signal received from]"));
  }
  return graph;
}

// A cycle among waiting devices, "device 1 -> device 2 -> device 1"; empty
// when there is none.
std::string FindCycle(const DeviceStates& devices, const WaitForEdges& edges) {
  std::string cycle;
  std::map<int, int> color;
  std::vector<int> stack;
  auto waiting = [&](int g) {
    auto it = devices.find(g);
    return it != devices.end() && it->second.waiting;
  };
  std::function<bool(int)> dfs = [&](int g) -> bool {
    color[g] = 1;
    stack.push_back(g);
    auto out = edges.find(g);
    for (int e : out == edges.end() ? std::vector<int>{} : out->second) {
      if (!waiting(e)) continue;
      if (color[e] == 1) {
        auto it = std::find(stack.begin(), stack.end(), e);
        std::vector<std::string> names;
        for (; it != stack.end(); ++it) names.push_back(absl::StrCat(*it));
        names.push_back(absl::StrCat(e));
        cycle = absl::StrCat("device ", absl::StrJoin(names, " -> device "));
        return true;
      }
      if (color[e] == 0 && dfs(e)) return true;
    }
    stack.pop_back();
    color[g] = 2;
    return false;
  };
  for (const auto& [g, d] : devices) {
    if (d.waiting && color[g] == 0 && dfs(g)) break;
  }
  return cycle;
}

}  // namespace

std::vector<std::optional<ProcessHangState>> HangBoard::ReadFreshBoards(
    const std::string& host, int64_t since_ns, absl::Duration grace) const {
  std::vector<std::optional<ProcessHangState>> boards(num_processes_);
  const base_internal::Deadline deadline =
      base_internal::Deadline::After(grace);
  for (;;) {
    bool all_fresh = true;
    for (int r = 0; r < num_processes_; ++r) {
      boards[r] = ReadBoard(PathOf(r));
      // A process of this host that is stopped or gone publishes nothing
      // more: waiting for it would only delay the report.
      const bool fresh =
          boards[r].has_value() &&
          (boards[r]->host != host || boards[r]->written_ns >= since_ns ||
           ProcessCondition(boards[r]->pid) != "running");
      if (!fresh) all_fresh = false;
    }
    if (all_fresh || deadline.Expired()) return boards;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

std::string HangBoard::Report(int self_device, int64_t since_ns,
                              absl::Duration grace) {
  // Step 1: every board, giving peers whose devices wait too the time to
  // publish a fresh one.
  const std::string host = LocalHost();
  const std::vector<std::optional<ProcessHangState>> boards =
      ReadFreshBoards(host, since_ns, grace);
  // Step 2: each process and device.
  DeviceStates devices;
  const std::vector<std::string> lines =
      DescribeProcesses(boards, host, since_ns, devices);
  // Step 3: the wait-for graph, and a cycle in it.
  WaitForEdges edges;
  const std::vector<std::string> graph = WaitForGraph(devices, edges);
  const std::string cycle = FindCycle(devices, edges);
  return absl::StrCat(
      kMeshReportHeading, " (device ", self_device, " timed out first on rank ",
      rank_, "):\n", absl::StrJoin(lines, "\n"), "\n  Wait-for graph:\n",
      graph.empty() ? "    (no device is waiting)" : absl::StrJoin(graph, "\n"),
      "\n  ",
      cycle.empty() ? "No cycle: a device at the end of a chain is not "
                      "waiting (or its signaller never ran)."
                    : absl::StrCat("Cycle: ", cycle));
}

}  // namespace meshdma::dma_internal
