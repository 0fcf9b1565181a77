// The observation seam. Every DMA, signal, wait, barrier and kernel boundary
// of the runtime passes through `dma_internal::Device`'s verbs, which report to
// the runtime's `Observer` (if any) before and after acting. A race checker
// (vector clocks) or a timeline tracer plugs in here without touching the
// transports. Callbacks run on the thread that performs the action (a device
// thread, a copy worker, or the MPI progress thread) and must be thread-safe
// and cheap; with no observer installed the cost is one predictable branch.
#ifndef MESHDMA_DMA_OBSERVER_H_
#define MESHDMA_DMA_OBSERVER_H_

#include <cstdint>
#include <string_view>

#include "absl/strings/string_view.h"
#include "meshdma/dma/semaphore.h"

namespace meshdma {

struct DmaEvent {
  uint64_t id = 0;     // Unique per issuing process.
  int src_device = 0;  // Global index of the issuing device.
  int dst_device = 0;  // Global index of the target device.
  int64_t bytes = 0;
  int64_t send_sem = -1;  // Heap offset of the sender's semaphore, or -1.
  int64_t recv_sem = 0;   // Heap offset of the receiver's semaphore.
};

enum class WaitKind { kSemaphore, kDmaSend, kDmaRecv, kBarrier };

class Observer {
 public:
  virtual ~Observer() = default;
  virtual void OnKernelBegin(int device, absl::string_view kernel) {}
  virtual void OnKernelEnd(int device, absl::string_view kernel) {}
  virtual void OnDmaStart(const DmaEvent& dma) {}
  // The source has been read and (direct paths) the destination written.
  // Called before the semaphores move, so before any wait on them returns.
  virtual void OnDmaComplete(const DmaEvent& dma) {}
  virtual void OnSignal(int device, int target_device, Semaphore sem,
                        int64_t inc) {}
  // `observed` is the semaphore's count when the wait began.
  virtual void OnWaitBegin(int device, WaitKind kind, Semaphore sem,
                           int64_t value, int64_t observed) {}
  virtual void OnWaitEnd(int device, WaitKind kind, Semaphore sem,
                         int64_t value, bool ok) {}
  // A user-named span of work on a device (`TraceSpan` in dma/trace.h).
  virtual void OnSpanBegin(int device, absl::string_view name) {}
  virtual void OnSpanEnd(int device, absl::string_view name) {}
};

}  // namespace meshdma

#endif  // MESHDMA_DMA_OBSERVER_H_
