#include "meshdma/kernels/ops/softmax.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/kernels/pallas_call.h"

namespace meshdma {

absl::Status Softmax(const ArrayRef& x, const ArrayRef& out,
                     const SoftmaxOptions& options) {
  if (x.rank() != 2 || x.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel 'softmax': input 0 ('x') is ", x.ToString(),
                     ", expected f32[rows, cols]"));
  }
  const int64_t rows = x.dim(0), cols = x.dim(1);
  const int64_t br = std::max<int64_t>(1, std::min(options.block_rows, rows));
  PallasCallParams p;
  p.name = "softmax";
  p.grid = {(rows + br - 1) / br};
  auto by_row = [](std::span<const int64_t> g) {
    return std::vector<int64_t>{g[0], 0};
  };
  p.in_specs = {{{br, cols}, by_row}};
  p.out_specs = {{{br, cols}, by_row}};
  p.out_shape = {{DType::kF32, {rows, cols}}};
  p.input_names = {"x"};
  p.output_names = {"out"};
  return pallas_call(p,
                     [](const KernelArgs& a) -> absl::Status {
                       MESHDMA_ASSIGN_OR_RETURN(Ref<float> xr, a.in<float>(0));
                       MESHDMA_ASSIGN_OR_RETURN(Ref<float> o, a.out<float>(0));
                       Block<float> v = xr.Load();
                       Block<float> e = (v - v.Max(1)).Exp();
                       return o.Store(e / e.Sum(1));
                     },
                     {&x, 1}, {&out, 1});
}

}  // namespace meshdma
