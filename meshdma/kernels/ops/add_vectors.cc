#include "meshdma/kernels/ops/add_vectors.h"

#include "absl/strings/str_cat.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/kernels/pallas_call.h"

namespace meshdma {

absl::Status AddVectors(const ArrayRef& x, const ArrayRef& y,
                        const ArrayRef& out, const AddVectorsOptions& options) {
  if (x.rank() != 1 || x.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel 'add_vectors': input 0 ('x') is ", x.ToString(),
                     ", expected a 1-D f32 array"));
  }
  const int64_t n = x.dim(0);
  if (y.dtype() != DType::kF32 || y.rank() != 1 || y.dim(0) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel 'add_vectors': input 1 ('y') is ", y.ToString(),
                     ", input 0 ('x') is ", x.ToString(), "; they must match"));
  }
  const int64_t bs = options.block_size;
  if (bs <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel 'add_vectors': block_size ", bs));
  }
  PallasCallParams p;
  p.name = "add_vectors";
  p.grid = {(n + bs - 1) / bs};
  auto by_i = [](std::span<const int64_t> g) {
    return std::vector<int64_t>{g[0]};
  };
  p.in_specs = {{{bs}, by_i}, {{bs}, by_i}};
  p.out_specs = {{{bs}, by_i}};
  p.out_shape = {{DType::kF32, {n}}};
  p.input_names = {"x", "y"};
  p.output_names = {"out"};
  const ArrayRef ins[] = {x, y};
  return pallas_call(
      p,
      [](const KernelArgs& a) -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(Ref<float> xr, a.in<float>(0));
        MESHDMA_ASSIGN_OR_RETURN(Ref<float> yr, a.in<float>(1));
        MESHDMA_ASSIGN_OR_RETURN(Ref<float> o, a.out<float>(0));
        // The mask: only offsets < n are loaded and stored.
        const auto valid = a.in_valid(0);
        return o.StoreMasked(
            xr.LoadMasked(valid, 0.0f) + yr.LoadMasked(valid, 0.0f), valid);
      },
      ins, {&out, 1});
}

}  // namespace meshdma
