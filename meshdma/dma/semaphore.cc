#include "meshdma/dma/semaphore.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/internal/device.h"

namespace meshdma {

absl::string_view SemaphoreTypeName(SemaphoreType type) {
  switch (type) {
    case SemaphoreType::kRegular:
      return "REGULAR";
    case SemaphoreType::kDma:
      return "DMA";
    case SemaphoreType::kBarrier:
      return "BARRIER";
  }
  return "?";
}

std::string Semaphore::ToString() const {
  return absl::StrCat(SemaphoreTypeName(type_), " semaphore @", offset_);
}

absl::StatusOr<Semaphore> SemaphoreArray::at(int i) const {
  if (i < 0 || i >= size_) {
    return absl::OutOfRangeError(
        absl::StrCat("index ", i, " into an array of ", size_, " ",
                     SemaphoreTypeName(type_), " semaphores @", offset_));
  }
  return (*this)[i];
}

Semaphore SemaphoreArray::operator[](int i) const {
  return Semaphore(offset_ + i * kSemaphoreBytes, type_);
}

absl::Status semaphore_signal(Semaphore sem, int64_t inc) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("semaphore_signal"));
  return d->Signal(sem, inc, std::nullopt);
}

absl::Status semaphore_signal(Semaphore sem, int64_t inc,
                              const DeviceId& device_id, DeviceIdType id_type) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("semaphore_signal"));
  MESHDMA_ASSIGN_OR_RETURN(
      int target, d->ResolveTarget(device_id, id_type, "semaphore_signal"));
  return d->Signal(sem, inc, target);
}

absl::Status semaphore_wait(Semaphore sem, int64_t value) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("semaphore_wait"));
  return d->Wait(sem, value, WaitKind::kSemaphore);
}

absl::StatusOr<int64_t> semaphore_read(Semaphore sem) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("semaphore_read"));
  return d->Read(sem);
}

}  // namespace meshdma
