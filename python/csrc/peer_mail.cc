#include "python/csrc/peer_mail.h"

#include <sched.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma::torch_backend {
namespace {

constexpr int64_t kHeaderSlotBytes = 64;
constexpr int64_t kHeaderShape[] = {4 * sizeof(int64_t)};
// Payload per chunk: 1 MiB, less on large launches (every device holds a
// slot for every other).
int64_t ChunkBytesFor(int world) {
  return std::clamp<int64_t>((int64_t{64} << 20) / std::max(world, 1), 64 << 10,
                             1 << 20);
}

// A view of `bytes` bytes of row `row` of a symmetric [rows, row_bytes] u8
// array.
absl::StatusOr<ArrayRef> Row(const ArrayRef& rows, int row, int64_t bytes) {
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef r, rows.At(row));
  return r.Slice(0, 0, bytes);
}

// Waits for `bytes` on DMA semaphore `sem` of this device.
absl::Status WaitBytes(const ArrayRef& view, Semaphore sem) {
  return make_async_copy(view, view, sem).wait_recv();
}

}  // namespace

absl::StatusOr<std::unique_ptr<PeerMail>> PeerMail::Create(int world) {
  std::unique_ptr<PeerMail> mail(new PeerMail());
  mail->world_ = world;
  MESHDMA_ASSIGN_OR_RETURN(mail->me_, axis_index("x"));
  mail->chunk_bytes_ = ChunkBytesFor(world);
  const int64_t header_shape[] = {world, kHeaderSlotBytes};
  const int64_t slot_shape[] = {world, mail->chunk_bytes_};
  MESHDMA_ASSIGN_OR_RETURN(
      mail->headers_,
      AllocatePersistent(DType::kU8, header_shape, "peer mail headers"));
  MESHDMA_ASSIGN_OR_RETURN(
      mail->slots_, AllocatePersistent(DType::kU8, slot_shape, "peer mail"));
  MESHDMA_ASSIGN_OR_RETURN(mail->header_sems_,
                           AllocatePersistentSemaphores(
                               SemaphoreType::kDma, world, "peer mail header"));
  MESHDMA_ASSIGN_OR_RETURN(mail->payload_sems_, AllocatePersistentSemaphores(
                                                    SemaphoreType::kDma, world,
                                                    "peer mail payload"));
  MESHDMA_ASSIGN_OR_RETURN(
      mail->credits_, AllocatePersistentSemaphores(SemaphoreType::kRegular,
                                                   world, "peer mail credit"));
  MESHDMA_ASSIGN_OR_RETURN(
      mail->send_sems_, AllocatePersistentSemaphores(SemaphoreType::kDma, world,
                                                     "peer mail send"));
  mail->outgoing_.resize(world);
  // Every slot starts free: one credit to each sender.
  for (int s = 0; s < world; ++s) {
    if (s == mail->me_) continue;
    MESHDMA_RETURN_IF_ERROR(
        semaphore_signal(mail->credits_[mail->me_], 1, DeviceId(s)));
  }
  // At the Run's end every slot is free again: take the credits back.
  PeerMail* self = mail.get();
  MESHDMA_RETURN_IF_ERROR(AtRunExit([self]() -> absl::Status {
    MESHDMA_RETURN_IF_ERROR(self->Flush());
    for (int d = 0; d < self->world_; ++d) {
      if (d == self->me_) continue;
      MESHDMA_RETURN_IF_ERROR(semaphore_wait(self->credits_[d], 1));
    }
    return absl::OkStatus();
  }));
  return mail;
}

absl::Status PeerMail::Send(int dst, int64_t tag, const void* data,
                            int64_t bytes) {
  if (dst < 0 || dst >= world_ || dst == me_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "send from rank ", me_, " to rank ", dst,
        ": the destination must be another rank of the ", world_, " ranks"));
  }
  Outgoing out;
  out.dst = dst;
  out.header = {tag, bytes, 0, me_};
  out.data.resize(static_cast<size_t>(bytes));
  if (bytes > 0) std::memcpy(out.data.data(), data, bytes);
  outgoing_[dst].push_back(std::move(out));
  return Progress().status();
}

absl::StatusOr<bool> PeerMail::SendChunk(Outgoing& out) {
  // Step 1: a free slot at the receiver.
  const Semaphore credit = credits_[out.dst];
  MESHDMA_ASSIGN_OR_RETURN(int64_t credits, semaphore_read(credit));
  if (credits < 1) return false;
  MESHDMA_RETURN_IF_ERROR(semaphore_wait(credit, 1));
  // Step 2: header and chunk into it; both sources are read before return.
  const int64_t n =
      std::min<int64_t>(chunk_bytes_, out.header.bytes - out.sent);
  out.header.chunk = out.sent / chunk_bytes_;
  MESHDMA_ASSIGN_OR_RETURN(
      ArrayRef header_src,
      ArrayRef::FromPointer(&out.header, DType::kU8, kHeaderShape));
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef header_dst,
                           Row(headers_, me_, sizeof(Header)));
  auto header =
      make_async_remote_copy(header_src, header_dst, send_sems_[out.dst],
                             header_sems_[me_], DeviceId(out.dst));
  MESHDMA_RETURN_IF_ERROR(header.start_eager());
  if (n > 0) {
    MESHDMA_ASSIGN_OR_RETURN(
        ArrayRef payload_src,
        ArrayRef::FromPointer(out.data.data() + out.sent, DType::kU8,
                              std::span<const int64_t>(&n, 1)));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef payload_dst, Row(slots_, me_, n));
    auto payload =
        make_async_remote_copy(payload_src, payload_dst, send_sems_[out.dst],
                               payload_sems_[me_], DeviceId(out.dst));
    MESHDMA_RETURN_IF_ERROR(payload.start());
    MESHDMA_RETURN_IF_ERROR(payload.wait_send());
  }
  MESHDMA_RETURN_IF_ERROR(header.wait_send());
  out.sent += n;
  return true;
}

absl::StatusOr<bool> PeerMail::Progress() {
  bool pending = false;
  for (auto& queue : outgoing_) {
    while (!queue.empty()) {
      Outgoing& out = queue.front();
      MESHDMA_ASSIGN_OR_RETURN(bool moved, SendChunk(out));
      if (!moved) break;
      // A message of 0 bytes is one chunk: its header.
      if (out.sent >= out.header.bytes) queue.pop_front();
    }
    pending |= !queue.empty();
  }
  return pending;
}

absl::Status PeerMail::Flush() {
  for (;;) {
    MESHDMA_ASSIGN_OR_RETURN(bool pending, Progress());
    if (!pending) return absl::OkStatus();
    MESHDMA_ASSIGN_OR_RETURN(bool failed, run_failed());
    if (failed) return absl::AbortedError("peer mail: the Run failed");
    sched_yield();
  }
}

absl::Status PeerMail::PollUntil(Semaphore sem, int64_t value, const char* what,
                                 int peer) {
  // While sends of this device are queued, poll and move them; once none
  // are, the caller's wait blocks (with the runtime's timeout and aborts).
  for (;;) {
    MESHDMA_ASSIGN_OR_RETURN(bool pending, Progress());
    if (!pending) return absl::OkStatus();
    MESHDMA_ASSIGN_OR_RETURN(int64_t have, semaphore_read(sem));
    if (have >= value) return absl::OkStatus();
    MESHDMA_ASSIGN_OR_RETURN(bool failed, run_failed());
    if (failed) {
      return absl::AbortedError(absl::StrCat("rank ", me_, ": ", what,
                                             " from rank ", peer,
                                             ": the Run failed elsewhere"));
    }
    sched_yield();
  }
}

absl::Status PeerMail::Recv(int src, int64_t tag, void* data, int64_t bytes) {
  if (src < 0 || src >= world_ || src == me_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "recv on rank ", me_, " from rank ", src,
        ": the source must be another rank of the ", world_, " ranks"));
  }
  int64_t received = 0;
  int64_t chunk = 0;
  do {
    // Step 1: the chunk's header, checked against this receive.
    MESHDMA_RETURN_IF_ERROR(
        PollUntil(header_sems_[src], sizeof(Header), "a message", src));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef header_view,
                             Row(headers_, src, sizeof(Header)));
    MESHDMA_RETURN_IF_ERROR(WaitBytes(header_view, header_sems_[src]));
    Header h;
    std::memcpy(&h, header_view.data(), sizeof(h));
    if (h.tag != tag || h.bytes != bytes || h.chunk != chunk) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", me_, " receives ", bytes, " bytes with tag ", tag,
          " from rank ", src, ", but rank ", src, " sent ", h.bytes,
          " bytes with tag ", h.tag,
          h.chunk != chunk
              ? absl::StrCat(" (chunk ", h.chunk, ", expected ", chunk, ")")
              : "",
          ": sends and receives between a pair must match in order"));
    }
    // Step 2: the payload, copied out; the slot is free again.
    const int64_t n = std::min<int64_t>(chunk_bytes_, bytes - received);
    if (n > 0) {
      MESHDMA_RETURN_IF_ERROR(
          PollUntil(payload_sems_[src], n, "a message", src));
      MESHDMA_ASSIGN_OR_RETURN(ArrayRef payload, Row(slots_, src, n));
      MESHDMA_RETURN_IF_ERROR(WaitBytes(payload, payload_sems_[src]));
      std::memcpy(static_cast<std::byte*>(data) + received, payload.data(), n);
    }
    MESHDMA_RETURN_IF_ERROR(semaphore_signal(credits_[me_], 1, DeviceId(src)));
    received += n;
    ++chunk;
  } while (received < bytes);
  return absl::OkStatus();
}

}  // namespace meshdma::torch_backend
