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
#include "meshdma/dma/internal/wait_policy.h"
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

void TimelineTracer::AddEvent(int64_t ns, absl::string_view name,
                              absl::string_view cat, char phase, int device,
                              absl::string_view args, absl::string_view id,
                              absl::string_view dur) {
  // The event's text on either side of its timestamp, which `Write` fills in
  // on rank 0's clock.
  std::string head = absl::StrCat(R"({"name":")", name, R"(","cat":")", cat,
                                  R"(","ph":")", std::string(1, phase), "\"");
  if (!id.empty()) absl::StrAppend(&head, R"(,"id":)", id);
  absl::StrAppend(&head, R"(,"ts":)");
  std::string tail;
  if (!dur.empty()) absl::StrAppend(&tail, R"(,"dur":)", dur);
  absl::StrAppend(&tail, R"(,"pid":)", rank_);
  if (device >= 0) absl::StrAppend(&tail, R"(,"tid":)", device);
  if (!args.empty()) absl::StrAppend(&tail, R"(,"args":)", args);
  tail.push_back('}');
  const uint32_t split = static_cast<uint32_t>(head.size());
  Keep(events_, Event{ns, absl::StrCat(head, tail), split});
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
    AddEvent(NowNs(), Escape(kernel), "kernel", 'B', device);
  }
  if (next_) next_->OnKernelBegin(device, kernel);
}

void TimelineTracer::OnKernelEnd(int device, absl::string_view kernel) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    AddEvent(NowNs(), Escape(kernel), "kernel", 'E', device);
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
    // The DMA's span from start to completion, on the issuing device.
    AddEvent(
        now, absl::StrCat("dma to device ", dma.dst_device), "dma", 'b',
        dma.src_device,
        absl::StrFormat(R"({"bytes":%d,"src_device":%d,"dst_device":%d,)"
                        R"("send_sem":"%s","recv_sem":"%s"})",
                        dma.bytes, dma.src_device, dma.dst_device, send, recv),
        absl::StrCat(dma.id));
    // A short slice on the issuing device's track, where its flow starts.
    AddEvent(now, "dma start", "dma", 'X', dma.src_device,
             absl::StrFormat(
                 R"({"dma":%d,"dst_device":%d,"bytes":%d,"recv_sem":"%s"})",
                 dma.id, dma.dst_device, dma.bytes, recv),
             /*id=*/"", /*dur=*/"0.01");
    AddInFlight(now, dma.src_device, dma.bytes);
  }
  if (next_) next_->OnDmaStart(dma);
}

void TimelineTracer::OnDmaComplete(const DmaEvent& dma) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = NowNs();
    AddEvent(now, absl::StrCat("dma to device ", dma.dst_device), "dma", 'e',
             dma.src_device, /*args=*/"", absl::StrCat(dma.id));
    AddInFlight(now, dma.src_device, -dma.bytes);
    auto it = dma_start_ns_.find(dma.id);
    const int64_t start = it != dma_start_ns_.end() ? it->second : now;
    if (it != dma_start_ns_.end()) dma_start_ns_.erase(it);
    Keep(arrivals_, Arrival{now, start, dma.dst_device, dma.recv_sem, dma.bytes,
                            dma.src_device, dma.id});
  }
  if (next_) next_->OnDmaComplete(dma);
}

void TimelineTracer::AddInFlight(int64_t ns, int device, int64_t bytes) {
  const int64_t inflight = bytes_in_flight_[device] += bytes;
  AddEvent(ns, absl::StrCat("device ", device, " bytes in flight"), "dma", 'C',
           /*device=*/-1, absl::StrCat(R"({"bytes":)", inflight, "}"));
}

void TimelineTracer::OnSignal(int device, int target_device, Semaphore sem,
                              int64_t inc) {
  const std::string name = SemName(sem);
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = NowNs();
    AddEvent(
        now, "signal", "semaphore", 'X', device,
        absl::StrFormat(R"({"target_device":%d,"semaphore":"%s","inc":%d})",
                        target_device, name, inc),
        /*id=*/"", /*dur=*/"0.01");
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
    AddEvent(
        now, dma_internal::WaitVerb(kind), "wait", 'B', device,
        absl::StrFormat(R"({"semaphore":"%s","expected":%d,"observed":%d})",
                        name, value, observed));
  }
  if (next_) next_->OnWaitBegin(device, kind, sem, value, observed);
}

void TimelineTracer::OnWaitEnd(int device, WaitKind kind, Semaphore sem,
                               int64_t value, bool ok) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = NowNs();
    AddEvent(now, dma_internal::WaitVerb(kind), "wait", 'E', device,
             absl::StrCat(R"({"ok":)", ok ? "true" : "false", "}"));
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
    AddEvent(NowNs(), Escape(name), "compute", 'B', device);
  }
  if (next_) next_->OnSpanBegin(device, name);
}

void TimelineTracer::OnSpanEnd(int device, absl::string_view name) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    AddEvent(NowNs(), Escape(name), "compute", 'E', device);
  }
  if (next_) next_->OnSpanEnd(device, name);
}

absl::Status TimelineTracer::Write(const std::string& path,
                                   ProcessGroup& processes) const {
  // Step 1: clock offsets to rank 0's, computed by rank 0 and sent to all.
  MESHDMA_ASSIGN_OR_RETURN(Clocks clocks, AlignClocks(processes));
  // Step 2: each process formats its events on rank 0's clock and lists its
  // arrivals and waits for the flow replay; rank 0 gathers them.
  std::string json, flows;
  FormatLocal(clocks.offset[processes.rank()], &json, &flows);
  MESHDMA_ASSIGN_OR_RETURN(std::vector<std::string> all_json,
                           processes.Gather(json, /*root=*/0));
  MESHDMA_ASSIGN_OR_RETURN(std::vector<std::string> all_flows,
                           processes.Gather(flows, /*root=*/0));
  // The gathered copies are all that is needed from here on.
  std::string().swap(json);
  std::string().swap(flows);
  if (processes.rank() != 0) return absl::OkStatus();
  // Step 3 (rank 0): the file.
  return WriteFile(path, clocks, all_json, all_flows);
}

absl::StatusOr<TimelineTracer::Clocks> TimelineTracer::AlignClocks(
    ProcessGroup& processes) const {
  const int size = processes.size();
  Clocks clocks{std::vector<int64_t>(size, 0), std::vector<int64_t>(size, 0),
                std::vector<int>(size, 1)};
  if (size == 1) return clocks;
  // This kernel's boot and the tracer's start on its steady clock (processes
  // of one boot share that clock, so their offset is exact), then each
  // round's barrier entry and exit.
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
    MESHDMA_RETURN_IF_ERROR(OffsetsFromRounds(rounds, &clocks));
    table = absl::StrJoin(clocks.offset, " ");
  }
  MESHDMA_RETURN_IF_ERROR(processes.Broadcast(table, 0));
  std::vector<std::string> parts = absl::StrSplit(table, ' ');
  for (int r = 0; r < size && r < static_cast<int>(parts.size()); ++r) {
    if (!absl::SimpleAtoi(parts[r], &clocks.offset[r])) {
      return absl::InternalError("trace clock alignment: bad offsets");
    }
  }
  return clocks;
}

void TimelineTracer::FormatLocal(int64_t shift, std::string* json,
                                 std::string* flows) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Event& e : events_) {
    const absl::string_view text = e.text;
    if (!json->empty()) *json += ",\n";
    absl::StrAppend(json, text.substr(0, e.split), Us(e.ns - shift),
                    text.substr(e.split));
  }
  for (const Arrival& a : arrivals_) {
    absl::StrAppend(flows, "A ", a.ns - shift, " ", a.start_ns - shift, " ",
                    a.device, " ", a.sem, " ", a.amount, " ", a.from_device,
                    " ", a.dma_id, "\n");
  }
  for (const Consumption& c : consumptions_) {
    absl::StrAppend(flows, "C ", c.begin_ns - shift, " ", c.end_ns - shift, " ",
                    c.device, " ", c.sem, " ", c.value, "\n");
  }
  absl::StrAppend(flows, "D ", dropped_, "\n");
}

absl::Status TimelineTracer::WriteFile(
    const std::string& path, const Clocks& clocks,
    std::vector<std::string>& all_json,
    const std::vector<std::string>& all_flows) const {
  // Step 1: every rank's arrivals and waits, and what each dropped.
  std::vector<Arrival> arrivals;
  std::vector<Consumption> waits;
  std::vector<int64_t> dropped(clocks.offset.size(), 0);
  ParseFlows(all_flows, &arrivals, &waits, &dropped);
  // Step 2: the header.
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
    << absl::StrJoin(clocks.offset, ",") << "],\"clock_error_bound_ns\":["
    << absl::StrJoin(clocks.error, ",") << "],\"clock_offset_exact\":["
    << absl::StrJoin(clocks.exact, ",")
    << "],\"max_events_per_rank\":" << max_events_ << ",\"dropped_events\":["
    << absl::StrJoin(dropped, ",") << "]},\n\"traceEvents\":[\n";
  bool first = true;
  auto emit = [&](absl::string_view entry) {
    if (!first) f << ",\n";
    first = false;
    f << entry;
  };
  // Step 3: a flow from each arrival to the wait that consumed it.
  ReplayFlows(launch_, arrivals, waits, emit);
  // Step 4: track names, a process per rank and a thread per device.
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
  // Step 5: every process's events, releasing each as it is written.
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

absl::Status TimelineTracer::OffsetsFromRounds(
    const std::vector<std::string>& rounds, Clocks* clocks) {
  const int size = static_cast<int>(rounds.size());
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
      clocks->offset[r] = t[0][0] - t[r][0];
      continue;
    }
    // Rank r's barrier exit follows rank 0's entry and precedes rank 0's
    // exit: the offset lies between the bounds of every round.
    clocks->exact[r] = 0;
    int64_t lo = INT64_MIN, hi = INT64_MAX;
    for (int k = 0; k < kClockRounds; ++k) {
      lo = std::max(lo, t[r][1 + 2 * k] - t[0][1 + 2 * k + 1]);
      hi = std::min(hi, t[r][1 + 2 * k + 1] - t[0][1 + 2 * k]);
    }
    clocks->offset[r] = lo / 2 + hi / 2;
    clocks->error[r] = std::max<int64_t>(0, hi / 2 - lo / 2);
  }
  return absl::OkStatus();
}

void TimelineTracer::ParseFlows(const std::vector<std::string>& all_flows,
                                std::vector<Arrival>* arrivals,
                                std::vector<Consumption>* waits,
                                std::vector<int64_t>* dropped) {
  for (int r = 0; r < static_cast<int>(all_flows.size()); ++r) {
    std::istringstream in(all_flows[r]);
    std::string kind;
    while (in >> kind) {
      if (kind == "D") {
        in >> (*dropped)[r];
      } else if (kind == "A") {
        Arrival a;
        in >> a.ns >> a.start_ns >> a.device >> a.sem >> a.amount >>
            a.from_device >> a.dma_id;
        arrivals->push_back(a);
      } else {
        Consumption c;
        in >> c.begin_ns >> c.end_ns >> c.device >> c.sem >> c.value;
        waits->push_back(c);
      }
    }
  }
  std::sort(arrivals->begin(), arrivals->end(),
            [](const Arrival& a, const Arrival& b) { return a.ns < b.ns; });
  std::sort(waits->begin(), waits->end(),
            [](const Consumption& a, const Consumption& b) {
              return a.end_ns < b.end_ns;
            });
}

void TimelineTracer::ReplayFlows(
    const Launch& launch, const std::vector<Arrival>& arrivals,
    const std::vector<Consumption>& waits,
    const std::function<void(absl::string_view)>& emit) {
  std::map<std::pair<int, int64_t>, std::deque<std::pair<Arrival, int64_t>>>
      queues;
  for (const Arrival& a : arrivals) {
    queues[{a.device, a.sem}].push_back({a, a.amount});
  }
  auto rank_of = [&](int device) {
    return device >= 0 && device < launch.num_devices()
               ? launch.devices()[device].rank
               : 0;
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
}

}  // namespace dma_internal
}  // namespace meshdma
