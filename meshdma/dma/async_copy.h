// Async copies (docs/semantics.md §3): `make_async_copy` between two buffers of
// this device, `make_async_remote_copy` from this device's `src` into `dst`
// on another device.
//
// Contract of a descriptor of `n` bytes (the size of its `src`):
// - `start()` issues the copy and returns; in the default asynchronous mode
//   before the bytes have moved (see `DmaMode` in dma/runtime.h).
// - When the source has been read, the sender's `send_sem` grows by n; when the
//   destination has been written, the receiver's `recv_sem` grows by n (for a
//   local copy, the one `sem`). An increment is never visible before the
//   bytes it covers.
// - `wait_send()` (remote copies only) blocks until the local `send_sem` >= n
//   and subtracts n: the source may be reused. `wait_recv()` blocks until the
//   local `recv_sem` (or `sem`) >= n and subtracts n: n bytes have arrived
//   here. `wait()` is `wait_send()` then `wait_recv()` for a remote copy and
//   `wait_recv()` for a local one.
// - Counts accumulate, so one wait may consume several smaller copies, and a
//   descriptor that was never started may be used only to wait.
// - `start_eager()` is `start()` as in the eager DMA mode, whatever the
//   runtime's mode: a copy this process makes (to a device of this process
//   or of this host) is made before it returns, on the calling thread. For a
//   DMA whose issuer waits right after starting it, where a copy worker
//   would add only its wake-up (docs/semantics.md §7). Elsewhere (the MPI
//   path) it is `start()`.
// - `src` and `dst` must have the same dtype and shape; semaphores must be
//   DMA semaphores; `dst` of a remote copy must be in the symmetric heap.
//   Violations are errors from `start()` naming the operand.
// - A descriptor started again, on the same device, checks its operands
//   again only where something they depend on may have changed since (a
//   scope closed, a Run began or ended): a loop that starts the same
//   descriptor pays for the checks once.
#ifndef MESHDMA_DMA_ASYNC_COPY_H_
#define MESHDMA_DMA_ASYNC_COPY_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/dma/semaphore.h"
#include "meshdma/topology/mesh.h"

namespace meshdma {
namespace dma_internal {
class Device;
}  // namespace dma_internal

class AsyncCopyDescriptor {
 public:
  absl::Status start();
  absl::Status start_eager();
  absl::Status wait_send();
  absl::Status wait_recv();
  absl::Status wait();

  const ArrayRef& src() const { return src_; }
  const ArrayRef& dst() const { return dst_; }
  int64_t size_bytes() const { return src_.size_bytes(); }
  bool is_remote() const { return remote_; }

 private:
  friend AsyncCopyDescriptor make_async_copy(ArrayRef, ArrayRef, Semaphore);
  friend AsyncCopyDescriptor make_async_remote_copy(ArrayRef, ArrayRef,
                                                    Semaphore, Semaphore,
                                                    const DeviceId&,
                                                    DeviceIdType);
  absl::Status Start(bool eager, const char* caller);
  ArrayRef src_;
  ArrayRef dst_;
  Semaphore send_sem_;
  Semaphore recv_sem_;
  bool remote_ = false;
  std::optional<DeviceId> device_id_;
  DeviceIdType id_type_ = DeviceIdType::kMesh;
  // The device and its `dma_epoch()` at which a start last passed the
  // checks, and the peer it resolved (remote copies).
  const dma_internal::Device* checked_on_ = nullptr;
  uint64_t checked_epoch_ = 0;
  int checked_target_ = -1;
};

AsyncCopyDescriptor make_async_copy(ArrayRef src, ArrayRef dst, Semaphore sem);
AsyncCopyDescriptor make_async_remote_copy(
    ArrayRef src, ArrayRef dst, Semaphore send_sem, Semaphore recv_sem,
    const DeviceId& device_id, DeviceIdType id_type = DeviceIdType::kMesh);

}  // namespace meshdma

#endif  // MESHDMA_DMA_ASYNC_COPY_H_
