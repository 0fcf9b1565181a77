// Point-to-point messages between the devices of the serving Run: torch's
// send / recv, and the collectives of torch groups that are not the whole
// launch (their members cannot run a mesh-wide kernel without the others).
//
// Protocol, per ordered pair (sender s, receiver d), on persistent memory of
// the Run: d holds a slot for s (a 64-byte header and `chunk_bytes` of
// payload) and grants s one credit per free slot (a REGULAR semaphore on s).
// s waits for a credit, then DMAs the header (tag, message bytes, chunk
// index) and the chunk into d's slot; d waits for the header, checks it
// against its own receive (a mismatch is an error naming both ranks, tags
// and sizes), waits for the payload, copies it out and grants the next
// credit. One credit is granted up front, so a message of at most one chunk
// is sent without the receiver (buffered, like MPI's eager messages).
//
// Sends are buffered: `Send` copies the message and returns; the chunks
// leave as credits come, progressed by every wait of this class and by
// `Progress` (the serving device calls it while idle). A receive therefore
// never waits on a send of its own device, and pairwise exchanges cannot
// deadlock. Messages between a pair arrive in the order they were sent.
#ifndef MESHDMA_PYTHON_CSRC_PEER_MAIL_H_
#define MESHDMA_PYTHON_CSRC_PEER_MAIL_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/dma/semaphore.h"

namespace meshdma::torch_backend {

class PeerMail {
 public:
  // Collective over the Run's 1-D mesh "x" of `world` devices, on the device
  // thread; registers the Run-exit step that takes back the credits.
  static absl::StatusOr<std::unique_ptr<PeerMail>> Create(int world);

  // Queues `bytes` for device `dst` (its position on "x") under `tag`.
  absl::Status Send(int dst, int64_t tag, const void* data, int64_t bytes);
  // Receives the next message from `src` into `data`; it must carry `tag`
  // and `bytes`.
  absl::Status Recv(int src, int64_t tag, void* data, int64_t bytes);
  // Moves what credits allow; true while sends are still queued.
  absl::StatusOr<bool> Progress();
  // Waits until every queued send has left.
  absl::Status Flush();

  int64_t chunk_bytes() const { return chunk_bytes_; }

 private:
  struct Header {
    int64_t tag = 0;
    int64_t bytes = 0;
    int64_t chunk = 0;
    int64_t sender = 0;
  };
  struct Outgoing {
    int dst = 0;
    Header header;
    std::vector<std::byte> data;
    int64_t sent = 0;  // Payload bytes already in the receiver's slots.
  };
  PeerMail() = default;
  // Sends `out`'s next chunk if `out.dst` granted a credit; true if it did.
  absl::StatusOr<bool> SendChunk(Outgoing& out);
  // Waits (progressing sends) until `sem` holds at least `value`.
  absl::Status PollUntil(Semaphore sem, int64_t value, const char* what,
                         int peer);

  int world_ = 0;
  int me_ = 0;
  int64_t chunk_bytes_ = 0;
  ArrayRef headers_;  // [world, 64] bytes: the header slot of each sender.
  ArrayRef slots_;    // [world, chunk_bytes]: the payload slot of each sender.
  SemaphoreArray header_sems_;   // DMA, per sender.
  SemaphoreArray payload_sems_;  // DMA, per sender.
  SemaphoreArray credits_;       // REGULAR, per receiver.
  SemaphoreArray send_sems_;     // DMA, per receiver.
  // Per receiver, the sends not yet gone, oldest first.
  std::vector<std::deque<Outgoing>> outgoing_;
};

}  // namespace meshdma::torch_backend

#endif  // MESHDMA_PYTHON_CSRC_PEER_MAIL_H_
