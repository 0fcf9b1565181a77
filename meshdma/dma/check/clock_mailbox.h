// Checked mode between processes that share a host: a mailbox in shared
// memory through which a process hands the vector clocks of its signals and
// DMAs to the process whose device they target. It carries what the MPI
// path's messages carry (`TransportHost::OnCheckClock`), since on this path
// the bytes and the semaphore counts move by plain stores into the peer's
// heap and no message exists.
//
// One mailbox per process, after its device heaps in its shared-memory
// segment, and only in checked mode: normal mode maps no mailbox and posts
// nothing. It is a bounded multi-producer, single-consumer ring of fixed-size
// slots (a slot per message, sized for the launch's clock). Producers are any
// thread of any process on the host; the consumer is the owning process,
// one thread at a time.
//
// Ordering contract: a producer posts a message before the semaphore it
// concerns moves (release), so a wait that saw the count move and then
// drains (acquire) finds the message, even when an earlier slot is still
// being filled by another producer: `Drain` waits for every slot claimed
// before it began.
#ifndef MESHDMA_DMA_CHECK_CLOCK_MAILBOX_H_
#define MESHDMA_DMA_CHECK_CLOCK_MAILBOX_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "meshdma/dma/internal/copy_plan.h"

namespace meshdma::dma_internal {

// One signal (`issuer` -1, no layout) or one DMA's arrival.
struct ClockMessage {
  int32_t target = 0;  // Global device whose semaphore moves.
  int32_t issuer = -1;
  int64_t sem_offset = 0;
  uint32_t dma_seq = 0;
  bool has_layout = false;  // A DMA: its destination is written.
  int64_t dst_offset = 0;   // Heap offset of the destination's element 0.
  int64_t elem_bytes = 1;
  ViewLayout dst_layout;
  std::vector<uint32_t> clock;  // 2·n components.
};

class ClockMailbox {
 public:
  // Bytes a mailbox for a `num_devices`-device launch occupies (a multiple
  // of the page size).
  static size_t BytesFor(int num_devices);
  // A view of the mailbox at `region` (BytesFor(num_devices) bytes, shared).
  ClockMailbox(std::byte* region, int num_devices);

  // Lays out an empty mailbox; by its owner, before any peer maps it.
  void Format();
  // Appends `m`. Waits while the ring is full (the owner drains it); after
  // `patience` without room, drops `m` and returns Unavailable.
  absl::Status Post(const ClockMessage& m, int64_t patience_ns);
  // True when nothing has been posted that was not yet drained.
  bool Empty() const;
  // Hands every message posted before the call to `fn`, in order. One caller
  // at a time (the owner serialises). Unavailable when a producer stopped
  // half-way through a slot for `patience_ns` (it died).
  absl::Status Drain(const std::function<void(const ClockMessage&)>& fn,
                     int64_t patience_ns);

 private:
  struct Header;
  struct SlotHead;
  SlotHead* slot(uint64_t pos) const;

  std::byte* region_;
  int num_devices_;
  size_t slot_bytes_;
};

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_CHECK_CLOCK_MAILBOX_H_
