// Peers whose heap this process can address: devices of this process ("local":
// the heap is ordinary memory) and devices of other processes on this host
// ("shm": their heaps are mapped shared memory, see shm_segment.h). Both move
// data the same way, in a single copy straight into the peer's heap, and
// signal with an atomic add on the semaphore cell in that heap; only where
// the memory comes from differs, so one class serves both.
#ifndef MESHDMA_DMA_TRANSPORT_DIRECT_DIRECT_TRANSPORT_H_
#define MESHDMA_DMA_TRANSPORT_DIRECT_DIRECT_TRANSPORT_H_

#include <string>

#include "absl/strings/string_view.h"
#include "meshdma/dma/transport/transport.h"

namespace meshdma::dma_internal {

class DirectTransport : public Transport {
 public:
  DirectTransport(std::string name, TransportHost* host)
      : name_(std::move(name)), host_(host) {}

  absl::string_view name() const override { return name_; }
  // Always true: every destination of this path is addressable.
  bool MapDestination(DmaOp& op) override;
  // Copies the bytes on the calling thread, then completes the DMA.
  void Put(std::unique_ptr<DmaOp> op) override;
  void Signal(int target_device, int64_t sem_offset, int64_t inc,
              std::span<const uint32_t> check_clock) override;

 private:
  const std::string name_;
  TransportHost* const host_;
};

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_TRANSPORT_DIRECT_DIRECT_TRANSPORT_H_
