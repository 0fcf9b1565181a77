#include "meshdma/base/dtype.h"

#include <cmath>

namespace meshdma {

absl::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kU8:
      return "u8";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kF32:
      return "f32";
    case DType::kF64:
      return "f64";
  }
  return "invalid dtype";
}

Half::Half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // Inf or NaN.
    bits = static_cast<uint16_t>(sign | 0x7c00u |
                                 (abs > 0x7f800000u ? 0x200u : 0));
    return;
  }
  if (abs >= 0x477ff000u) {  // Rounds to a value beyond the largest half.
    bits = static_cast<uint16_t>(sign | 0x7c00u);
    return;
  }
  if (abs < 0x38800000u) {  // Subnormal half (or zero).
    // Scale into the subnormal range with float arithmetic, which rounds to
    // nearest even for us: the subnormal step is 2^-24.
    float magnitude;
    std::memcpy(&magnitude, &abs, 4);
    bits = static_cast<uint16_t>(
        sign | static_cast<uint32_t>(std::nearbyint(magnitude * 16777216.0f)));
    return;
  }
  uint32_t mant = abs + 0xfffu + ((abs >> 13) & 1u);  // Round to nearest even.
  bits = static_cast<uint16_t>(sign | ((mant - 0x38000000u) >> 13));
}

Half::operator float() const {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1fu;
  const uint32_t mant = bits & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    float f = static_cast<float>(mant) / 16777216.0f;  // mant * 2^-24.
    return sign ? -f : f;
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

namespace base_internal {

double LoadAsDouble(DType dtype, const void* data, int64_t i) {
  switch (dtype) {
    case DType::kU8:
      return static_cast<const uint8_t*>(data)[i];
    case DType::kI32:
      return static_cast<const int32_t*>(data)[i];
    case DType::kI64:
      return static_cast<double>(static_cast<const int64_t*>(data)[i]);
    case DType::kF16:
      return static_cast<float>(static_cast<const Half*>(data)[i]);
    case DType::kBF16:
      return static_cast<float>(static_cast<const BFloat16*>(data)[i]);
    case DType::kF32:
      return static_cast<const float*>(data)[i];
    case DType::kF64:
      return static_cast<const double*>(data)[i];
  }
  return 0;
}

void StoreFromDouble(DType dtype, void* data, int64_t i, double v) {
  switch (dtype) {
    case DType::kU8:
      static_cast<uint8_t*>(data)[i] =
          static_cast<uint8_t>(static_cast<int64_t>(v) & 255);
      return;
    case DType::kI32:
      static_cast<int32_t*>(data)[i] = static_cast<int32_t>(v);
      return;
    case DType::kI64:
      static_cast<int64_t*>(data)[i] = static_cast<int64_t>(v);
      return;
    case DType::kF16:
      static_cast<Half*>(data)[i] = Half(static_cast<float>(v));
      return;
    case DType::kBF16:
      static_cast<BFloat16*>(data)[i] = BFloat16(static_cast<float>(v));
      return;
    case DType::kF32:
      static_cast<float*>(data)[i] = static_cast<float>(v);
      return;
    case DType::kF64:
      static_cast<double*>(data)[i] = v;
      return;
  }
}

}  // namespace base_internal
}  // namespace meshdma
