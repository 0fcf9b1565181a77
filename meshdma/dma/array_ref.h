// `ArrayRef`: an untyped view of a device's memory (dtype, shape, strides),
// the endpoint type of every DMA. A ref made from the symmetric heap also
// knows its heap offset, which names the same bytes on every device; only
// such refs may be the destination of a remote copy (docs/semantics.md §1).
#ifndef MESHDMA_DMA_ARRAY_REF_H_
#define MESHDMA_DMA_ARRAY_REF_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "meshdma/base/dtype.h"

namespace meshdma {

inline constexpr int kMaxRank = 6;

class ArrayRef {
 public:
  ArrayRef() = default;

  // A view of ordinary memory (not reachable by peers). Strides are in
  // elements (negative allowed); empty `strides` means row-major contiguous.
  // InvalidArgument for a rank above kMaxRank, a negative dimension, an
  // invalid dtype, a null `data`, or a view whose element count, byte size or
  // byte span does not fit in int64 (so `num_elements` and `size_bytes` of
  // any view never overflow). In checked mode the view starts its bytes'
  // history afresh: they may be memory freed and allocated again.
  static absl::StatusOr<ArrayRef> FromPointer(
      void* data, DType dtype, std::span<const int64_t> shape,
      std::span<const int64_t> strides = {});
  // A contiguous view of symmetric-heap bytes at `heap_offset`, whose local
  // address is `data`. Used by the heap; users get these from `Allocate`.
  // Only the view itself is checked here (a valid dtype, sizes that fit in
  // int64, offset >= 0); a DMA checks that it lies in the heap's user part
  // and that `data` is the calling device's address of `heap_offset`.
  static absl::StatusOr<ArrayRef> Symmetric(std::byte* data,
                                            int64_t heap_offset, DType dtype,
                                            std::span<const int64_t> shape);
  // A strided view of symmetric-heap bytes (for the C ABI, which checks that
  // `data` is this device's address of `heap_offset`).
  static absl::StatusOr<ArrayRef> SymmetricStrided(
      std::byte* data, int64_t heap_offset, DType dtype,
      std::span<const int64_t> shape, std::span<const int64_t> strides);

  DType dtype() const { return dtype_; }
  int rank() const { return rank_; }
  std::span<const int64_t> shape() const {
    return {shape_.data(), size_t(rank_)};
  }
  std::span<const int64_t> strides() const {
    return {strides_.data(), size_t(rank_)};
  }
  int64_t dim(int d) const { return shape_[d]; }
  int64_t num_elements() const;
  int64_t size_bytes() const { return num_elements() * DTypeSize(dtype_); }
  bool is_contiguous() const;
  bool is_symmetric() const { return heap_offset_ >= 0; }
  // Byte offset of element 0 in the symmetric heap, or -1.
  int64_t heap_offset() const { return heap_offset_; }

  std::byte* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return reinterpret_cast<T*>(data_);
  }

  // Rows [start, start + size) of dimension `dim`. Errors name the dim, the
  // range and the shape.
  absl::StatusOr<ArrayRef> Slice(int dim, int64_t start, int64_t size) const;
  // The block [starts, starts + sizes) (one entry per dimension).
  absl::StatusOr<ArrayRef> Block(std::span<const int64_t> starts,
                                 std::span<const int64_t> sizes) const;
  // Element `index` of dimension 0, with that dimension dropped.
  absl::StatusOr<ArrayRef> At(int64_t index) const;
  // The same elements without the dimensions flagged in `drop` (one flag per
  // dimension; each flagged one must have size 1), strides kept.
  absl::StatusOr<ArrayRef> Squeeze(const std::vector<bool>& drop) const;
  // Same bytes viewed with another shape (contiguous views only).
  absl::StatusOr<ArrayRef> Reshape(std::span<const int64_t> shape) const;
  absl::StatusOr<ArrayRef> Reshape(std::initializer_list<int64_t> shape) const {
    return Reshape(std::span<const int64_t>(shape.begin(), shape.size()));
  }

  // "f32[4,8]" and, for strided views, "f32[4,8]{strides 16,1}".
  std::string ToString() const;

 private:
  // FromPointer's view, without telling checked mode of new memory.
  static absl::StatusOr<ArrayRef> MakeView(void* data, DType dtype,
                                           std::span<const int64_t> shape,
                                           std::span<const int64_t> strides);

  DType dtype_ = DType::kU8;
  int rank_ = 0;
  std::array<int64_t, kMaxRank> shape_{};
  std::array<int64_t, kMaxRank> strides_{};
  std::byte* data_ = nullptr;
  int64_t heap_offset_ = -1;
};

}  // namespace meshdma

#endif  // MESHDMA_DMA_ARRAY_REF_H_
