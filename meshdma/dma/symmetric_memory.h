// Symmetric allocation (docs/semantics.md §1). Every device of a mesh runs the same
// sequence of allocations, so the k-th allocation has the same heap offset on
// every device and a handle names the peer's copy too. Allocations belong to
// the innermost open scope: a kernel (`RunKernel`, `pallas_call`), a
// `run_scoped` region, or the `Runtime::Run` call; they are freed when it
// closes. Exhaustion is ResourceExhausted naming the request, the device and
// the bytes left.
#ifndef MESHDMA_DMA_SYMMETRIC_MEMORY_H_
#define MESHDMA_DMA_SYMMETRIC_MEMORY_H_

#include <cstdint>
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

// Semaphores start at 0. `name` appears in diagnostics.
absl::StatusOr<Semaphore> AllocateSemaphore(SemaphoreType type,
                                            absl::string_view name = "");
absl::StatusOr<SemaphoreArray> AllocateSemaphoreArray(
    SemaphoreType type, int size, absl::string_view name = "");

// Runs `body` with its own allocation scope (Pallas `run_scoped`): what it
// allocates is freed when it returns. Semaphores allocated in it must be back
// to 0 by then (an error otherwise, as at kernel exit).
absl::Status run_scoped(absl::FunctionRef<absl::Status()> body);

// Bytes still free in this device's heap.
absl::StatusOr<int64_t> SymmetricBytesFree();

}  // namespace meshdma

#endif  // MESHDMA_DMA_SYMMETRIC_MEMORY_H_
