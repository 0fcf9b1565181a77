#include "meshdma/kernels/ops/iota.h"

#include "absl/strings/str_cat.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/kernels/pallas_call.h"

namespace meshdma {
namespace {

template <typename T>
absl::Status IotaBody(const KernelArgs& a, int64_t bs) {
  MESHDMA_ASSIGN_OR_RETURN(Ref<T> o, a.out<T>(0));
  Block<T> b = Block<T>::Iota({bs}, 0) + static_cast<T>(program_id(0) * bs);
  return o.StoreMasked(b, a.out_valid(0));
}

}  // namespace

absl::Status Iota(const ArrayRef& out, const IotaOptions& options) {
  if (out.rank() != 1 ||
      (out.dtype() != DType::kI32 && out.dtype() != DType::kF32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel 'iota': output 0 ('out') is ", out.ToString(),
                     ", expected a 1-D i32 or f32 array"));
  }
  const int64_t bs = options.block_size;
  if (bs <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel 'iota': block_size ", bs));
  }
  PallasCallParams p;
  p.name = "iota";
  p.grid = {(out.dim(0) + bs - 1) / bs};
  p.out_specs = {{{bs}, [](std::span<const int64_t> g) {
                    return std::vector<int64_t>{g[0]};
                  }}};
  p.output_names = {"out"};
  const bool is_i32 = out.dtype() == DType::kI32;
  return pallas_call(p,
                     [is_i32, bs](const KernelArgs& a) {
                       return is_i32 ? IotaBody<int32_t>(a, bs)
                                     : IotaBody<float>(a, bs);
                     },
                     {}, {&out, 1});
}

}  // namespace meshdma
