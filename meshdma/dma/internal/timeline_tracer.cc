#include "meshdma/dma/internal/timeline_tracer.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "meshdma/base/status_macros.h"

namespace meshdma {
namespace {

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

}  // namespace

namespace dma_internal {

TimelineTracer::TimelineTracer(int rank, Observer* next)
    : rank_(rank), next_(next), start_ns_(absl::GetCurrentTimeNanos()) {}

double TimelineTracer::NowUs() const {
  return (absl::GetCurrentTimeNanos() - start_ns_) / 1e3;
}

void TimelineTracer::Add(std::string event_json) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(std::move(event_json));
}

void TimelineTracer::OnKernelBegin(int device, absl::string_view kernel) {
  Add(absl::StrFormat(
      R"({"name":"%s","cat":"kernel","ph":"B","ts":%.3f,"pid":%d,"tid":%d})",
      Escape(kernel), NowUs(), rank_, device));
  if (next_) next_->OnKernelBegin(device, kernel);
}

void TimelineTracer::OnKernelEnd(int device, absl::string_view kernel) {
  Add(absl::StrFormat(
      R"({"name":"%s","cat":"kernel","ph":"E","ts":%.3f,"pid":%d,"tid":%d})",
      Escape(kernel), NowUs(), rank_, device));
  if (next_) next_->OnKernelEnd(device, kernel);
}

void TimelineTracer::OnDmaStart(const DmaEvent& dma) {
  Add(absl::StrFormat(
      R"({"name":"dma to device %d","cat":"dma","ph":"b","id":%d,"ts":%.3f,"pid":%d,"tid":%d,)"
      R"("args":{"bytes":%d,"src_device":%d,"dst_device":%d,"send_sem":%d,"recv_sem":%d}})",
      dma.dst_device, dma.id, NowUs(), rank_, dma.src_device, dma.bytes,
      dma.src_device, dma.dst_device, dma.send_sem, dma.recv_sem));
  if (next_) next_->OnDmaStart(dma);
}

void TimelineTracer::OnDmaComplete(const DmaEvent& dma) {
  Add(absl::StrFormat(
      R"({"name":"dma to device %d","cat":"dma","ph":"e","id":%d,"ts":%.3f,"pid":%d,"tid":%d})",
      dma.dst_device, dma.id, NowUs(), rank_, dma.src_device));
  if (next_) next_->OnDmaComplete(dma);
}

void TimelineTracer::OnSignal(int device, int target_device, Semaphore sem,
                              int64_t inc) {
  Add(absl::StrFormat(
      R"({"name":"signal","cat":"semaphore","ph":"i","s":"t","ts":%.3f,"pid":%d,"tid":%d,)"
      R"("args":{"target_device":%d,"semaphore":"%s","inc":%d}})",
      NowUs(), rank_, device, target_device, sem.ToString(), inc));
  if (next_) next_->OnSignal(device, target_device, sem, inc);
}

void TimelineTracer::OnWaitBegin(int device, WaitKind kind, Semaphore sem,
                                 int64_t value, int64_t observed) {
  Add(absl::StrFormat(
      R"({"name":"%s","cat":"wait","ph":"B","ts":%.3f,"pid":%d,"tid":%d,)"
      R"("args":{"semaphore":"%s","expected":%d,"observed":%d}})",
      KindName(kind), NowUs(), rank_, device, sem.ToString(), value, observed));
  if (next_) next_->OnWaitBegin(device, kind, sem, value, observed);
}

void TimelineTracer::OnWaitEnd(int device, WaitKind kind, Semaphore sem,
                               int64_t value, bool ok) {
  Add(absl::StrFormat(
      R"({"name":"%s","cat":"wait","ph":"E","ts":%.3f,"pid":%d,"tid":%d,"args":{"ok":%s}})",
      KindName(kind), NowUs(), rank_, device, ok ? "true" : "false"));
  if (next_) next_->OnWaitEnd(device, kind, sem, value, ok);
}

void TimelineTracer::OnSpanBegin(int device, absl::string_view name) {
  Add(absl::StrFormat(
      R"({"name":"%s","cat":"compute","ph":"B","ts":%.3f,"pid":%d,"tid":%d})",
      Escape(name), NowUs(), rank_, device));
  if (next_) next_->OnSpanBegin(device, name);
}

void TimelineTracer::OnSpanEnd(int device, absl::string_view name) {
  Add(absl::StrFormat(
      R"({"name":"%s","cat":"compute","ph":"E","ts":%.3f,"pid":%d,"tid":%d})",
      Escape(name), NowUs(), rank_, device));
  if (next_) next_->OnSpanEnd(device, name);
}

absl::Status TimelineTracer::Write(const std::string& path,
                                   ProcessGroup& processes) const {
  std::string mine;
  {
    std::lock_guard<std::mutex> lock(mu_);
    mine = absl::StrJoin(events_, ",\n");
    // Name the tracks: a process per rank, a thread per device.
    absl::StrAppend(
        &mine, mine.empty() ? "" : ",\n",
        absl::StrFormat(R"({"name":"process_name","ph":"M","pid":%d,)"
                        R"("args":{"name":"rank %d"}})",
                        rank_, rank_));
  }
  MESHDMA_ASSIGN_OR_RETURN(std::vector<std::string> parts,
                           processes.Gather(mine, /*root=*/0));
  if (processes.rank() != 0) return absl::OkStatus();
  parts.erase(std::remove(parts.begin(), parts.end(), std::string()),
              parts.end());
  const std::string all = absl::StrJoin(parts, ",\n");
  std::ofstream f(path);
  if (!f)
    return absl::InternalError(absl::StrCat("cannot write trace file ", path));
  f << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n" << all << "\n]}\n";
  return f ? absl::OkStatus()
           : absl::InternalError(
                 absl::StrCat("error writing trace file ", path));
}

}  // namespace dma_internal
}  // namespace meshdma
