// Symmetric allocation (docs/semantics.md §1). Every device of a mesh runs the
// same sequence of allocations, so the k-th allocation has the same heap offset
// on every device and a handle names the peer's copy too. Allocations belong to
// the innermost open scope: a kernel (`RunKernel`, `pallas_call`), a
// `run_scoped` region, or the `Runtime::Run` call; they are freed when it
// closes. Exhaustion is ResourceExhausted naming the request, the device and
// the bytes left. Device barriers check that every device's allocations
// landed at the same offsets (an error naming the first that differs).
#ifndef MESHDMA_DMA_SYMMETRIC_MEMORY_H_
#define MESHDMA_DMA_SYMMETRIC_MEMORY_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshdma/base/dtype.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/dma/semaphore.h"

namespace meshdma {

// A zero-initialised, 64-byte aligned array in this device's symmetric heap.
absl::StatusOr<ArrayRef> AllocateSymmetric(DType dtype,
                                           std::span<const int64_t> shape);
inline absl::StatusOr<ArrayRef> AllocateSymmetric(
    DType dtype, std::initializer_list<int64_t> shape) {
  return AllocateSymmetric(
      dtype, std::span<const int64_t>(shape.begin(), shape.size()));
}
template <typename T>
absl::StatusOr<ArrayRef> AllocateSymmetric(std::span<const int64_t> shape) {
  return AllocateSymmetric(kDTypeOf<T>, shape);
}
template <typename T>
absl::StatusOr<ArrayRef> AllocateSymmetric(
    std::initializer_list<int64_t> shape) {
  return AllocateSymmetric(kDTypeOf<T>, shape);
}

// Raises this device's heap top to `offset` when it is below it, so that the
// next allocation starts there: for collectives whose members' outputs
// differ in size by design (the blocks of an uneven all_to_all), with
// `offset` the end of the largest member's output, so that what every
// member allocates next lands at the same offset again. The gap belongs to
// the innermost scope and is not an allocation: the allocation check of
// docs/semantics.md §1 does not count it. ResourceExhausted when the heap
// cannot hold it.
absl::Status PadSymmetricHeapTo(int64_t offset);

// Semaphores start at 0. `name` appears in diagnostics.
absl::StatusOr<Semaphore> AllocateSemaphore(SemaphoreType type,
                                            absl::string_view name = "");
absl::StatusOr<SemaphoreArray> AllocateSemaphoreArray(
    SemaphoreType type, int size, absl::string_view name = "");

// Runs `body` with its own allocation scope (Pallas `run_scoped`): what it
// allocates is freed when it returns. Semaphores allocated in it must be back
// to 0 by then (an error otherwise, as at kernel exit).
absl::Status run_scoped(absl::FunctionRef<absl::Status()> body);

// Persistent symmetric memory: state that consecutive kernel calls share for
// the rest of the current `Runtime::Run` (a collective's channel, say).
// Every device of the mesh must make the same sequence of persistent
// allocations, like `AllocateSymmetric`; they come from the top of the heap,
// start zeroed, and belong to no kernel scope, so kernels' exit contracts do
// not count persistent semaphores. When the Run ends on a device, the
// functions given to `AtRunExit` run (latest first; they may wait, e.g. for
// credits still owed to this device), every persistent semaphore must then be
// back to 0 (an error naming it otherwise), and the memory is zeroed and
// released. When the Run failed on this device the `AtRunExit` functions are
// skipped (their waits could not complete); the `AtRunEnd` functions run
// whatever happened, after them, and must not wait: they forget host-side
// state that refers to the persistent memory, so that the next Run starts
// clean.
absl::StatusOr<ArrayRef> AllocatePersistent(DType dtype,
                                            std::span<const int64_t> shape,
                                            absl::string_view name = "");
absl::StatusOr<SemaphoreArray> AllocatePersistentSemaphores(
    SemaphoreType type, int size, absl::string_view name = "");
absl::Status AtRunExit(std::function<absl::Status()> fn);
absl::Status AtRunEnd(std::function<void()> fn);

// Bytes still free in this device's heap.
absl::StatusOr<int64_t> SymmetricBytesFree();

}  // namespace meshdma

#endif  // MESHDMA_DMA_SYMMETRIC_MEMORY_H_
