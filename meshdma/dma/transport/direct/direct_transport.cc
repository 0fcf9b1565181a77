#include "meshdma/dma/transport/direct/direct_transport.h"

namespace meshdma::dma_internal {

bool DirectTransport::MapDestination(DmaOp& op) {
  std::byte* heap = host_->HeapBase(op.event.dst_device);
  // A local copy may target ordinary (non-symmetric) memory: the issuer has
  // already set `dst` to its address. Otherwise resolve the heap offset on the
  // target device.
  if (op.dst == nullptr) op.dst = heap + op.dst_heap_offset;
  op.recv_cell = reinterpret_cast<SemaphoreCell*>(heap + op.event.recv_sem);
  return true;
}

void DirectTransport::Put(std::unique_ptr<DmaOp> op) {
  MapDestination(*op);
  CopyPlan plan(op->src_layout, op->dst_layout, op->elem_bytes);
  plan.CopyAll(op->src, op->dst);
  host_->CompleteDma(std::move(op));
}

void DirectTransport::Signal(int target_device, int64_t sem_offset, int64_t inc,
                             std::span<const uint32_t> /*check_clock*/) {
  CellAdd(reinterpret_cast<SemaphoreCell*>(host_->HeapBase(target_device) +
                                           sem_offset),
          inc);
}

}  // namespace meshdma::dma_internal
