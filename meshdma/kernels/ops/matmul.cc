#include "meshdma/kernels/ops/matmul.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/kernels/blas.h"

namespace meshdma {

absl::string_view ActivationName(Activation a) {
  switch (a) {
    case Activation::kNone:
      return "none";
    case Activation::kRelu:
      return "relu";
    case Activation::kGelu:
      return "gelu";
    case Activation::kSilu:
      return "silu";
  }
  return "?";
}

float ApplyActivation(Activation a, float v) {
  switch (a) {
    case Activation::kNone:
      return v;
    case Activation::kRelu:
      return v > 0 ? v : 0.0f;
    case Activation::kGelu:  // tanh approximation, as jax.nn.gelu.
      return 0.5f * v *
             (1.0f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
    case Activation::kSilu:
      return v / (1.0f + std::exp(-v));
  }
  return v;
}

namespace {

// The leading dimension of a row-major block view of `rows` x `cols`, for
// Gemm: its row stride, or `cols` where a single row makes it unused.
int64_t LeadingDim(const Ref<float>& block, int64_t rows, int64_t cols) {
  return rows > 1 ? block.strides()[0] : std::max<int64_t>(cols, 1);
}

}  // namespace

absl::StatusOr<Kernel> MatmulKernel(int64_t m, int64_t n, int64_t k,
                                    const MatmulOptions& o) {
  if (ActivationName(o.activation) == "?") {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel 'matmul': activation (Activation) ",
                     static_cast<int>(o.activation),
                     " is not one of none (0), relu (1), gelu (2), silu (3)"));
  }
  if (o.block_m <= 0 || o.block_n <= 0 || o.block_k <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel 'matmul': block sizes (", o.block_m, ", ",
                     o.block_n, ", ", o.block_k, ") must be positive"));
  }
  // Blocks never exceed the array (small operands get one whole block).
  const int64_t bm = std::min(o.block_m, std::max<int64_t>(m, 1));
  const int64_t bn = std::min(o.block_n, std::max<int64_t>(n, 1));
  const int64_t bk = std::min(o.block_k, std::max<int64_t>(k, 1));
  auto cdiv = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  Kernel kernel;
  PallasCallParams& p = kernel.params;
  p.name = "matmul";
  p.grid = {cdiv(m, bm), cdiv(n, bn), cdiv(k, bk)};
  using G = std::span<const int64_t>;
  p.in_specs = {{{bm, bk},
                 [](G g) {
                   return std::vector<int64_t>{g[0], g[2]};
                 }},
                {{bk, bn}, [](G g) {
                   return std::vector<int64_t>{g[2], g[1]};
                 }}};
  p.out_specs = {{{bm, bn}, [](G g) {
                    return std::vector<int64_t>{g[0], g[1]};
                  }}};
  // Every block of x, y and out is used where it lies in its array, through
  // the row strides and over its valid part: no copies.
  for (BlockSpec* spec : {&p.in_specs[0], &p.in_specs[1], &p.out_specs[0]}) {
    spec->in_place = InPlace::kStridedRows;
  }
  p.out_shape = {{DType::kF32, {m, n}}};
  p.input_names = {"x", "y"};
  p.output_names = {"out"};
  p.stats = o.stats;
  const Activation act = o.activation;
  kernel.body = [act](const KernelArgs& a) -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(Ref<float> x, a.in<float>(0));
    MESHDMA_ASSIGN_OR_RETURN(Ref<float> y, a.in<float>(1));
    MESHDMA_ASSIGN_OR_RETURN(Ref<float> out, a.out<float>(0));
    // Step 1: out = x_blk @ y_blk at the first k block, out += at the
    // others: the output block, resident while k sweeps, is the accumulator.
    const bool first = program_id(2) == 0;
    const int64_t rows = a.out_valid(0, 0), cols = a.out_valid(0, 1);
    const int64_t depth = a.in_valid(0, 1);
    const int64_t ldo = LeadingDim(out, rows, cols);
    Gemm(false, false, rows, cols, depth, 1.0f, x.data(),
         LeadingDim(x, rows, depth), y.data(), LeadingDim(y, depth, cols),
         first ? 0.0f : 1.0f, out.data(), ldo);
    // Step 2: at the last k block, the fused activation in place.
    if (act != Activation::kNone && program_id(2) == num_programs(2) - 1) {
      for (int64_t r = 0; r < rows; ++r) {
        float* d = out.data() + r * ldo;
        if (act == Activation::kRelu) {
          for (int64_t c = 0; c < cols; ++c) d[c] = d[c] > 0 ? d[c] : 0.0f;
        } else {
          for (int64_t c = 0; c < cols; ++c) d[c] = ApplyActivation(act, d[c]);
        }
      }
    }
    return absl::OkStatus();
  };
  return kernel;
}

absl::Status Matmul(const ArrayRef& x, const ArrayRef& y, const ArrayRef& out,
                    const MatmulOptions& options) {
  if (x.rank() != 2 || y.rank() != 2 || x.dtype() != DType::kF32 ||
      y.dtype() != DType::kF32 || x.dim(1) != y.dim(0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel 'matmul': input 0 ('x') ", x.ToString(), " and input 1 ('y') ",
        y.ToString(), " are not f32 matrices [m, k] and [k, n]"));
  }
  MESHDMA_ASSIGN_OR_RETURN(Kernel kernel,
                           MatmulKernel(x.dim(0), y.dim(1), x.dim(1), options));
  const ArrayRef ins[] = {x, y};
  return kernel(ins, {&out, 1});
}

}  // namespace meshdma
