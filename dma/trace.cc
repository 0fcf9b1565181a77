#include "dma/trace.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "dma/internal/device.h"
#include "dma/internal/runtime_impl.h"

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

TraceSpan::TraceSpan(absl::string_view name) {
  internal::Device* d = internal::CurrentDevice();
  if (d == nullptr) return;
  if (Observer* obs = d->runtime()->observer()) {
    device_ = d->global_index();
    name_ = std::string(name);
    obs->OnSpanBegin(device_, name_);
  }
}

TraceSpan::~TraceSpan() {
  if (device_ < 0) return;
  if (internal::Device* d = internal::CurrentDevice()) {
    if (Observer* obs = d->runtime()->observer())
      obs->OnSpanEnd(device_, name_);
  }
}

namespace internal {

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
                                   MPI_Comm comm) const {
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
  std::string all = mine;
  int rank = 0;
  if (comm != MPI_COMM_NULL) {
    int size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int len = static_cast<int>(mine.size());
    std::vector<int> lens(size), displs(size);
    MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm);
    int total = 0;
    for (int r = 0; r < size; ++r) {
      displs[r] = total;
      total += lens[r];
    }
    std::string gathered(rank == 0 ? total : 0, '\0');
    MPI_Gatherv(mine.data(), len, MPI_CHAR, gathered.data(), lens.data(),
                displs.data(), MPI_CHAR, 0, comm);
    if (rank == 0) {
      std::vector<std::string> parts;
      for (int r = 0; r < size; ++r) {
        if (lens[r] > 0) parts.push_back(gathered.substr(displs[r], lens[r]));
      }
      all = absl::StrJoin(parts, ",\n");
    }
  }
  if (rank != 0) return absl::OkStatus();
  std::ofstream f(path);
  if (!f)
    return absl::InternalError(absl::StrCat("cannot write trace file ", path));
  f << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n" << all << "\n]}\n";
  return f ? absl::OkStatus()
           : absl::InternalError(
                 absl::StrCat("error writing trace file ", path));
}

}  // namespace internal
}  // namespace meshdma
