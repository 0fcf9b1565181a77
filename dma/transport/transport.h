// The one interface behind which every path to a peer sits. The runtime picks
// a transport per peer device: `DirectTransport` for devices whose heap this
// process can address (same process: plain memory; same host: a shared-memory
// mapping), `MpiTransport` for devices on other hosts.
#ifndef MESHDMA_DMA_TRANSPORT_TRANSPORT_H_
#define MESHDMA_DMA_TRANSPORT_TRANSPORT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/strings/string_view.h"
#include "dma/internal/copy_plan.h"
#include "dma/internal/semaphore_cell.h"
#include "dma/observer.h"

namespace meshdma::internal {

class Device;

// One started DMA, owned by the transport until it completes.
struct DmaOp {
  DmaEvent event;
  Device* issuer = nullptr;        // The device that called start().
  int scope_depth = 0;             // The issuer's scope depth at start().
  const std::byte* src = nullptr;  // Local address of src element 0.
  ViewLayout src_layout;
  ViewLayout dst_layout;
  int64_t elem_bytes = 1;
  int64_t dst_heap_offset = 0;         // Of dst element 0 on the target.
  SemaphoreCell* send_cell = nullptr;  // Sender's send semaphore, or null.

  // Direct paths: resolved destination and chunk bookkeeping for the copy
  // engine.
  std::byte* dst = nullptr;
  SemaphoreCell* recv_cell = nullptr;
  int64_t num_chunks = 1;
  bool streaming = false;  // Copy with non-temporal stores.
  std::atomic<int64_t> next_chunk{0};
  std::atomic<int64_t> done_chunks{0};
};

class Transport {
 public:
  virtual ~Transport() = default;
  // "local", "shm" or "mpi": shown in diagnostics and benchmarks.
  virtual absl::string_view name() const = 0;
  // Moves `op`'s bytes to `op->event.dst_device`. When the source has been
  // read it calls `Device::CompleteSend(op)`; the target's receive semaphore
  // grows by the byte count only after the data is in place.
  virtual void Put(std::unique_ptr<DmaOp> op) = 0;
  // Adds `inc` to the semaphore at `sem_offset` on `target_device`.
  virtual void Signal(int target_device, int64_t sem_offset, int64_t inc) = 0;
};

}  // namespace meshdma::internal

#endif  // MESHDMA_DMA_TRANSPORT_TRANSPORT_H_
