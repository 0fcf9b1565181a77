// The DMA ring of the fused kernels (`FusedTransfer::kDma`, overlap.h): at
// step s every member forwards the block in hand into its right neighbour's
// receive slot (s + 1) % 2 while it works on slot s % 2. Two slots need one
// handshake: from step 2 on, the slot a forward lands in still holds the
// block of step s - 2 until the neighbour has consumed it.
#ifndef MESHDMA_COLLECTIVES_FUSED_RING_SLOTS_H_
#define MESHDMA_COLLECTIVES_FUSED_RING_SLOTS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/semaphore.h"
#include "meshdma/dma/symmetric_memory.h"
#include "meshdma/topology/mesh.h"

namespace meshdma::fused_internal {

// The semaphores of one kernel's DMA ring, allocated inside the kernel in
// the same order on every member.
struct RingSemaphores {
  Semaphore send;       // DMA: my forwards have left.
  SemaphoreArray recv;  // DMA, one per slot: a forward has landed in it.
  Semaphore free;       // REGULAR: my right neighbour consumed a slot.

  static absl::StatusOr<RingSemaphores> Allocate() {
    RingSemaphores s;
    MESHDMA_ASSIGN_OR_RETURN(s.send,
                             AllocateSemaphore(SemaphoreType::kDma, "send"));
    MESHDMA_ASSIGN_OR_RETURN(
        s.recv, AllocateSemaphoreArray(SemaphoreType::kDma, 2, "recv"));
    MESHDMA_ASSIGN_OR_RETURN(
        s.free, AllocateSemaphore(SemaphoreType::kRegular, "free"));
    return s;
  }

  // Before the forward of `step`: from step 2 on, waits until the right
  // neighbour has consumed the slot the forward lands in.
  absl::Status AwaitFree(int step) const {
    return step >= 2 ? semaphore_wait(free, 1) : absl::OkStatus();
  }

  // After `step` has consumed slot step % 2 (step 0 works on its own
  // block): tells the left neighbour, which refills that slot at its
  // step + 1 when that step forwards (step + 1 <= n - 2).
  absl::Status ReleaseSlot(const RingPosition& ring, int step) const {
    if (step < 1 || step + 1 > ring.size() - 2) return absl::OkStatus();
    return semaphore_signal(free, 1, ring.left(), DeviceIdType::kLogical);
  }
};

}  // namespace meshdma::fused_internal

#endif  // MESHDMA_COLLECTIVES_FUSED_RING_SLOTS_H_
