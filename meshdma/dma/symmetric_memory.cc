#include "meshdma/dma/symmetric_memory.h"

#include "absl/strings/str_cat.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/internal/device.h"

namespace meshdma {

absl::StatusOr<ArrayRef> AllocateSymmetric(DType dtype,
                                           std::span<const int64_t> shape) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("AllocateSymmetric"));
  return d->Allocate(dtype, shape);
}

absl::Status PadSymmetricHeapTo(int64_t offset) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("PadSymmetricHeapTo"));
  return d->PadHeapTo(offset);
}

absl::StatusOr<Semaphore> AllocateSemaphore(SemaphoreType type,
                                            absl::string_view name) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("AllocateSemaphore"));
  MESHDMA_ASSIGN_OR_RETURN(int64_t offset,
                           d->AllocateSemaphores(type, 1, name));
  return Semaphore(offset, type);
}

absl::StatusOr<SemaphoreArray> AllocateSemaphoreArray(SemaphoreType type,
                                                      int size,
                                                      absl::string_view name) {
  MESHDMA_ASSIGN_OR_RETURN(
      dma_internal::Device * d,
      dma_internal::RequireDevice("AllocateSemaphoreArray"));
  MESHDMA_ASSIGN_OR_RETURN(int64_t offset,
                           d->AllocateSemaphores(type, size, name));
  return SemaphoreArray(offset, type, size);
}

absl::Status run_scoped(absl::FunctionRef<absl::Status()> body) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("run_scoped"));
  d->PushScope("run_scoped", d->collective_id());
  absl::Status s = body();
  absl::Status exit = d->PopScope();
  return s.ok() ? exit : s;
}

absl::StatusOr<ArrayRef> AllocatePersistent(DType dtype,
                                            std::span<const int64_t> shape,
                                            absl::string_view name) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("AllocatePersistent"));
  return d->AllocatePersistent(dtype, shape, name);
}

absl::StatusOr<SemaphoreArray> AllocatePersistentSemaphores(
    SemaphoreType type, int size, absl::string_view name) {
  MESHDMA_ASSIGN_OR_RETURN(
      dma_internal::Device * d,
      dma_internal::RequireDevice("AllocatePersistentSemaphores"));
  MESHDMA_ASSIGN_OR_RETURN(int64_t offset,
                           d->AllocatePersistentSemaphores(type, size, name));
  return SemaphoreArray(offset, type, size);
}

absl::Status AtRunExit(std::function<absl::Status()> fn) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("AtRunExit"));
  if (!fn) {
    return absl::InvalidArgumentError(
        absl::StrCat("AtRunExit on ", d->Name(), ": empty function"));
  }
  d->AtRunExit(std::move(fn));
  return absl::OkStatus();
}

absl::Status AtRunEnd(std::function<void()> fn) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("AtRunEnd"));
  if (!fn) {
    return absl::InvalidArgumentError(
        absl::StrCat("AtRunEnd on ", d->Name(), ": empty function"));
  }
  d->AtRunEnd(std::move(fn));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> SymmetricBytesFree() {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("SymmetricBytesFree"));
  return d->bytes_free();
}

}  // namespace meshdma
