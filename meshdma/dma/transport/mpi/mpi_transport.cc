#include "meshdma/dma/transport/mpi/mpi_transport.h"

#include <sched.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "meshdma/base/checked_math.h"
#include "meshdma/base/deadline.h"
#include "meshdma/base/thread_name.h"
#include "meshdma/dma/transport/mpi/mpi_path.h"
#include "meshdma/dma/transport/mpi/mpi_process_group.h"
#include "meshdma/dma/transport/wire.h"

namespace meshdma::dma_internal {
namespace {

constexpr int kMessageTag = 7101;
constexpr int kPayloadTag = 7102;
constexpr int kShutdownBarrierTag = 7103;
constexpr int64_t kMaxPiece = int64_t{1} << 30;

void WriteNothing(std::byte*) {}

// An MPI datatype, built of MPI_BYTEs, that reads or writes the bytes of a
// strided view `v` in place, so that MPI moves them without a packed copy on
// either side. MPI_DATATYPE_NULL when the caller must pack instead: the view
// is contiguous, a stride is not positive, a count does not fit MPI's int,
// or the view holds more than one message piece. The caller frees the type
// once the send or receive using it is posted.
MPI_Datatype StridedDatatype(const ViewLayout& v, int64_t elem_bytes,
                             int64_t bytes) {
  if (bytes > kMaxPiece) return MPI_DATATYPE_NULL;
  // The dimensions that repeat, outermost first, with the innermost
  // contiguous run folded into `run` bytes and packed neighbours merged.
  int64_t counts[kMaxRank], strides[kMaxRank];
  int dims = 0;
  for (int d = 0; d < v.rank; ++d) {
    if (v.shape[d] == 1) continue;
    if (v.byte_strides[d] <= 0) return MPI_DATATYPE_NULL;
    counts[dims] = v.shape[d];
    strides[dims++] = v.byte_strides[d];
  }
  int64_t run = elem_bytes;
  while (dims > 0 && strides[dims - 1] == run) run *= counts[--dims];
  if (dims == 0) return MPI_DATATYPE_NULL;  // Contiguous.
  int merged = 0;
  for (int d = 1; d < dims; ++d) {
    if (strides[merged] == counts[d] * strides[d]) {
      counts[merged] *= counts[d];
      strides[merged] = strides[d];
    } else {
      ++merged;
      counts[merged] = counts[d];
      strides[merged] = strides[d];
    }
  }
  dims = merged + 1;
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (run > kIntMax) return MPI_DATATYPE_NULL;
  for (int d = 0; d < dims; ++d) {
    if (counts[d] > kIntMax) return MPI_DATATYPE_NULL;
  }
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Type_create_hvector(static_cast<int>(counts[dims - 1]),
                          static_cast<int>(run), strides[dims - 1], MPI_BYTE,
                          &type);
  for (int d = dims - 2; d >= 0; --d) {
    MPI_Datatype outer = MPI_DATATYPE_NULL;
    MPI_Type_create_hvector(static_cast<int>(counts[d]), 1, strides[d], type,
                            &outer);
    MPI_Type_free(&type);
    type = outer;
  }
  MPI_Type_commit(&type);
  return type;
}

// Bytes that are written in full before anything reads them: allocated
// without the zero fill of a std::vector, which would write every byte of
// every message twice.
class ByteBuffer {
 public:
  // Keeps the allocation when it holds `bytes`; the contents are undefined.
  void Resize(size_t bytes) {
    if (bytes > capacity_) {
      data_ = std::make_unique_for_overwrite<std::byte[]>(bytes);
      capacity_ = bytes;
    }
    size_ = bytes;
  }
  void Release() {
    data_.reset();
    size_ = capacity_ = 0;
  }
  std::byte* data() const { return data_.get(); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  std::unique_ptr<std::byte[]> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace

struct MpiTransport::PendingSend {
  ByteBuffer message;         // WireHeader and inline payload.
  ByteBuffer packed;          // A strided source, gathered.
  std::unique_ptr<DmaOp> op;  // Non-inline puts: completes with the send.
  std::vector<MPI_Request> requests;
  int dest = -1;
  // Counted in `pending_`: a non-inline put, whose issuer waits for the send
  // to complete. Other sends only have a buffer to retire.
  bool awaited = false;
};

struct MpiTransport::PendingRecv {
  std::vector<MPI_Request> requests;
  ByteBuffer staging;  // Non-contiguous destinations only.
  WireHeader header;   // Checked mode: reported on arrival.
  std::vector<uint32_t> check_clock;
  std::byte* dst = nullptr;
  ViewLayout dst_layout;
  int64_t elem_bytes = 1;
  int64_t bytes = 0;
  SemaphoreCell* recv_cell = nullptr;
};

MpiTransport::MpiTransport(TransportHost* host, MPI_Comm comm,
                           std::vector<MpiPeerLimits> limits)
    : host_(host), comm_(comm), limits_(std::move(limits)), progress_(host) {
  progress_.SetWake([this] {
    {
      std::lock_guard<std::mutex> lock(wake_mu_);
      wake_requested_ = true;
    }
    wake_cv_.notify_one();
  });
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  flushed_from_.assign(size_, 0);
  // Pre-posted receives for headers and inline payloads: any incoming message
  // matches the earliest one still pending, so they complete in posting
  // order and are handled (and re-posted) in that order.
  for (int i = 0; i < kPostedReceives; ++i) {
    posted_[i].buffer.resize(sizeof(WireHeader) + sizeof(ViewLayout) +
                             kInlineBytes);
    MPI_Recv_init(posted_[i].buffer.data(),
                  static_cast<int>(posted_[i].buffer.size()), MPI_BYTE,
                  MPI_ANY_SOURCE, kMessageTag, comm_, &posted_[i].request);
    MPI_Start(&posted_[i].request);
  }
  thread_ = std::thread([this] { ProgressMain(); });
  base_internal::NameThread(thread_, "meshdma-mpi");
}

MpiTransport::~MpiTransport() {
  Shutdown().IgnoreError();
  if (!MpiPeersLost()) MPI_Comm_free(&comm_);
}

void MpiTransport::PackMessage(PendingSend& send, const WireHeader& header,
                               const ViewLayout* layout,
                               const InlinePayload& inline_payload,
                               std::span<const uint32_t> check_clock) {
  const size_t clock_bytes = check_clock.size() * sizeof(uint32_t);
  const size_t layout_bytes = layout != nullptr ? sizeof(ViewLayout) : 0;
  send.message.Resize(sizeof(WireHeader) + layout_bytes + clock_bytes +
                      inline_payload.bytes);
  WireHeader h = header;
  h.has_layout = layout != nullptr ? 1 : 0;
  h.check_words = static_cast<int32_t>(check_clock.size());
  h.inline_bytes = static_cast<int32_t>(inline_payload.bytes);
  std::byte* at = send.message.data();
  auto append = [&at](const void* bytes, size_t n) {
    if (n > 0) std::memcpy(at, bytes, n);
    at += n;
  };
  append(&h, sizeof(WireHeader));
  append(layout, layout_bytes);
  append(check_clock.data(), clock_bytes);
  if (inline_payload.bytes > 0) inline_payload.write(at);
}

void MpiTransport::PostPayloadLocked(PendingSend& send, const DmaOp& op) {
  MPI_Request req;
  MPI_Datatype strided =
      IsPacked(op.src_layout, op.elem_bytes)
          ? MPI_DATATYPE_NULL
          : StridedDatatype(op.src_layout, op.elem_bytes, op.event.bytes);
  if (strided != MPI_DATATYPE_NULL) {
    // In place: one message of the view's bytes in element order, the
    // order in which the receiver's layout takes them.
    MPI_Isend(op.src, 1, strided, send.dest, kPayloadTag, comm_, &req);
    send.requests.push_back(req);
    MPI_Type_free(&strided);
    return;
  }
  const std::byte* payload = op.src;
  if (!IsPacked(op.src_layout, op.elem_bytes)) {
    send.packed.Resize(op.event.bytes);
    CopyPlan(op.src_layout, Packed(op.src_layout, op.elem_bytes), op.elem_bytes)
        .CopyAll(op.src, send.packed.data());
    payload = send.packed.data();
  }
  for (int64_t off = 0; off < op.event.bytes; off += kMaxPiece) {
    const int64_t len = std::min(kMaxPiece, op.event.bytes - off);
    MPI_Isend(payload + off, static_cast<int>(len), MPI_BYTE, send.dest,
              kPayloadTag, comm_, &req);
    send.requests.push_back(req);
  }
}

void MpiTransport::Send(int dest_rank, const WireHeader& header,
                        const ViewLayout* layout,
                        const InlinePayload& inline_payload,
                        std::unique_ptr<DmaOp> op,
                        std::span<const uint32_t> check_clock) {
  // Step 1: receives are posted for a header and kInlineBytes more.
  const size_t clock_bytes = check_clock.size() * sizeof(uint32_t);
  if (static_cast<int64_t>(clock_bytes) + inline_payload.bytes > kInlineBytes) {
    host_->Abort(absl::StrCat("checked mode over MPI carries at most ",
                              kInlineBytes / sizeof(uint32_t),
                              " devices' clocks in a message; this mesh has ",
                              check_clock.size()),
                 /*notify_peers=*/true);
    // The issuer's in-flight list still names the op: keep it alive (the
    // launch is over).
    op.release();
    return;
  }
  // Step 2: the message. Most sends complete at once (MPI's eager path):
  // the calling thread's last completed send is reused, its message buffer
  // and request list with it, which saves three allocations and frees per
  // small message.
  thread_local std::unique_ptr<PendingSend> t_spare;
  std::unique_ptr<PendingSend> send = std::move(t_spare);
  if (send == nullptr) send = std::make_unique<PendingSend>();
  send->requests.clear();
  send->dest = dest_rank;
  PackMessage(*send, header, layout, inline_payload, check_clock);
  std::unique_ptr<DmaOp> done;  // An inline put's source is already read.
  // A device that sends counts as polling (progress_policy.h).
  progress_.DeviceSent();
  {
    // Step 3: post the message, and the payload that does not travel in it.
    std::lock_guard<std::recursive_mutex> lock(mu_);
    MPI_Request req;
    MPI_Isend(send->message.data(), static_cast<int>(send->message.size()),
              MPI_BYTE, dest_rank, kMessageTag, comm_, &req);
    send->requests.push_back(req);
    if (op != nullptr && inline_payload.bytes == 0 && header.value > 0) {
      PostPayloadLocked(*send, *op);
      send->op = std::move(op);
    } else {
      done = std::move(op);
    }
    // Step 4: an eager send is usually complete at once. Only this send is
    // tested: polling for incoming messages here would, on an
    // oversubscribed machine, make MPI yield the core inside every start()
    // (Open MPI's yield_when_idle), and whoever waits polls them anyway.
    int sent = 0;
    MPI_Testall(static_cast<int>(send->requests.size()), send->requests.data(),
                &sent, MPI_STATUSES_IGNORE);
    if (sent) {
      if (send->op != nullptr) done = std::move(send->op);
      send->packed.Release();  // Only a strided source's, rarely reused.
      t_spare = std::move(send);
    } else {
      // Nobody waits for an inline message's send to complete (its put
      // completed when it was packed): it is retired by whoever progresses
      // MPI next, and keeps neither the progress thread nor a waiter busy.
      send->awaited = send->op != nullptr;
      if (send->awaited) pending_.fetch_add(1, std::memory_order_relaxed);
      sends_.push_back(std::move(send));
    }
  }
  if (done != nullptr) host_->CompleteDma(std::move(done));
  // What is left moves when someone progresses MPI: this device, which
  // most likely waits next, or the progress thread once no device has
  // polled for a while (progress_policy.h).
}

void MpiTransport::Put(std::unique_ptr<DmaOp> op) {
  WireHeader h = PutHeader(*op);
  const std::vector<uint32_t> clock = op->check_clock;
  const int dest = host_->RankOf(h.dst_device);
  // A contiguous destination needs no layout: it is `value` bytes from
  // `dst_offset`. Checked mode reports the view as the issuer wrote it.
  const ViewLayout* layout =
      IsPacked(op->dst_layout, op->elem_bytes) && clock.empty()
          ? nullptr
          : &op->dst_layout;
  const int64_t clock_bytes =
      static_cast<int64_t>(clock.size() * sizeof(uint32_t));
  const MpiPeerLimits& limits = limits_[dest];
  // Just past MPI's fastest path (`MpiPeerLimits::fast_bytes`): two
  // messages that stay on it.
  const int64_t fast_payload = limits.fast_bytes - kWireHeaderBytes;
  if (fast_payload > 0 && clock.empty() && layout == nullptr &&
      op->event.bytes > fast_payload && op->event.bytes <= 2 * fast_payload &&
      IsPacked(op->src_layout, op->elem_bytes)) {
    PutInPieces(dest, h, std::move(op), fast_payload);
    return;
  }
  if (op->event.bytes + clock_bytes > limits.piece_bytes) {
    if (clock.empty() && op->event.bytes <= limits.pieced_bytes) {
      PutInPieces(dest, h, std::move(op), limits.piece_bytes);
      return;
    }
    if (op->event.bytes + clock_bytes > kInlineBytes) {
      Send(dest, h, layout, {0, WriteNothing}, std::move(op), clock);
      return;
    }
  }
  // Small: pack the payload behind the header, one message (a packed
  // source is one memcpy, without a copy plan).
  const DmaOp& src = *op;
  std::optional<CopyPlan> pack;
  if (!IsPacked(src.src_layout, src.elem_bytes)) {
    pack.emplace(src.src_layout, Packed(src.src_layout, src.elem_bytes),
                 src.elem_bytes);
  }
  Send(dest, h, layout,
       {src.event.bytes,
        [&](std::byte* at) {
          if (pack.has_value()) {
            pack->CopyAll(src.src, at);
          } else {
            std::memcpy(at, src.src, src.event.bytes);
          }
        }},
       std::move(op), clock);
}

void MpiTransport::PutInPieces(int dest_rank, const WireHeader& header,
                               std::unique_ptr<DmaOp> op, int64_t piece_bytes) {
  ViewLayout src = op->src_layout, dst = op->dst_layout;
  MergeDimensions(src, dst);
  const int64_t elem_bytes = op->elem_bytes;
  // `cut` is the innermost dimension that, with everything inside it
  // (`inner` bytes per index), exceeds a message: each piece is one index of
  // the dimensions outside `cut` and a run of its indices, the runs of
  // about equal length.
  int64_t inner = elem_bytes;
  int cut = src.rank - 1;
  while (cut > 0 && inner * src.shape[cut] <= piece_bytes) {
    inner *= src.shape[cut--];
  }
  const int64_t n = src.shape[cut];
  // `inner` is at most a piece (an element at the least): at least 1.
  const int64_t per_message = std::max<int64_t>(1, piece_bytes / inner);
  const int64_t runs = (n + per_message - 1) / per_message;
  const int64_t run = (n + runs - 1) / runs;
  int64_t outer = 1;
  for (int d = 0; d < cut; ++d) outer *= src.shape[d];
  for (int64_t o = 0; o < outer; ++o) {
    // The piece's position: index `o` of the outer dimensions, row-major.
    int64_t src_at = 0, dst_at = 0;
    int64_t index = o;
    for (int d = cut - 1; d >= 0; --d) {
      const int64_t i = index % src.shape[d];
      index /= src.shape[d];
      src_at += i * src.byte_strides[d];
      dst_at += i * dst.byte_strides[d];
    }
    for (int64_t j = 0; j < n; j += run) {
      const int64_t len = std::min(run, n - j);
      ViewLayout piece_src = src, piece_dst = dst;
      for (int d = 0; d < cut; ++d) piece_src.shape[d] = piece_dst.shape[d] = 1;
      piece_src.shape[cut] = piece_dst.shape[cut] = len;
      const std::byte* from = op->src + src_at + j * src.byte_strides[cut];
      WireHeader h = header;
      h.dst_offset = header.dst_offset + dst_at + j * dst.byte_strides[cut];
      h.value = len * inner;
      const CopyPlan pack(piece_src, Packed(piece_src, elem_bytes), elem_bytes);
      const bool last = o + 1 == outer && j + len == n;
      Send(dest_rank, h, IsPacked(piece_dst, elem_bytes) ? nullptr : &piece_dst,
           {h.value, [&](std::byte* at) { pack.CopyAll(from, at); }},
           last ? std::move(op) : nullptr);
    }
  }
}

void MpiTransport::Signal(int target_device, int64_t sem_offset, int64_t inc,
                          std::span<const uint32_t> check_clock) {
  WireHeader h = SignalHeader(target_device, sem_offset, inc);
  Send(host_->RankOf(target_device), h, nullptr, {0, WriteNothing}, nullptr,
       check_clock);
}

void MpiTransport::BroadcastAbort(const std::string& reason) {
  WireHeader h{};
  h.kind = WireKind::kAbort;
  const auto write_reason = [&](std::byte* at) {
    std::memcpy(at, reason.data(), reason.size());
  };
  const InlinePayload payload{static_cast<int64_t>(reason.size()),
                              write_reason};
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) Send(r, h, nullptr, payload, nullptr);
  }
}

void MpiTransport::SendCallNote(
    int rank, int src_device, std::span<const int64_t, kCallNoteWords> words) {
  WireHeader h{};
  h.kind = WireKind::kCallNote;
  h.src_device = src_device;
  const auto write_words = [&](std::byte* at) {
    std::memcpy(at, words.data(), kCallNoteWireBytes);
  };
  Send(rank, h, nullptr, InlinePayload{kCallNoteWireBytes, write_words},
       nullptr);
}

absl::Status MpiTransport::Quiesce(absl::Duration timeout) {
  if (MpiPeersLost()) {
    return absl::UnavailableError(absl::StrCat("recovery on rank ", rank_,
                                               ": the launch lost a process (",
                                               MpiPeersLostReason(), ")"));
  }
  // Step 1: a marker behind everything this process sent to each peer.
  int64_t epoch;
  {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    epoch = ++flush_epoch_;
  }
  WireHeader h{};
  h.kind = WireKind::kFlush;
  h.value = epoch;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) Send(r, h, nullptr, {0, WriteNothing}, nullptr);
  }
  // Step 2: progress until every peer's marker is here and nothing is left.
  const base_internal::Deadline deadline =
      base_internal::Deadline::After(timeout);
  for (;;) {
    bool did;
    {
      std::lock_guard<std::recursive_mutex> lock(mu_);
      did = ProgressLocked();
      if (FlushedLocked(epoch)) return absl::OkStatus();
    }
    if (deadline.Expired()) break;
    if (!did) absl::SleepFor(absl::Microseconds(20));
  }
  const std::string reason = absl::StrCat(
      "recovery on rank ", rank_, ": rank(s) ", Unflushed(epoch),
      " did not flush their traffic within ", absl::FormatDuration(timeout),
      " (dead, stuck, or in another call)");
  MarkMpiPeersLost(reason);
  return absl::DeadlineExceededError(reason);
}

bool MpiTransport::FlushedLocked(int64_t epoch) const {
  if (!sends_.empty() || !recvs_.empty()) return false;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_ && flushed_from_[r] < epoch) return false;
  }
  return true;
}

std::string MpiTransport::Unflushed(int64_t epoch) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  std::vector<int> missing;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_ && flushed_from_[r] < epoch) missing.push_back(r);
  }
  if (missing.empty()) return "? (own traffic still outstanding)";
  return absl::StrJoin(missing, ", ");
}

bool MpiTransport::Poll() {
  progress_.DevicePolled();  // Before the lock is tried.
  std::unique_lock<std::recursive_mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) {  // Someone else is progressing.
    if (ProgressPolicy::YieldOnBusyPoll(yields_when_idle_)) sched_yield();
    return false;
  }
  return ProgressLocked();
}

absl::Status MpiTransport::Shutdown() {
  if (!thread_.joinable()) return error_;
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    shutdown_requested_ = true;
  }
  wake_cv_.notify_one();
  thread_.join();
  return error_;
}

bool MpiTransport::ProgressLocked() {
  if (MpiPeersLost()) {
    AbandonLocked();
    return false;
  }
  bool did = PollIncoming();
  did |= TestPending();
  return did;
}

void MpiTransport::AbandonLocked() {
  if (abandoned_) return;
  abandoned_ = true;
  // Puts in flight will not complete: their issuers stop counting them, so
  // that no closing scope waits for them. Their requests stay with MPI,
  // which meshdma progresses no more, and so do their buffers.
  for (auto& send : sends_) {
    if (send->awaited) pending_.fetch_sub(1, std::memory_order_relaxed);
    send->awaited = false;
    if (send->op != nullptr) host_->AbandonDma(std::move(send->op));
  }
  // Payloads announced but not received never arrive; their semaphores do
  // not move.
  pending_.fetch_sub(static_cast<int>(recvs_.size()),
                     std::memory_order_relaxed);
}

void MpiTransport::HandleMessage(std::span<const std::byte> message,
                                 int source) {
  // Step 1: the header, and the parts after it checked against what
  // arrived.
  if (message.size() < sizeof(WireHeader)) {
    host_->Abort(absl::StrCat("rank ", rank_, " received from rank ", source,
                              " a message of ", message.size(),
                              " bytes, shorter than a header"),
                 /*notify_peers=*/true);
    return;
  }
  WireHeader h;
  std::memcpy(&h, message.data(), sizeof(WireHeader));
  // The parts after the header, each checked against what arrived.
  const int64_t extras = WireExtrasBytes(h);
  const int64_t tail =
      static_cast<int64_t>(message.size() - sizeof(WireHeader));
  if (extras < 0 || extras + h.inline_bytes != tail) {
    host_->Abort(absl::StrCat("rank ", rank_, " received from rank ", source,
                              " a malformed message (", message.size(),
                              " bytes, ", h.check_words, " clock words, ",
                              h.inline_bytes, " payload bytes)"),
                 /*notify_peers=*/true);
    return;
  }
  const int64_t layout_bytes = h.has_layout == 1 ? sizeof(ViewLayout) : 0;
  const std::byte* after_header = message.data() + sizeof(WireHeader);
  const std::span<const uint32_t> clock(
      reinterpret_cast<const uint32_t*>(after_header + layout_bytes),
      static_cast<size_t>(h.check_words));
  const std::byte* payload = after_header + extras;
  // Step 2: control messages.
  if (h.kind == WireKind::kAbort) {
    host_->Abort(
        std::string(reinterpret_cast<const char*>(payload), h.inline_bytes),
        /*notify_peers=*/false);
    return;
  }
  if (h.kind == WireKind::kCallNote) {
    if (h.inline_bytes == kCallNoteWireBytes) {
      std::array<int64_t, kCallNoteWords> words;
      std::memcpy(words.data(), payload, kCallNoteWireBytes);
      host_->OnCallNote(h.src_device, words);
    }
    return;
  }
  if (h.kind == WireKind::kFlush) {
    if (source >= 0 && source < size_) {
      flushed_from_[source] = std::max(flushed_from_[source], h.value);
    }
    return;
  }
  // Step 3: where the message lands; a signal moves its semaphore.
  ViewLayout sent_layout;
  if (h.has_layout == 1) {
    std::memcpy(&sent_layout, after_header, sizeof(ViewLayout));
  }
  absl::StatusOr<WireTarget> target =
      ResolveWireTarget(*host_, rank_, source, h, &sent_layout);
  if (!target.ok()) {
    host_->Abort(std::string(target.status().message()),
                 /*notify_peers=*/true);
    return;
  }
  if (h.kind == WireKind::kSignal) {
    if (!clock.empty()) {
      host_->OnCheckClock(h.dst_device, -1, h.dst_offset, clock, 0, 0, nullptr,
                          0);
    }
    CellAdd(target->cell, h.value);
    return;
  }
  // Step 4: a put whose payload came inside the message.
  const ViewLayout& dst_layout = target->dst_layout;
  if (h.inline_bytes > 0 || h.value == 0) {
    if (h.has_layout == 0) {  // `value` contiguous bytes.
      if (h.value > 0) std::memcpy(target->dst, payload, h.value);
    } else {
      CopyPlan(Packed(dst_layout, h.elem_bytes), dst_layout, h.elem_bytes)
          .CopyAll(payload, target->dst);
    }
    if (!clock.empty()) {
      host_->OnCheckClock(h.dst_device, h.src_device, h.sem_offset, clock,
                          h.check_seq, h.dst_offset, &dst_layout, h.elem_bytes);
    }
    CellAdd(target->cell, h.value);  // The data is in place.
    return;
  }
  // Step 5: a payload that follows in messages of its own.
  ReceivePayload(h, *target, clock, source);
}

void MpiTransport::ReceivePayload(const WireHeader& h, const WireTarget& target,
                                  std::span<const uint32_t> clock, int source) {
  const ViewLayout& dst_layout = target.dst_layout;
  auto recv = std::make_unique<PendingRecv>();
  recv->dst = target.dst;
  recv->dst_layout = dst_layout;
  recv->elem_bytes = h.elem_bytes;
  recv->bytes = h.value;
  recv->recv_cell = target.cell;
  recv->header = h;
  recv->check_clock.assign(clock.begin(), clock.end());
  MPI_Datatype strided =
      IsPacked(dst_layout, h.elem_bytes)
          ? MPI_DATATYPE_NULL
          : StridedDatatype(dst_layout, h.elem_bytes, h.value);
  if (strided != MPI_DATATYPE_NULL) {
    // Straight into the view: MPI scatters the bytes, no staging.
    MPI_Request req;
    MPI_Irecv(recv->dst, 1, strided, source, kPayloadTag, comm_, &req);
    recv->requests.push_back(req);
    MPI_Type_free(&strided);
  } else {
    std::byte* landing = recv->dst;
    if (!IsPacked(dst_layout, h.elem_bytes)) {
      recv->staging.Resize(h.value);
      landing = recv->staging.data();
    }
    for (int64_t off = 0; off < h.value; off += kMaxPiece) {
      const int64_t len = std::min(kMaxPiece, h.value - off);
      MPI_Request req;
      MPI_Irecv(landing + off, static_cast<int>(len), MPI_BYTE, source,
                kPayloadTag, comm_, &req);
      recv->requests.push_back(req);
    }
  }
  recvs_.push_back(std::move(recv));
  pending_.fetch_add(1, std::memory_order_relaxed);
}

bool MpiTransport::PollIncoming() {
  // Handling a message may abort, which sends, which progresses: the receive
  // being handled is not re-posted yet, so do not poll again from inside.
  if (handling_) return false;
  // One message per call: testing the next receive after handling one would
  // progress MPI again, which over TCP is a poll() system call that the
  // waiter whose message this was no longer needs (about 1 us a call).
  // Messages that arrived together are complete already, and the next call
  // handles them without progressing.
  PostedReceive& head = posted_[next_posted_];
  int done = 0;
  MPI_Status status;
  MPI_Test(&head.request, &done, &status);
  if (!done) return false;
  handling_ = true;
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  HandleMessage(std::span<const std::byte>(head.buffer.data(),
                                           static_cast<size_t>(count)),
                status.MPI_SOURCE);
  MPI_Start(&head.request);
  next_posted_ = (next_posted_ + 1) % kPostedReceives;
  handling_ = false;
  return true;
}

bool MpiTransport::TestPending() {
  bool any = false;
  // Each test of an incomplete request may yield the core (Open MPI's
  // yield_when_idle): after one unfinished send that nobody awaits, the
  // others of its kind wait for the next round.
  bool retire = true;
  for (auto it = sends_.begin(); it != sends_.end();) {
    PendingSend& send = **it;
    if (!send.awaited && !retire) {
      ++it;
      continue;
    }
    int done = 0;
    MPI_Testall(static_cast<int>(send.requests.size()), send.requests.data(),
                &done, MPI_STATUSES_IGNORE);
    if (!done) {
      retire &= send.awaited;
      ++it;
      continue;
    }
    if (send.op != nullptr) {
      // The source has been read: the sender's send semaphore may move.
      host_->CompleteDma(std::move(send.op));
    }
    if (send.awaited) pending_.fetch_sub(1, std::memory_order_relaxed);
    it = sends_.erase(it);
    any = true;
  }
  for (auto it = recvs_.begin(); it != recvs_.end();) {
    int done = 0;
    MPI_Testall(static_cast<int>((*it)->requests.size()),
                (*it)->requests.data(), &done, MPI_STATUSES_IGNORE);
    if (!done) {
      ++it;
      continue;
    }
    PendingRecv& r = **it;
    if (!r.staging.empty()) {
      CopyPlan(Packed(r.dst_layout, r.elem_bytes), r.dst_layout, r.elem_bytes)
          .CopyAll(r.staging.data(), r.dst);
    }
    // The data is in place: now the receiver may see the bytes counted.
    if (!r.check_clock.empty()) {
      host_->OnCheckClock(r.header.dst_device, r.header.src_device,
                          r.header.sem_offset, r.check_clock,
                          r.header.check_seq, r.header.dst_offset,
                          &r.dst_layout, r.header.elem_bytes);
    }
    CellAdd(r.recv_cell, r.bytes);
    it = recvs_.erase(it);
    pending_.fetch_sub(1, std::memory_order_relaxed);
    any = true;
  }
  return any;
}

struct MpiTransport::ShutdownProgress {
  std::unique_ptr<MpiBarrier> barrier;
  absl::Duration timeout;
  std::optional<base_internal::Deadline> deadline;
};

bool MpiTransport::ShutdownStepLocked(ShutdownProgress& closing) {
  if (!closing.deadline.has_value()) {
    closing.timeout = host_->shutdown_timeout();
    closing.deadline = base_internal::Deadline::After(closing.timeout);
  }
  if (MpiPeersLost()) {
    // No barrier can complete: the loss was reported where it was
    // found, and the process exits without finalising MPI.
    return true;
  }
  if (sends_.empty()) {
    if (closing.barrier == nullptr) {
      closing.barrier =
          std::make_unique<MpiBarrier>(comm_, kShutdownBarrierTag, 0);
    }
    absl::StatusOr<bool> done = closing.barrier->Test();
    if (!done.ok()) {
      error_ = done.status();
      return true;
    }
    if (*done && recvs_.empty()) {
      for (PostedReceive& r : posted_) {
        MPI_Cancel(&r.request);
        MPI_Wait(&r.request, MPI_STATUS_IGNORE);
        MPI_Request_free(&r.request);
      }
      return true;
    }
  }
  if (closing.deadline->Expired()) {
    std::string missing;
    if (closing.barrier != nullptr) {
      missing = absl::StrCat("rank(s) ", closing.barrier->Missing(),
                             " never reached the shutdown barrier");
    } else {
      std::set<int> dests;
      for (const auto& send : sends_) dests.insert(send->dest);
      missing = absl::StrCat("rank(s) ", absl::StrJoin(dests, ", "),
                             " never received ", sends_.size(),
                             " message(s) sent to them");
    }
    error_ = absl::DeadlineExceededError(
        absl::StrCat("MPI transport shutdown on rank ", rank_, ": ", missing,
                     " within ", absl::FormatDuration(closing.timeout),
                     " (dead, stuck, or still in another call)"));
    MarkMpiPeersLost(std::string(error_.message()));
    return true;
  }
  return false;
}

void MpiTransport::ProgressMain() {
  // While devices poll (a device spinning in a wait calls `Poll`), stay out
  // of their way. Otherwise poll while traffic is outstanding or a device
  // sleeps in a wait, and back off from yielding to short sleeps when idle,
  // so an idle launch does not burn a core: when, is `progress_`'s.
  int idle = 0;
  ShutdownProgress closing;
  auto sleep_us = [this](int64_t us) {
    std::unique_lock<std::mutex> wake(wake_mu_);
    wake_cv_.wait_for(wake, std::chrono::microseconds(us), [this] {
      return shutdown_requested_ || wake_requested_;
    });
    wake_requested_ = false;
  };
  for (;;) {
    // Step 1: whether the transport is shutting down.
    bool shutdown;
    {
      std::lock_guard<std::mutex> lock(wake_mu_);
      shutdown = shutdown_requested_;
    }
    const bool devices_polling = progress_.DevicesPolling();
    bool did = false;
    {
      // Step 2: one round of progress under the lock (and one step of the
      // shutdown). While a device polls, it progresses everything; taking
      // the lock here would only make that device's next start() or poll
      // wait for this thread, which on an oversubscribed machine may lose
      // its core while holding the lock.
      std::unique_lock<std::recursive_mutex> lock(mu_, std::defer_lock);
      if (shutdown) {
        lock.lock();
      } else if (devices_polling || !lock.try_lock()) {
        sleep_us(ProgressPolicy::WaitUs(/*devices_polling=*/true, HasPending(),
                                        /*watching=*/false));
        continue;
      }
      did = ProgressLocked();
      if (shutdown && ShutdownStepLocked(closing)) return;
    }
    if (did) {
      idle = 0;
      continue;
    }
    // Step 3: nothing moved: poll again, yield or sleep.
    ++idle;
    const ProgressPolicy::Next next =
        progress_.AfterIdleRound(idle, HasPending(), shutdown, devices_polling);
    if (next.action == ProgressPolicy::Next::kYieldThenPoll) sched_yield();
    if (next.action != ProgressPolicy::Next::kSleep) continue;
    sleep_us(next.sleep_us);
  }
}

int64_t MpiPieceBytesWithin(int64_t message_bytes) {
  // MPI's own match header and what its shared-memory fragments carry:
  // 64 bytes covers Open MPI's ob1 and vader.
  constexpr int64_t kMpiHeaderBytes = 64;
  return std::clamp<int64_t>(
      message_bytes - kWireHeaderBytes - sizeof(ViewLayout) - kMpiHeaderBytes,
      1 << 10, MpiTransport::kInlineBytes);
}

std::unique_ptr<PolledTransport> MakeMpiTransport(
    TransportHost* host, ProcessGroup& processes,
    std::vector<MpiPeerLimits> limits) {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(static_cast<MpiProcessGroup&>(processes).comm(), &comm);
  // The duplicate inherits the process group's MPI_ERRORS_RETURN, but the
  // transport's calls carry only meshdma's own arguments and leave their codes
  // unchecked: a failure there (a lost network) stays fatal, as MPI's default.
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_ARE_FATAL);
  return std::make_unique<MpiTransport>(host, comm, std::move(limits));
}

}  // namespace meshdma::dma_internal
