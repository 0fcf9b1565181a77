#include "dma/transport/direct_transport.h"

#include "dma/internal/runtime_impl.h"

namespace meshdma::internal {

void DirectTransport::Put(std::unique_ptr<DmaOp> op) {
  std::byte* heap = runtime_->HeapBase(op->event.dst_device);
  // A local copy may target ordinary (non-symmetric) memory: the issuer has
  // already set `dst` to its address. Otherwise resolve the heap offset on the
  // target device.
  if (op->dst == nullptr) op->dst = heap + op->dst_heap_offset;
  op->recv_cell = reinterpret_cast<SemaphoreCell*>(heap + op->event.recv_sem);
  op->streaming = op->event.bytes >= runtime_->streaming_min_bytes();
  if (runtime_->dma_mode() == DmaMode::kEager ||
      op->event.bytes < runtime_->async_min_bytes()) {
    CopyPlan plan(op->src_layout, op->dst_layout, op->elem_bytes);
    plan.set_streaming(op->streaming);
    plan.CopyAll(op->src, op->dst);
    Device* issuer = op->issuer;
    issuer->CompleteDma(std::move(op));
    return;
  }
  runtime_->copy_engine()->Submit(std::move(op));
}

void DirectTransport::Signal(int target_device, int64_t sem_offset,
                             int64_t inc) {
  CellAdd(reinterpret_cast<SemaphoreCell*>(runtime_->HeapBase(target_device) +
                                           sem_offset),
          inc);
}

}  // namespace meshdma::internal
