#include "meshdma/dma/array_ref.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace meshdma {
namespace {

std::string ShapeString(std::span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

}  // namespace

absl::StatusOr<ArrayRef> ArrayRef::FromPointer(
    void* data, DType dtype, std::span<const int64_t> shape,
    std::span<const int64_t> strides) {
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
  ArrayRef r;
  r.dtype_ = dtype;
  r.rank_ = static_cast<int>(shape.size());
  int64_t stride = 1;
  for (int d = r.rank_ - 1; d >= 0; --d) {
    r.shape_[d] = shape[d];
    r.strides_[d] = strides.empty() ? stride : strides[d];
    stride *= shape[d];
  }
  r.data_ = static_cast<std::byte*>(data);
  return r;
}

ArrayRef ArrayRef::Symmetric(std::byte* data, int64_t heap_offset, DType dtype,
                             std::span<const int64_t> shape) {
  ArrayRef r = *FromPointer(data, dtype, shape);
  r.heap_offset_ = heap_offset;
  return r;
}

absl::StatusOr<ArrayRef> ArrayRef::SymmetricStrided(
    std::byte* data, int64_t heap_offset, DType dtype,
    std::span<const int64_t> shape, std::span<const int64_t> strides) {
  auto r = FromPointer(data, dtype, shape, strides);
  if (r.ok()) r->heap_offset_ = heap_offset;
  return r;
}

int64_t ArrayRef::num_elements() const {
  int64_t n = 1;
  for (int d = 0; d < rank_; ++d) n *= shape_[d];
  return n;
}

bool ArrayRef::is_contiguous() const {
  int64_t stride = 1;
  for (int d = rank_ - 1; d >= 0; --d) {
    if (shape_[d] != 1 && strides_[d] != stride) return false;
    stride *= shape_[d];
  }
  return true;
}

absl::StatusOr<ArrayRef> ArrayRef::Slice(int dim, int64_t start,
                                         int64_t size) const {
  if (dim < 0 || dim >= rank_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "slice of dimension ", dim, " of ", ToString(), ": no such dimension"));
  }
  if (start < 0 || size < 0 || start + size > shape_[dim]) {
    return absl::OutOfRangeError(absl::StrCat(
        "slice [", start, ", ", start + size, ") of dimension ", dim, " of ",
        ToString(), " is out of bounds (size ", shape_[dim], ")"));
  }
  ArrayRef r = *this;
  r.shape_[dim] = size;
  const int64_t delta = start * strides_[dim];
  r.data_ += delta * static_cast<int64_t>(DTypeSize(dtype_));
  if (heap_offset_ >= 0) {
    r.heap_offset_ += delta * static_cast<int64_t>(DTypeSize(dtype_));
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

absl::StatusOr<ArrayRef> ArrayRef::Reshape(
    std::span<const int64_t> shape) const {
  if (!is_contiguous()) {
    return absl::FailedPreconditionError(
        absl::StrCat("reshape of non-contiguous view ", ToString()));
  }
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (n != num_elements()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reshape of ", ToString(), " to ", ShapeString(shape),
        ": element counts differ (", num_elements(), " vs ", n, ")"));
  }
  auto r = FromPointer(data_, dtype_, shape);
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
