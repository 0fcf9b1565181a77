// Tensors that live in the device's symmetric heap: a region of persistent
// symmetric memory of the serving Run, handed out to `meshdma.torch.empty`
// / `zeros`. A collective whose tensor lies in it reads and writes it where
// it is instead of staging it through a copy (group_ops.h).
//
// Symmetry: like every symmetric allocation (docs/semantics.md §1), the k-th
// tensor must land at the same offset on every rank, so every rank must
// allocate and free the same sizes in the same order (first fit, 4 KiB
// aligned, deterministic). Where they do not, a collective on such tensors
// fails with meshdma's mismatch message (each call compares its members'
// heap offsets); it never moves bytes to a wrong place. A tensor must not
// outlive its process group: the heap is unmapped when the group ends.
#ifndef MESHDMA_PYTHON_CSRC_TENSOR_ARENA_H_
#define MESHDMA_PYTHON_CSRC_TENSOR_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "meshdma/base/dtype.h"
#include "meshdma/dma/array_ref.h"

namespace meshdma::torch_backend {

class TensorArena {
 public:
  // On the device, inside the Run: `bytes` of persistent symmetric memory.
  static absl::StatusOr<std::unique_ptr<TensorArena>> Create(int64_t bytes);

  // Any thread. ResourceExhausted naming the request and what is left.
  absl::StatusOr<std::byte*> Allocate(int64_t bytes);
  void Free(std::byte* p);

  // `bytes` at `p` as a symmetric array of `numel` elements of `dtype` when
  // they lie inside the arena, else NotFound.
  absl::StatusOr<ArrayRef> View(const void* p, int64_t bytes, DType dtype,
                                int64_t numel) const;
  int64_t size() const { return bytes_; }

 private:
  TensorArena(std::byte* base, int64_t heap_offset, int64_t bytes);
  std::byte* base_;
  int64_t heap_offset_;
  int64_t bytes_;
  std::mutex mu_;
  std::map<int64_t, int64_t> free_;  // offset -> bytes, coalesced.
  std::map<int64_t, int64_t> used_;  // offset -> bytes.
};

}  // namespace meshdma::torch_backend

#endif  // MESHDMA_PYTHON_CSRC_TENSOR_ARENA_H_
