// Element types. Collectives and kernels are templated on the C++ type; the
// runtime moves bytes and checks a `DType` tag so that a DMA between arrays of
// different element types is an error rather than silent reinterpretation.
#ifndef MESHDMA_BASE_DTYPE_H_
#define MESHDMA_BASE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/strings/string_view.h"

namespace meshdma {

enum class DType : uint8_t {
  kU8,
  kI32,
  kI64,
  kF16,
  kBF16,
  kF32,
  kF64,
};

// Whether `t` is one of the enumerators above. Every entry point that takes a
// `DType` from a caller rejects any other value (a cast integer) with
// InvalidArgument.
constexpr bool IsValidDType(DType t) {
  return static_cast<uint8_t>(t) <= static_cast<uint8_t>(DType::kF64);
}

// Bytes per element (0 for an invalid `DType`).
constexpr size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kU8:
      return 1;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kI32:
    case DType::kF32:
      return 4;
    case DType::kI64:
    case DType::kF64:
      return 8;
  }
  return 0;
}

// The short name used in error messages and benchmark output ("f32", "bf16").
absl::string_view DTypeName(DType t);

// IEEE binary16 and bfloat16 storage types. Arithmetic happens in float: load
// with `float(x)`, store with `Half(f)` (round to nearest even).
struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f);
  explicit operator float() const;
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it a quiet NaN.
      bits = static_cast<uint16_t>((u >> 16) | 0x40);
      return;
    }
    u += 0x7fffu + ((u >> 16) & 1u);  // Round to nearest even.
    bits = static_cast<uint16_t>(u >> 16);
  }
  explicit operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

// Maps a C++ element type to its tag: `DTypeOf<float>::value == DType::kF32`.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kU8;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kI64;
};
template <>
struct DTypeOf<Half> {
  static constexpr DType value = DType::kF16;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::kBF16;
};
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kF64;
};

template <typename T>
inline constexpr DType kDTypeOf = DTypeOf<T>::value;

namespace base_internal {

// Element `i` of an array of `dtype` at `data`, read as a double, and
// written from one (rounded as the type's conversion rounds; kU8 keeps the
// low 8 bits of the integer part). For tests and benchmarks that fill and
// check arrays of any element type against a reference in doubles.
double LoadAsDouble(DType dtype, const void* data, int64_t i);
void StoreFromDouble(DType dtype, void* data, int64_t i, double v);

}  // namespace base_internal

}  // namespace meshdma

#endif  // MESHDMA_BASE_DTYPE_H_
