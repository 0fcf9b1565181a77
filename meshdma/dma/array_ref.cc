#include "meshdma/dma/array_ref.h"

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "meshdma/base/checked_math.h"
#include "meshdma/dma/check/race_checker.h"

namespace meshdma {
namespace {

using base_internal::CheckedAdd;
using base_internal::CheckedByteExtent;
using base_internal::CheckedMul;
using base_internal::CheckedProduct;

std::string ShapeString(std::span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

}  // namespace

absl::StatusOr<ArrayRef> ArrayRef::FromPointer(
    void* data, DType dtype, std::span<const int64_t> shape,
    std::span<const int64_t> strides) {
  absl::StatusOr<ArrayRef> r = MakeView(data, dtype, shape, strides);
  if (r.ok() && r->num_elements() > 0) {
    // Checked mode: these bytes may be memory freed and handed out again.
    const int64_t elem = static_cast<int64_t>(DTypeSize(dtype));
    int64_t lo = 0, hi = 0;
    for (int d = 0; d < r->rank(); ++d) {
      const int64_t span = (r->dim(d) - 1) * r->strides()[d];
      (span < 0 ? lo : hi) += span;
    }
    // Addresses as integers: a view may describe memory it cannot point
    // into (the byte span is checked to fit int64, not the address space).
    const uintptr_t base = reinterpret_cast<uintptr_t>(r->data());
    dma_internal::RaceChecker::OnOrdinaryView(
        base + static_cast<uintptr_t>(lo * elem),
        base + static_cast<uintptr_t>((hi + 1) * elem));
  }
  return r;
}

absl::StatusOr<ArrayRef> ArrayRef::MakeView(void* data, DType dtype,
                                            std::span<const int64_t> shape,
                                            std::span<const int64_t> strides) {
  // Step 1: rank, strides, dimensions, data and dtype.
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    return absl::InvalidArgumentError(
        absl::StrCat("array of rank ", shape.size(), " ", ShapeString(shape),
                     " exceeds the maximum rank ", kMaxRank));
  }
  if (!strides.empty() && strides.size() != shape.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("array ", ShapeString(shape), " given ", strides.size(),
                     " strides; expected ", shape.size()));
  }
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative dimension in shape ", ShapeString(shape)));
    }
  }
  if (data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("null data pointer for array ", ShapeString(shape)));
  }
  if (!IsValidDType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("array ", ShapeString(shape),
                                                   ": invalid dtype ",
                                                   static_cast<int>(dtype)));
  }
  // Step 2: every size derived from a view (elements, bytes, the bytes it
  // spans) must
  // fit in int64_t, so that later bounds checks cannot be fooled by a wrap.
  const std::optional<int64_t> elements = CheckedProduct(shape);
  const std::optional<int64_t> bytes =
      elements.has_value()
          ? CheckedMul(*elements, static_cast<int64_t>(DTypeSize(dtype)))
          : std::nullopt;
  if (!bytes.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("array ", DTypeName(dtype), ShapeString(shape),
                     ": size in bytes overflows int64"));
  }
  // Step 3: the view, with row-major strides unless given.
  ArrayRef r;
  r.dtype_ = dtype;
  r.rank_ = static_cast<int>(shape.size());
  // Row-major strides. Only inner dimensions of a zero-sized array can
  // overflow this product; the stride is then 0, as past any zero dimension.
  int64_t stride = 1;
  for (int d = r.rank_ - 1; d >= 0; --d) {
    r.shape_[d] = shape[d];
    r.strides_[d] = strides.empty() ? stride : strides[d];
    stride = CheckedMul(stride, shape[d]).value_or(0);
  }
  if (!CheckedByteExtent(r.shape(), r.strides(),
                         static_cast<int64_t>(DTypeSize(dtype)))
           .has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "array ", DTypeName(dtype), ShapeString(shape), " with strides ",
        ShapeString(r.strides()), ": the bytes it spans overflow int64"));
  }
  r.data_ = static_cast<std::byte*>(data);
  return r;
}

absl::StatusOr<ArrayRef> ArrayRef::Symmetric(std::byte* data,
                                             int64_t heap_offset, DType dtype,
                                             std::span<const int64_t> shape) {
  return SymmetricStrided(data, heap_offset, dtype, shape, {});
}

absl::StatusOr<ArrayRef> ArrayRef::SymmetricStrided(
    std::byte* data, int64_t heap_offset, DType dtype,
    std::span<const int64_t> shape, std::span<const int64_t> strides) {
  if (heap_offset < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("symmetric array ", DTypeName(dtype), ShapeString(shape),
                     ": negative heap offset ", heap_offset));
  }
  auto r = MakeView(data, dtype, shape, strides);
  if (r.ok()) r->heap_offset_ = heap_offset;
  return r;
}

int64_t ArrayRef::num_elements() const {
  // Construction checked that the product fits, but only as a whole: with a
  // zero extent the partial products of the others may not.
  for (int d = 0; d < rank_; ++d) {
    if (shape_[d] == 0) return 0;
  }
  int64_t n = 1;
  for (int d = 0; d < rank_; ++d) n *= shape_[d];
  return n;
}

bool ArrayRef::is_contiguous() const {
  int64_t stride = 1;
  for (int d = rank_ - 1; d >= 0; --d) {
    if (shape_[d] != 1 && strides_[d] != stride) return false;
    stride = CheckedMul(stride, shape_[d]).value_or(0);
  }
  return true;
}

absl::StatusOr<ArrayRef> ArrayRef::Slice(int dim, int64_t start,
                                         int64_t size) const {
  if (dim < 0 || dim >= rank_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "slice of dimension ", dim, " of ", ToString(), ": no such dimension"));
  }
  // Written so that nothing overflows: `start + size` may not fit.
  if (start < 0 || size < 0 || start > shape_[dim] ||
      size > shape_[dim] - start) {
    return absl::OutOfRangeError(absl::StrCat(
        "slice [", start, ", ",
        CheckedAdd(start, size).has_value() ? absl::StrCat(start + size)
                                            : std::string("overflow"),
        ") of dimension ", dim, " of ", ToString(), " is out of bounds (size ",
        shape_[dim], ")"));
  }
  ArrayRef r = *this;
  r.shape_[dim] = size;
  // In bounds, so the offset lies within the view's extent, which fits --
  // unless another dimension is empty: then the view holds no element, its
  // strides bound nothing, and the slice stays where it is.
  std::optional<int64_t> delta_or = CheckedMul(start, strides_[dim]);
  if (delta_or.has_value()) {
    delta_or = CheckedMul(*delta_or, static_cast<int64_t>(DTypeSize(dtype_)));
  }
  const int64_t delta =
      delta_or.has_value() && num_elements() != 0 ? *delta_or : 0;
  // As an address, not pointer arithmetic: a view of memory the caller only
  // describes (a C-ABI view, say) must not be undefined behaviour to slice.
  r.data_ = reinterpret_cast<std::byte*>(reinterpret_cast<uintptr_t>(data_) +
                                         static_cast<uintptr_t>(delta));
  if (heap_offset_ >= 0) {
    const std::optional<int64_t> offset = CheckedAdd(heap_offset_, delta);
    if (!offset.has_value() || *offset < 0) {
      return absl::OutOfRangeError(
          absl::StrCat("slice [", start, ", ", start + size, ") of dimension ",
                       dim, " of ", ToString(), " at heap offset ",
                       heap_offset_, " leaves the symmetric heap"));
    }
    r.heap_offset_ = *offset;
  }
  return r;
}

absl::StatusOr<ArrayRef> ArrayRef::Block(std::span<const int64_t> starts,
                                         std::span<const int64_t> sizes) const {
  if (starts.size() != static_cast<size_t>(rank_) ||
      sizes.size() != static_cast<size_t>(rank_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block with ", starts.size(), " starts and ", sizes.size(),
        " sizes of ", ToString(), ": expected ", rank_, " of each"));
  }
  ArrayRef r = *this;
  for (int d = 0; d < rank_; ++d) {
    auto s = r.Slice(d, starts[d], sizes[d]);
    if (!s.ok()) return s.status();
    r = *s;
  }
  return r;
}

absl::StatusOr<ArrayRef> ArrayRef::At(int64_t index) const {
  if (rank_ == 0) {
    return absl::InvalidArgumentError("At() on a rank-0 array");
  }
  auto s = Slice(0, index, 1);
  if (!s.ok()) return s.status();
  ArrayRef r = *s;
  for (int d = 1; d < rank_; ++d) {
    r.shape_[d - 1] = r.shape_[d];
    r.strides_[d - 1] = r.strides_[d];
  }
  --r.rank_;
  return r;
}

absl::StatusOr<ArrayRef> ArrayRef::Squeeze(
    const std::vector<bool>& drop) const {
  if (static_cast<int>(drop.size()) != rank_) {
    return absl::InvalidArgumentError(absl::StrCat("squeeze of ", ToString(),
                                                   ": ", drop.size(),
                                                   " flags for rank ", rank_));
  }
  ArrayRef r = *this;
  r.rank_ = 0;
  for (int d = 0; d < rank_; ++d) {
    if (!drop[d]) {
      r.shape_[r.rank_] = shape_[d];
      r.strides_[r.rank_++] = strides_[d];
    } else if (shape_[d] != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "squeeze of ", ToString(), ": dimension ", d, " is not of size 1"));
    }
  }
  return r;
}

absl::StatusOr<ArrayRef> ArrayRef::Reshape(
    std::span<const int64_t> shape) const {
  if (!is_contiguous()) {
    return absl::FailedPreconditionError(
        absl::StrCat("reshape of non-contiguous view ", ToString()));
  }
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat("reshape of ", ToString(),
                                                     " to ", ShapeString(shape),
                                                     ": negative dimension"));
    }
  }
  const std::optional<int64_t> product = CheckedProduct(shape);
  if (!product.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reshape of ", ToString(), " to ", ShapeString(shape),
                     ": element count overflows int64"));
  }
  const int64_t n = *product;
  if (n != num_elements()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reshape of ", ToString(), " to ", ShapeString(shape),
        ": element counts differ (", num_elements(), " vs ", n, ")"));
  }
  // The same bytes: their history in checked mode goes on (MakeView, not
  // FromPointer).
  auto r = MakeView(data_, dtype_, shape, {});
  if (!r.ok()) return r.status();
  r->heap_offset_ = heap_offset_;
  return r;
}

std::string ArrayRef::ToString() const {
  std::string s = absl::StrCat(DTypeName(dtype_), ShapeString(shape()));
  if (!is_contiguous()) {
    absl::StrAppend(&s, "{strides ", absl::StrJoin(strides(), ","), "}");
  }
  return s;
}

}  // namespace meshdma
