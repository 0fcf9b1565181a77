// Fuzzes ArrayRef (meshdma/dma/array_ref.h): views built from arbitrary
// shapes and strides, then chains of Slice, Block, At and Reshape. Views are
// never dereferenced here; the library's own checks (overflow of element
// counts, byte sizes and spans) are what is exercised, under ASan+UBSan.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "meshdma/dma/array_ref.h"

namespace {

std::vector<int64_t> Dims(FuzzedDataProvider& in, int rank) {
  std::vector<int64_t> v;
  for (int i = 0; i < rank; ++i) {
    v.push_back(in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(-2, 64)
                                 : in.ConsumeIntegral<int64_t>());
  }
  return v;
}

void Check(const meshdma::ArrayRef& r) {
  (void)r.num_elements();
  (void)r.size_bytes();
  (void)r.is_contiguous();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  alignas(64) static std::byte buffer[64];
  const int rank = in.ConsumeIntegralInRange<int>(0, meshdma::kMaxRank + 1);
  const auto dtype =
      static_cast<meshdma::DType>(in.ConsumeIntegral<uint8_t>() % 12);
  const std::vector<int64_t> shape = Dims(in, rank);
  const std::vector<int64_t> strides =
      in.ConsumeBool() ? Dims(in, rank) : std::vector<int64_t>{};
  absl::StatusOr<meshdma::ArrayRef> ref;
  switch (in.ConsumeIntegralInRange<int>(0, 2)) {
    case 0:
      ref = meshdma::ArrayRef::FromPointer(buffer, dtype, shape, strides);
      break;
    case 1:
      ref = meshdma::ArrayRef::Symmetric(buffer, in.ConsumeIntegral<int64_t>(),
                                         dtype, shape);
      break;
    default:
      ref = meshdma::ArrayRef::SymmetricStrided(
          buffer, in.ConsumeIntegral<int64_t>(), dtype, shape, strides);
  }
  if (!ref.ok()) return 0;
  meshdma::ArrayRef r = *ref;
  Check(r);
  for (int step = 0; step < 8 && in.remaining_bytes() > 0; ++step) {
    absl::StatusOr<meshdma::ArrayRef> next;
    switch (in.ConsumeIntegralInRange<int>(0, 3)) {
      case 0: {
        const int dim = in.ConsumeIntegralInRange<int>(-1, meshdma::kMaxRank);
        const int64_t start = in.ConsumeIntegral<int64_t>();
        next = r.Slice(dim, start, in.ConsumeIntegral<int64_t>());
        break;
      }
      case 1: {
        const int n = in.ConsumeIntegralInRange<int>(0, meshdma::kMaxRank + 1);
        const std::vector<int64_t> starts = Dims(in, n);
        const std::vector<int64_t> sizes = Dims(in, n);
        next = r.Block(starts, sizes);
        break;
      }
      case 2:
        next = r.At(in.ConsumeIntegral<int64_t>());
        break;
      default: {
        const int n = in.ConsumeIntegralInRange<int>(0, meshdma::kMaxRank + 1);
        next = r.Reshape(Dims(in, n));
      }
    }
    if (!next.ok()) continue;
    r = *next;
    Check(r);
  }
  return 0;
}
