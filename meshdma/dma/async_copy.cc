#include "meshdma/dma/async_copy.h"

#include "absl/strings/str_cat.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/internal/device.h"

namespace meshdma {

AsyncCopyDescriptor make_async_copy(ArrayRef src, ArrayRef dst, Semaphore sem) {
  AsyncCopyDescriptor d;
  d.src_ = std::move(src);
  d.dst_ = std::move(dst);
  d.recv_sem_ = sem;
  return d;
}

AsyncCopyDescriptor make_async_remote_copy(ArrayRef src, ArrayRef dst,
                                           Semaphore send_sem,
                                           Semaphore recv_sem,
                                           const DeviceId& device_id,
                                           DeviceIdType id_type) {
  AsyncCopyDescriptor d;
  d.src_ = std::move(src);
  d.dst_ = std::move(dst);
  d.send_sem_ = send_sem;
  d.recv_sem_ = recv_sem;
  d.remote_ = true;
  d.device_id_ = device_id;
  d.id_type_ = id_type;
  return d;
}

absl::Status AsyncCopyDescriptor::start() {
  return Start(/*eager=*/false, "AsyncCopyDescriptor::start");
}

absl::Status AsyncCopyDescriptor::start_eager() {
  return Start(/*eager=*/true, "AsyncCopyDescriptor::start_eager");
}

absl::Status AsyncCopyDescriptor::Start(bool eager, const char* caller) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice(caller));
  // Checked before on this device, and nothing the checks (and the peer's
  // resolution) depend on has changed since.
  const bool checked = checked_on_ == d && checked_epoch_ == d->dma_epoch();
  std::optional<int> target;
  if (remote_) {
    if (checked) {
      target = checked_target_;
    } else {
      MESHDMA_ASSIGN_OR_RETURN(
          target,
          d->ResolveTarget(*device_id_, id_type_, "make_async_remote_copy"));
    }
  }
  const uint64_t epoch = d->dma_epoch();
  MESHDMA_RETURN_IF_ERROR(d->StartDma(src_, dst_, send_sem_, recv_sem_, target,
                                      eager, /*validated=*/checked));
  // Semaphores among the reserved cells are valid only inside a device
  // barrier: those are checked every time.
  const bool reserved =
      recv_sem_.heap_offset() < dma_internal::kReservedHeapBytes ||
      (remote_ && send_sem_.heap_offset() < dma_internal::kReservedHeapBytes);
  if (!checked && !reserved) {
    checked_on_ = d;
    checked_epoch_ = epoch;
    checked_target_ = target.value_or(-1);
  }
  return absl::OkStatus();
}

absl::Status AsyncCopyDescriptor::wait_send() {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("wait_send"));
  if (!remote_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "wait_send on ", d->Name(),
        ": a local copy (make_async_copy) has no send semaphore; use "
        "wait_recv or wait"));
  }
  return d->Wait(send_sem_, size_bytes(), WaitKind::kDmaSend);
}

absl::Status AsyncCopyDescriptor::wait_recv() {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("wait_recv"));
  return d->Wait(recv_sem_, size_bytes(), WaitKind::kDmaRecv);
}

absl::Status AsyncCopyDescriptor::wait() {
  if (remote_) MESHDMA_RETURN_IF_ERROR(wait_send());
  return wait_recv();
}

}  // namespace meshdma
