// Overflow-checked size arithmetic. Every product of shapes, strides and
// element sizes (element counts, byte sizes, view extents, grid step counts)
// goes through these so that a huge shape is an error, never a wrapped size
// that passes a bounds check.
#ifndef MESHDMA_BASE_CHECKED_MATH_H_
#define MESHDMA_BASE_CHECKED_MATH_H_

#include <cstdint>
#include <optional>
#include <span>

namespace meshdma::base_internal {

// a + b, or nullopt when it does not fit in int64_t.
inline std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// a * b, or nullopt when it does not fit in int64_t.
inline std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// The product of `dims` (1 for none), or nullopt when it does not fit. The
// caller has checked that every entry is >= 0; a zero entry makes the product
// 0 even when the other entries' product would overflow.
inline std::optional<int64_t> CheckedProduct(std::span<const int64_t> dims) {
  for (int64_t d : dims) {
    if (d == 0) return 0;
  }
  int64_t n = 1;
  for (int64_t d : dims) {
    std::optional<int64_t> next = CheckedMul(n, d);
    if (!next.has_value()) return std::nullopt;
    n = *next;
  }
  return n;
}

// The byte range [lo, hi) that a strided view touches relative to its
// element 0: shape and strides in elements, `elem_bytes` per element. Empty
// views touch nothing ({0, 0}). Strides may be negative. nullopt when any
// intermediate does not fit in int64_t.
struct ByteExtent {
  int64_t lo = 0;
  int64_t hi = 0;
};
inline std::optional<ByteExtent> CheckedByteExtent(
    std::span<const int64_t> shape, std::span<const int64_t> strides,
    int64_t elem_bytes) {
  for (int64_t d : shape) {
    if (d == 0) return ByteExtent{};
  }
  int64_t lo = 0;
  int64_t hi = 0;  // Offsets in elements of the first and last element.
  for (size_t d = 0; d < shape.size(); ++d) {
    std::optional<int64_t> span = CheckedMul(shape[d] - 1, strides[d]);
    if (!span.has_value()) return std::nullopt;
    std::optional<int64_t> next =
        *span < 0 ? CheckedAdd(lo, *span) : CheckedAdd(hi, *span);
    if (!next.has_value()) return std::nullopt;
    (*span < 0 ? lo : hi) = *next;
  }
  std::optional<int64_t> lo_bytes = CheckedMul(lo, elem_bytes);
  std::optional<int64_t> end = CheckedAdd(hi, 1);
  if (!lo_bytes.has_value() || !end.has_value()) return std::nullopt;
  std::optional<int64_t> hi_bytes = CheckedMul(*end, elem_bytes);
  if (!hi_bytes.has_value()) return std::nullopt;
  return ByteExtent{*lo_bytes, *hi_bytes};
}

}  // namespace meshdma::base_internal

#endif  // MESHDMA_BASE_CHECKED_MATH_H_
