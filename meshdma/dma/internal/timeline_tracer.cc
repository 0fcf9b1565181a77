#include "meshdma/dma/internal/timeline_tracer.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/internal/device.h"
#include "meshdma/dma/trace.h"

namespace meshdma {
namespace {

// Rounds of the clock alignment (each one barrier).
constexpr int kClockRounds = 16;

std::string Escape(absl::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (static_cast<unsigned char>(c) >= 0x20) out.push_back(c);
  }
  return out;
}

const char* KindName(WaitKind kind) {
  switch (kind) {
    case WaitKind::kSemaphore:
      return "semaphore_wait";
    case WaitKind::kDmaSend:
      return "wait_send";
    case WaitKind::kDmaRecv:
      return "wait_recv";
    case WaitKind::kBarrier:
      return "barrier";
  }
  return "wait";
}

// The user's name for `sem`, read on the calling device's thread.
std::string SemName(Semaphore sem) {
  if (dma_internal::Device* d = dma_internal::CurrentDevice()) {
    return Escape(d->SemaphoreName(sem));
  }
  return Escape(sem.ToString());
}

std::string Us(int64_t ns) { return absl::StrFormat("%.3f", ns / 1e3); }

// This kernel boot's id (Linux), kUnknownBoot where unknown. Processes of
// one boot read one steady clock.
constexpr char kUnknownBoot[] = "-";
std::string BootId() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (!(f >> id)) return kUnknownBoot;
  return id;
}

}  // namespace

namespace dma_internal {

TimelineTracer::TimelineTracer(const Launch& launch, Observer* next,
                               int64_t max_events)
    : launch_(launch),
      rank_(launch.rank()),
      next_(next),
      start_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now().time_since_epoch())
                    .count()),
      max_events_(std::max<int64_t>(1, max_events)) {}

int64_t TimelineTracer::NowNs() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
             .count() -
         start_ns_;
}

template <typename T>
void TimelineTracer::Keep(std::deque<T>& ring, T record) {
  if (static_cast<int64_t>(ring.size()) >= max_events_) {
    ring.pop_front();
    ++dropped_;
  }
  ring.push_back(std::move(record));
}

void TimelineTracer::Add(int64_t ns, absl::string_view head,
                         absl::string_view tail) {
  Keep(events_,
       Event{ns, absl::StrCat(head, tail), static_cast<uint32_t>(head.size())});
}

absl::Status TimelineTracer::CheckWritable(const std::string& path,
                                           ProcessGroup& processes) {
  std::string error;
  if (processes.rank() == 0) {
    std::ofstream f(path, std::ios::app);
    if (!f) error = std::strerror(errno);
  }
  MESHDMA_RETURN_IF_ERROR(processes.Broadcast(error, 0));
  if (error.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("trace file '", path, "' (", kTraceEnv,
                   " or RuntimeOptions::trace_path) cannot be created on rank "
                   "0: ",
                   error));
}

void TimelineTracer::OnKernelBegin(int device, absl::string_view kernel) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Add(NowNs(),
        absl::StrFormat(R"({"name":"%s","cat":"kernel","ph":"B","ts":)",
                        Escape(kernel)),
        absl::StrFormat(R"(,"pid":%d,"tid":%d})", rank_, device));
  }
  if (next_) next_->OnKernelBegin(device, kernel);
}

void TimelineTracer::OnKernelEnd(int device, absl::string_view kernel) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Add(NowNs(),
        absl::StrFormat(R"({"name":"%s","cat":"kernel","ph":"E","ts":)",
                        Escape(kernel)),
        absl::StrFormat(R"(,"pid":%d,"tid":%d})", rank_, device));
  }
  if (next_) next_->OnKernelEnd(device, kernel);
}

void TimelineTracer::OnDmaStart(const DmaEvent& dma) {
  const std::string recv =
      SemName(Semaphore(dma.recv_sem, SemaphoreType::kDma));
  const std::string send =
      dma.send_sem >= 0 ? SemName(Semaphore(dma.send_sem, SemaphoreType::kDma))
                        : "";
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = NowNs();
    dma_start_ns_[dma.id] = now;
    Add(now,
        absl::StrFormat(
            R"({"name":"dma to device %d","cat":"dma","ph":"b","id":%d,"ts":)",
            dma.dst_device, dma.id),
        absl::StrFormat(
            R"(,"pid":%d,"tid":%d,"args":{"bytes":%d,"src_device":%d,)"
            R"("dst_device":%d,"send_sem":"%s","recv_sem":"%s"}})",
            rank_, dma.src_device, dma.bytes, dma.src_device, dma.dst_device,
            send, recv));
    // A short slice on the issuing device's track, where its flow starts.
    Add(now,
        absl::StrFormat(R"({"name":"dma start","cat":"dma","ph":"X","ts":)"),
        absl::StrFormat(R"(,"dur":0.01,"pid":%d,"tid":%d,"args":{"dma":%d,)"
                        R"("dst_device":%d,"bytes":%d,"recv_sem":"%s"}})",
                        rank_, dma.src_device, dma.id, dma.dst_device,
                        dma.bytes, recv));
    const int64_t inflight = bytes_in_flight_[dma.src_device] += dma.bytes;
    Add(now,
        absl::StrFormat(
            R"({"name":"device %d bytes in flight","cat":"dma","ph":"C","ts":)",
            dma.src_device),
        absl::StrFormat(R"(,"pid":%d,"args":{"bytes":%d}})", rank_, inflight));
  }
  if (next_) next_->OnDmaStart(dma);
}

void TimelineTracer::OnDmaComplete(const DmaEvent& dma) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = NowNs();
    Add(now,
        absl::StrFormat(
            R"({"name":"dma to device %d","cat":"dma","ph":"e","id":%d,"ts":)",
            dma.dst_device, dma.id),
        absl::StrFormat(R"(,"pid":%d,"tid":%d})", rank_, dma.src_device));
    const int64_t inflight = bytes_in_flight_[dma.src_device] -= dma.bytes;
    Add(now,
        absl::StrFormat(
            R"({"name":"device %d bytes in flight","cat":"dma","ph":"C","ts":)",
            dma.src_device),
        absl::StrFormat(R"(,"pid":%d,"args":{"bytes":%d}})", rank_, inflight));
    auto it = dma_start_ns_.find(dma.id);
    const int64_t start = it != dma_start_ns_.end() ? it->second : now;
    if (it != dma_start_ns_.end()) dma_start_ns_.erase(it);
    Keep(arrivals_, Arrival{now, start, dma.dst_device, dma.recv_sem, dma.bytes,
                            dma.src_device, dma.id});
  }
  if (next_) next_->OnDmaComplete(dma);
}

void TimelineTracer::OnSignal(int device, int target_device, Semaphore sem,
                              int64_t inc) {
  const std::string name = SemName(sem);
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = NowNs();
    Add(now, R"({"name":"signal","cat":"semaphore","ph":"X","ts":)",
        absl::StrFormat(
            R"(,"dur":0.01,"pid":%d,"tid":%d,)"
            R"("args":{"target_device":%d,"semaphore":"%s","inc":%d}})",
            rank_, device, target_device, name, inc));
    Keep(arrivals_,
         Arrival{now, now, target_device, sem.heap_offset(), inc, device, 0});
  }
  if (next_) next_->OnSignal(device, target_device, sem, inc);
}

void TimelineTracer::OnWaitBegin(int device, WaitKind kind, Semaphore sem,
                                 int64_t value, int64_t observed) {
  const std::string name = SemName(sem);
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = NowNs();
    wait_begin_ns_[device] = now;
    Add(now,
        absl::StrFormat(R"({"name":"%s","cat":"wait","ph":"B","ts":)",
                        KindName(kind)),
        absl::StrFormat(
            R"(,"pid":%d,"tid":%d,)"
            R"("args":{"semaphore":"%s","expected":%d,"observed":%d}})",
            rank_, device, name, value, observed));
  }
  if (next_) next_->OnWaitBegin(device, kind, sem, value, observed);
}

void TimelineTracer::OnWaitEnd(int device, WaitKind kind, Semaphore sem,
                               int64_t value, bool ok) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = NowNs();
    Add(now,
        absl::StrFormat(R"({"name":"%s","cat":"wait","ph":"E","ts":)",
                        KindName(kind)),
        absl::StrFormat(R"(,"pid":%d,"tid":%d,"args":{"ok":%s}})", rank_,
                        device, ok ? "true" : "false"));
    // Send-side DMA semaphores only ever hear from their own device.
    if (ok && kind != WaitKind::kDmaSend) {
      Keep(consumptions_, Consumption{wait_begin_ns_[device], now, device,
                                      sem.heap_offset(), value});
    }
  }
  if (next_) next_->OnWaitEnd(device, kind, sem, value, ok);
}

void TimelineTracer::OnSpanBegin(int device, absl::string_view name) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Add(NowNs(),
        absl::StrFormat(R"({"name":"%s","cat":"compute","ph":"B","ts":)",
                        Escape(name)),
        absl::StrFormat(R"(,"pid":%d,"tid":%d})", rank_, device));
  }
  if (next_) next_->OnSpanBegin(device, name);
}

void TimelineTracer::OnSpanEnd(int device, absl::string_view name) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Add(NowNs(),
        absl::StrFormat(R"({"name":"%s","cat":"compute","ph":"E","ts":)",
                        Escape(name)),
        absl::StrFormat(R"(,"pid":%d,"tid":%d})", rank_, device));
  }
  if (next_) next_->OnSpanEnd(device, name);
}

absl::Status TimelineTracer::Write(const std::string& path,
                                   ProcessGroup& processes) const {
  const int size = processes.size();
  // Step 1: clock offsets to rank 0 (see the header), computed by rank 0 and
  // sent to everyone.
  std::vector<int64_t> offset(size, 0), error(size, 0);
  std::vector<int> exact(size, 1);
  if (size > 1) {
    // First this kernel's boot and the tracer's start on its steady clock:
    // processes of one boot share that clock, so their offset is exact.
    std::string mine = absl::StrCat(BootId(), " ", start_ns_, " ");
    for (int k = 0; k < kClockRounds; ++k) {
      const int64_t enter = NowNs();
      MESHDMA_RETURN_IF_ERROR(
          processes.Barrier("trace clock alignment", absl::Seconds(60)));
      absl::StrAppend(&mine, enter, " ", NowNs(), " ");
    }
    MESHDMA_ASSIGN_OR_RETURN(std::vector<std::string> rounds,
                             processes.Gather(mine, /*root=*/0));
    std::string table;
    if (processes.rank() == 0) {
      std::vector<std::string> boot(size);
      std::vector<std::vector<int64_t>> t(size);
      for (int r = 0; r < size; ++r) {
        std::vector<absl::string_view> fields =
            absl::StrSplit(rounds[r], ' ', absl::SkipEmpty());
        if (fields.size() != 2 + 2 * kClockRounds) {
          return absl::InternalError("trace clock alignment: bad data");
        }
        boot[r] = std::string(fields[0]);
        for (size_t i = 1; i < fields.size(); ++i) {
          int64_t x = 0;
          if (!absl::SimpleAtoi(fields[i], &x)) {
            return absl::InternalError("trace clock alignment: bad data");
          }
          t[r].push_back(x);
        }
      }
      for (int r = 1; r < size; ++r) {
        if (boot[0] != kUnknownBoot && boot[r] == boot[0]) {
          offset[r] = t[0][0] - t[r][0];
          continue;
        }
        exact[r] = 0;
        int64_t lo = INT64_MIN, hi = INT64_MAX;
        for (int k = 0; k < kClockRounds; ++k) {
          lo = std::max(lo, t[r][1 + 2 * k] - t[0][1 + 2 * k + 1]);
          hi = std::min(hi, t[r][1 + 2 * k + 1] - t[0][1 + 2 * k]);
        }
        offset[r] = lo / 2 + hi / 2;
        error[r] = std::max<int64_t>(0, hi / 2 - lo / 2);
      }
      table = absl::StrJoin(offset, " ");
    }
    MESHDMA_RETURN_IF_ERROR(processes.Broadcast(table, 0));
    std::vector<std::string> parts = absl::StrSplit(table, ' ');
    for (int r = 0; r < size && r < static_cast<int>(parts.size()); ++r) {
      if (!absl::SimpleAtoi(parts[r], &offset[r])) {
        return absl::InternalError("trace clock alignment: bad offsets");
      }
    }
  }
  const int64_t shift = offset[processes.rank()];

  // Step 2: each process formats its events on the common clock and lists
  // its arrivals and waits for the flow replay.
  std::string json, flows;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Event& e : events_) {
      const absl::string_view text = e.text;
      if (!json.empty()) json += ",\n";
      absl::StrAppend(&json, text.substr(0, e.split), Us(e.ns - shift),
                      text.substr(e.split));
    }
    for (const Arrival& a : arrivals_) {
      absl::StrAppend(&flows, "A ", a.ns - shift, " ", a.start_ns - shift, " ",
                      a.device, " ", a.sem, " ", a.amount, " ", a.from_device,
                      " ", a.dma_id, "\n");
    }
    for (const Consumption& c : consumptions_) {
      absl::StrAppend(&flows, "C ", c.begin_ns - shift, " ", c.end_ns - shift,
                      " ", c.device, " ", c.sem, " ", c.value, "\n");
    }
    absl::StrAppend(&flows, "D ", dropped_, "\n");
  }
  MESHDMA_ASSIGN_OR_RETURN(std::vector<std::string> all_json,
                           processes.Gather(json, /*root=*/0));
  MESHDMA_ASSIGN_OR_RETURN(std::vector<std::string> all_flows,
                           processes.Gather(flows, /*root=*/0));
  // The gathered copies are all that is needed from here on.
  std::string().swap(json);
  std::string().swap(flows);
  if (processes.rank() != 0) return absl::OkStatus();

  // Step 3 (rank 0): replay every (device, semaphore) queue.
  std::vector<Arrival> arrivals;
  std::vector<Consumption> waits;
  std::vector<int64_t> dropped(size, 0);
  for (int r = 0; r < static_cast<int>(all_flows.size()); ++r) {
    std::istringstream in(all_flows[r]);
    std::string kind;
    while (in >> kind) {
      if (kind == "D") {
        in >> dropped[r];
      } else if (kind == "A") {
        Arrival a;
        in >> a.ns >> a.start_ns >> a.device >> a.sem >> a.amount >>
            a.from_device >> a.dma_id;
        arrivals.push_back(a);
      } else {
        Consumption c;
        in >> c.begin_ns >> c.end_ns >> c.device >> c.sem >> c.value;
        waits.push_back(c);
      }
    }
  }
  std::sort(arrivals.begin(), arrivals.end(),
            [](const Arrival& a, const Arrival& b) { return a.ns < b.ns; });
  std::sort(waits.begin(), waits.end(),
            [](const Consumption& a, const Consumption& b) {
              return a.end_ns < b.end_ns;
            });
  std::map<std::pair<int, int64_t>, std::deque<std::pair<Arrival, int64_t>>>
      queues;
  for (const Arrival& a : arrivals) {
    queues[{a.device, a.sem}].push_back({a, a.amount});
  }
  auto rank_of = [&](int device) {
    return device >= 0 && device < launch_.num_devices()
               ? launch_.devices()[device].rank
               : 0;
  };
  // Step 4 (rank 0): stream the file: header, flows, track names, then
  // every process's events, without holding a second copy of them.
  std::ofstream f(path);
  if (!f) {
    return absl::InternalError(absl::StrCat("cannot write trace file '", path,
                                            "': ", std::strerror(errno)));
  }
  f << "{\"displayTimeUnit\":\"ns\",\n\"otherData\":{\"clock\":\"each "
       "rank's steady clock from its tracer's start, shifted by its offset "
       "to rank 0's: exact for a rank on rank 0's machine (one boot, one "
       "steady clock), else estimated over "
    << kClockRounds
    << " barrier rounds; ts are microseconds on rank 0's clock\","
       "\"clock_offset_ns\":["
    << absl::StrJoin(offset, ",") << "],\"clock_error_bound_ns\":["
    << absl::StrJoin(error, ",") << "],\"clock_offset_exact\":["
    << absl::StrJoin(exact, ",") << "],\"max_events_per_rank\":" << max_events_
    << ",\"dropped_events\":[" << absl::StrJoin(dropped, ",")
    << "]},\n\"traceEvents\":[\n";
  bool first = true;
  auto emit = [&](absl::string_view entry) {
    if (!first) f << ",\n";
    first = false;
    f << entry;
  };
  int64_t flow_id = 0;
  for (const Consumption& w : waits) {
    auto& q = queues[{w.device, w.sem}];
    int64_t need = w.value;
    while (need > 0 && !q.empty()) {
      auto& [a, left] = q.front();
      const int64_t take = std::min(need, left);
      need -= take;
      left -= take;
      ++flow_id;
      const char* name = a.dma_id != 0 ? "dma" : "signal";
      emit(absl::StrFormat(
          R"({"name":"%s","cat":"flow","ph":"s","id":%d,"ts":%s,"pid":%d,"tid":%d,)"
          R"("args":{"to_device":%d,"dma":%d,"units":%d}})",
          name, flow_id, Us(a.start_ns), rank_of(a.from_device), a.from_device,
          w.device, a.dma_id, take));
      emit(absl::StrFormat(
          R"({"name":"%s","cat":"flow","ph":"f","bp":"e","id":%d,"ts":%s,"pid":%d,"tid":%d,)"
          R"("args":{"to_device":%d}})",
          name, flow_id, Us(std::max(w.begin_ns, w.end_ns - 1)),
          rank_of(w.device), w.device, w.device));
      if (left == 0) q.pop_front();
    }
  }
  // Track names: a process per rank, a thread per device.
  for (int r = 0; r < launch_.num_processes(); ++r) {
    emit(absl::StrFormat(
        R"j({"name":"process_name","ph":"M","pid":%d,"args":{"name":"rank %d (%s)"}})j",
        r, r, Escape(launch_.processes()[r].hostname)));
  }
  for (const GlobalDevice& d : launch_.devices()) {
    const std::string core =
        d.core >= 0 ? absl::StrCat("core ", d.core) : std::string("unpinned");
    emit(absl::StrFormat(R"({"name":"thread_name","ph":"M","pid":%d,"tid":%d,)"
                         R"j("args":{"name":"device %d (rank %d, %s)"}})j",
                         d.rank, d.global_index, d.global_index, d.rank, core));
    emit(absl::StrFormat(
        R"({"name":"thread_sort_index","ph":"M","pid":%d,"tid":%d,)"
        R"("args":{"sort_index":%d}})",
        d.rank, d.global_index, d.global_index));
  }
  for (std::string& part : all_json) {
    if (!part.empty()) emit(part);
    part.clear();
    part.shrink_to_fit();
  }
  f << "\n]}\n";
  f.close();
  return f ? absl::OkStatus()
           : absl::InternalError(
                 absl::StrCat("error writing trace file '", path, "'"));
}

}  // namespace dma_internal
}  // namespace meshdma
