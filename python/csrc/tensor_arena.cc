#include "python/csrc/tensor_arena.h"

#include <iterator>

#include "absl/strings/str_cat.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma::torch_backend {
namespace {
constexpr int64_t kAlign = 4096;
}  // namespace

TensorArena::TensorArena(std::byte* base, int64_t heap_offset, int64_t bytes)
    : base_(base), heap_offset_(heap_offset), bytes_(bytes) {
  if (bytes > 0) free_[0] = bytes;
}

absl::StatusOr<std::unique_ptr<TensorArena>> TensorArena::Create(
    int64_t bytes) {
  bytes -= bytes % kAlign;
  if (bytes <= 0) {
    return std::unique_ptr<TensorArena>(new TensorArena(nullptr, 0, 0));
  }
  const int64_t shape[] = {bytes};
  MESHDMA_ASSIGN_OR_RETURN(
      ArrayRef region,
      AllocatePersistent(DType::kU8, shape, "torch heap tensors"));
  return std::unique_ptr<TensorArena>(
      new TensorArena(region.data(), region.heap_offset(), bytes));
}

absl::StatusOr<std::byte*> TensorArena::Allocate(int64_t bytes) {
  const int64_t want =
      std::max<int64_t>(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < want) continue;
    const int64_t offset = it->first;
    const int64_t rest = it->second - want;
    free_.erase(it);
    if (rest > 0) free_[offset + want] = rest;
    used_[offset] = want;
    return base_ + offset;
  }
  int64_t largest = 0;
  for (const auto& [offset, size] : free_) largest = std::max(largest, size);
  return absl::ResourceExhaustedError(absl::StrCat(
      "meshdma heap tensor of ", bytes, " bytes: the tensor region of ", bytes_,
      " bytes has at most ", largest,
      " contiguous bytes free (MESHDMA_HEAP_BYTES sets the heap; the tensor "
      "region is half of it)"));
}

void TensorArena::Free(std::byte* p) {
  std::lock_guard<std::mutex> lock(mu_);
  auto used = used_.find(p - base_);
  if (used == used_.end()) return;
  int64_t offset = used->first, size = used->second;
  used_.erase(used);
  // Coalesce with the free neighbours.
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && next->first == offset + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_[offset] = size;
}

absl::StatusOr<ArrayRef> TensorArena::View(const void* p, int64_t bytes,
                                           DType dtype, int64_t numel) const {
  const std::byte* b = static_cast<const std::byte*>(p);
  if (base_ == nullptr || b < base_ || b + bytes > base_ + bytes_ ||
      bytes <= 0) {
    return absl::NotFoundError("not in the heap");
  }
  const int64_t offset = b - base_;
  const int64_t shape[] = {numel};
  return ArrayRef::Symmetric(const_cast<std::byte*>(b), heap_offset_ + offset,
                             dtype, shape);
}

}  // namespace meshdma::torch_backend
