#include "python/csrc/fused_ops.h"

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "meshdma/collectives/fused/collective_matmul.h"
#include "meshdma/collectives/fused/ring_attention.h"

namespace meshdma::torch_backend {
namespace {

// Checks `t` as the caller's rank sees it (before anything is queued, so a
// bad argument raises here and leaves the group serving): a float32 CPU
// tensor of `rank` dimensions. Returns it contiguous.
at::Tensor Operand(const at::Tensor& t, const char* op, const char* name,
                   int64_t rank, int me) {
  TORCH_CHECK_VALUE(t.device().is_cpu(), "meshdma.", op, " on rank ", me, ": '",
                    name, "' is on ", t.device(), "; CPU tensors only");
  TORCH_CHECK_TYPE(t.scalar_type() == at::kFloat, "meshdma.", op, " on rank ",
                   me, ": '", name, "' is ", c10::toString(t.scalar_type()),
                   "; the fused kernels take float32");
  TORCH_CHECK_VALUE(t.dim() == rank, "meshdma.", op, " on rank ", me, ": '",
                    name, "' is ", t.sizes(), "; expected ", rank,
                    " dimensions");
  return t.contiguous();
}

ArrayRef ViewOf(const at::Tensor& t) {
  std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
  absl::StatusOr<ArrayRef> ref =
      ArrayRef::FromPointer(t.data_ptr(), DType::kF32, shape);
  TORCH_CHECK_VALUE(ref.ok(), ref.status().message());
  return *ref;
}

void Run(ProcessGroupMeshdma& group, const char* op,
         std::function<absl::Status()> kernel) {
  absl::Status s = group.RunCollectiveKernel(op, std::move(kernel));
  TORCH_CHECK(s.ok(), s.message());
}

}  // namespace

at::Tensor AllGatherMatmul(ProcessGroupMeshdma& group, const at::Tensor& x,
                           const at::Tensor& w) {
  const char* op = "all_gather_matmul";
  const int me = group.getRank(), n = group.getSize();
  const at::Tensor xc = Operand(x, op, "x", 2, me);
  const at::Tensor wc = Operand(w, op, "w", 2, me);
  TORCH_CHECK_VALUE(xc.size(1) == wc.size(0), "meshdma.", op, " on rank ", me,
                    ": 'x' is ", xc.sizes(), " and 'w' ", wc.sizes(),
                    "; x's columns must be w's rows");
  at::Tensor out = at::empty({xc.size(0) * n, wc.size(1)}, xc.options());
  Run(group, op, [&] {
    return meshdma::AllGatherMatmul(ViewOf(xc), ViewOf(wc), ViewOf(out));
  });
  return out;
}

at::Tensor MatmulReduceScatter(ProcessGroupMeshdma& group, const at::Tensor& x,
                               const at::Tensor& w) {
  const char* op = "matmul_reduce_scatter";
  const int me = group.getRank(), n = group.getSize();
  const at::Tensor xc = Operand(x, op, "x", 2, me);
  const at::Tensor wc = Operand(w, op, "w", 2, me);
  TORCH_CHECK_VALUE(xc.size(1) == wc.size(0) && xc.size(0) % n == 0, "meshdma.",
                    op, " on rank ", me, ": 'x' is ", xc.sizes(), " and 'w' ",
                    wc.sizes(),
                    "; x's columns must be w's rows and its rows a multiple "
                    "of the group's ",
                    n, " ranks");
  at::Tensor out = at::empty({xc.size(0) / n, wc.size(1)}, xc.options());
  Run(group, op, [&] {
    return meshdma::MatmulReduceScatter(ViewOf(xc), ViewOf(wc), ViewOf(out));
  });
  return out;
}

at::Tensor RingAttention(ProcessGroupMeshdma& group, const at::Tensor& q,
                         const at::Tensor& k, const at::Tensor& v, bool causal,
                         c10::optional<double> sm_scale,
                         const std::string& layout) {
  const char* op = "ring_attention";
  const int me = group.getRank();
  // Step 1: [batch, heads, seq / n, head_dim] operands.
  const at::Tensor qc = Operand(q, op, "q", 4, me);
  const at::Tensor kc = Operand(k, op, "k", 4, me);
  const at::Tensor vc = Operand(v, op, "v", 4, me);
  TORCH_CHECK_VALUE(kc.sizes() == vc.sizes() && kc.size(0) == qc.size(0) &&
                        kc.size(3) == qc.size(3),
                    "meshdma.", op, " on rank ", me, ": 'q' ", qc.sizes(),
                    ", 'k' ", kc.sizes(), " and 'v' ", vc.sizes(),
                    " must be [batch, heads, seq, head_dim] with k and v "
                    "alike");
  TORCH_CHECK_VALUE(layout == "contiguous" || layout == "zigzag", "meshdma.",
                    op, ": layout '", layout,
                    "'; 'contiguous' or 'zigzag' expected");
  RingAttentionOptions options;
  options.causal = causal;
  options.layout = layout == "zigzag" ? SequenceLayout::kZigZag
                                      : SequenceLayout::kContiguous;
  if (sm_scale.has_value()) options.sm_scale = static_cast<float>(*sm_scale);
  // Step 2: one ring per batch element, in one device call.
  at::Tensor out = at::empty_like(qc);
  Run(group, op, [&]() -> absl::Status {
    for (int64_t b = 0; b < qc.size(0); ++b) {
      absl::Status s = meshdma::RingAttention(
          ViewOf(qc[b]), ViewOf(kc[b]), ViewOf(vc[b]), ViewOf(out[b]), options);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  });
  return out;
}

}  // namespace meshdma::torch_backend
