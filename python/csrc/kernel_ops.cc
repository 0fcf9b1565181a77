// torch.ops.meshdma: meshdma's attention kernels as torch operators on CPU
// tensors, with PyTorch/XLA's custom-kernel signatures (docs/torch.md,
// "Kernels"):
//   flash_attention(q, k, v, causal, q_segment_ids, kv_segment_ids, sm_scale,
//                   ab) -> out, differentiable in q, k and v through meshdma's
//                   flash attention backward;
//   paged_attention(q, k_pages, v_pages, lengths, page_indices,
//                   pages_per_compute_block, attn_logits_soft_cap) -> out.
// Each runs on this process's meshdma device (process_device.h). A kernel's
// error is its caller's alone: it raises (ValueError for shapes and values,
// TypeError for dtypes, with the kernel's message) and leaves the device,
// and any process group on it, serving.
#include "python/csrc/kernel_ops.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <functional>
#include <tuple>

#include "meshdma/kernels/ops/flash_attention.h"
#include "meshdma/kernels/ops/flash_attention_backward.h"
#include "meshdma/kernels/ops/paged_attention.h"
#include "python/csrc/group_ops.h"
#include "python/csrc/process_device.h"

namespace meshdma::torch_backend {

void RunKernel(const std::function<absl::Status()>& kernel) {
  absl::StatusOr<std::shared_ptr<DeviceServer>> device = KernelDevice();
  TORCH_CHECK(device.ok(), device.status().message());
  absl::Status result;
  // The call itself succeeds whatever the kernel returns, so that a bad
  // argument does not end the device's Run.
  absl::Status served = (*device)->Call([&] {
    result = kernel();
    return absl::OkStatus();
  });
  TORCH_CHECK(served.ok(), served.message());
  TORCH_CHECK_VALUE(result.ok(), result.message());
}

at::ScalarType TorchDType(DType t) {
  switch (t) {
    case DType::kU8:
      return at::kByte;
    case DType::kI32:
      return at::kInt;
    case DType::kI64:
      return at::kLong;
    case DType::kF16:
      return at::kHalf;
    case DType::kBF16:
      return at::kBFloat16;
    case DType::kF32:
      return at::kFloat;
    case DType::kF64:
      return at::kDouble;
  }
  TORCH_CHECK_TYPE(false, "meshdma: dtype ", DTypeName(t),
                   " has no torch dtype");
}

ArrayRef KernelView(const at::Tensor& t) {
  absl::StatusOr<DType> dtype = DTypeOfTensor(t);
  TORCH_CHECK_TYPE(dtype.ok(), "meshdma: ", dtype.status().message());
  std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
  absl::StatusOr<ArrayRef> ref =
      ArrayRef::FromPointer(t.data_ptr(), *dtype, shape);
  TORCH_CHECK_VALUE(ref.ok(), ref.status().message());
  return *ref;
}

namespace {

using OptionalTensor = c10::optional<at::Tensor>;

void CheckCpu(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK_VALUE(t.device().is_cpu(), "meshdma.", op, ": '", name,
                    "' is on ", t.device(),
                    "; meshdma's kernels take CPU "
                    "tensors");
}

// The dtype the kernels compute q's in: float32, bfloat16 and float16 as
// they are, float64 as float32.
at::ScalarType ComputeType(const at::Tensor& q, const char* op) {
  const at::ScalarType t = q.scalar_type();
  if (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf) return t;
  if (t == at::kDouble) return at::kFloat;
  TORCH_CHECK_TYPE(false, "meshdma.", op, ": 'q' is ", c10::toString(t),
                   "; float32, bfloat16, float16 and float64 (computed in "
                   "float32) are supported");
}

// An operand of q's family: on the CPU, of q's dtype, contiguous, in the
// compute dtype.
at::Tensor LikeQ(const at::Tensor& t, const at::Tensor& q, at::ScalarType type,
                 const char* op, const char* name) {
  CheckCpu(t, op, name);
  TORCH_CHECK_TYPE(t.scalar_type() == q.scalar_type(), "meshdma.", op, ": '",
                   name, "' is ", c10::toString(t.scalar_type()),
                   " but 'q' is ", c10::toString(q.scalar_type()));
  return t.to(type).contiguous();
}

// Integer ids or lengths as int32, refusing values int32 cannot hold.
at::Tensor Int32(const at::Tensor& t, const char* op, const char* name) {
  CheckCpu(t, op, name);
  TORCH_CHECK_TYPE(
      !at::isFloatingType(t.scalar_type()) && t.scalar_type() != at::kBool,
      "meshdma.", op, ": '", name, "' is ", c10::toString(t.scalar_type()),
      "; integers expected");
  at::Tensor r = t.to(at::kInt).contiguous();
  TORCH_CHECK_VALUE(
      t.scalar_type() == at::kInt || r.to(at::kLong).equal(t.to(at::kLong)),
      "meshdma.", op, ": '", name, "' holds values outside int32");
  return r;
}

// The forward's and backward's masking inputs, converted, and views of them
// (valid while `Masks` lives).
struct Masks {
  at::Tensor q_segment_ids, kv_segment_ids, ab;
  ArrayRef q_view, kv_view, ab_view;

  Masks(const OptionalTensor& q_seg, const OptionalTensor& kv_seg,
        const OptionalTensor& bias) {
    TORCH_CHECK_VALUE(q_seg.has_value() == kv_seg.has_value(),
                      "meshdma.flash_attention: 'q_segment_ids' and "
                      "'kv_segment_ids' come together");
    if (q_seg.has_value()) {
      q_segment_ids = Int32(*q_seg, "flash_attention", "q_segment_ids");
      kv_segment_ids = Int32(*kv_seg, "flash_attention", "kv_segment_ids");
      q_view = KernelView(q_segment_ids);
      kv_view = KernelView(kv_segment_ids);
    }
    if (bias.has_value()) {
      CheckCpu(*bias, "flash_attention", "ab");
      ab = bias->to(at::kFloat).contiguous();
      ab_view = KernelView(ab);
    }
  }
  FlashAttentionMasks Get() const {
    FlashAttentionMasks m;
    if (q_segment_ids.defined()) {
      m.q_segment_ids = &q_view;
      m.kv_segment_ids = &kv_view;
    }
    if (ab.defined()) m.ab = &ab_view;
    return m;
  }
};

FlashAttentionOptions FlashOptions(bool causal, double sm_scale) {
  FlashAttentionOptions o;
  o.causal = causal;
  o.sm_scale = static_cast<float>(sm_scale);
  return o;
}

// out and the rows' log-sum-exp (float32 [B, H, Sq]).
std::tuple<at::Tensor, at::Tensor> FlashForward(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
    const OptionalTensor& q_segment_ids, const OptionalTensor& kv_segment_ids,
    double sm_scale, const OptionalTensor& ab) {
  // Step 1: the operands as the kernel takes them.
  const char* op = "flash_attention";
  CheckCpu(q, op, "q");
  const at::ScalarType type = ComputeType(q, op);
  TORCH_CHECK_VALUE(q.dim() == 4, "meshdma.flash_attention: 'q' is ", q.sizes(),
                    "; expected [batch, heads, seq, head_dim]");
  const at::Tensor qc = q.to(type).contiguous();
  const at::Tensor kc = LikeQ(k, q, type, op, "k");
  const at::Tensor vc = LikeQ(v, q, type, op, "v");
  const Masks masks(q_segment_ids, kv_segment_ids, ab);
  // Step 2: the kernel, into new outputs.
  at::Tensor out = at::empty_like(qc);
  at::Tensor lse = at::empty({q.size(0), q.size(1), q.size(2)},
                             qc.options().dtype(at::kFloat));
  const ArrayRef lse_view = KernelView(lse);
  RunKernel([&] {
    return FlashAttention(KernelView(qc), KernelView(kc), KernelView(vc),
                          KernelView(out), FlashOptions(causal, sm_scale),
                          &lse_view, masks.Get());
  });
  return {out.to(q.scalar_type()), lse};
}

// dq, dk and dv of the forward's inputs.
std::tuple<at::Tensor, at::Tensor, at::Tensor> FlashBackward(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
    bool causal, const OptionalTensor& q_segment_ids,
    const OptionalTensor& kv_segment_ids, double sm_scale,
    const OptionalTensor& ab) {
  const char* op = "flash_attention_backward";
  const at::ScalarType type = ComputeType(q, op);
  const at::Tensor qc = q.to(type).contiguous();
  const at::Tensor kc = LikeQ(k, q, type, op, "k");
  const at::Tensor vc = LikeQ(v, q, type, op, "v");
  const at::Tensor oc = LikeQ(out, q, type, op, "out");
  const at::Tensor dout = grad_out.to(type).contiguous();
  const at::Tensor lse_c = lse.contiguous();
  const Masks masks(q_segment_ids, kv_segment_ids, ab);
  at::Tensor dq = at::empty_like(qc), dk = at::empty_like(kc),
             dv = at::empty_like(vc);
  RunKernel([&] {
    return FlashAttentionBackward(
        KernelView(qc), KernelView(kc), KernelView(vc), KernelView(oc),
        KernelView(dout), KernelView(lse_c), KernelView(dq), KernelView(dk),
        KernelView(dv), FlashOptions(causal, sm_scale), masks.Get());
  });
  const at::ScalarType t = q.scalar_type();
  return {dq.to(t), dk.to(t), dv.to(t)};
}

// Below autograd: the forward's output alone.
at::Tensor FlashAttentionCpu(const at::Tensor& q, const at::Tensor& k,
                             const at::Tensor& v, bool causal,
                             const OptionalTensor& q_segment_ids,
                             const OptionalTensor& kv_segment_ids,
                             double sm_scale, const OptionalTensor& ab) {
  return std::get<0>(FlashForward(q, k, v, causal, q_segment_ids,
                                  kv_segment_ids, sm_scale, ab));
}

// Autograd: gradients for q, k and v (none for the ids or the bias).
class FlashAttentionFunction
    : public torch::autograd::Function<FlashAttentionFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx,
                            const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, bool causal,
                            const OptionalTensor& q_segment_ids,
                            const OptionalTensor& kv_segment_ids,
                            double sm_scale, const OptionalTensor& ab) {
    at::AutoDispatchBelowADInplaceOrView below;
    auto [out, lse] = FlashForward(q, k, v, causal, q_segment_ids,
                                   kv_segment_ids, sm_scale, ab);
    ctx->save_for_backward(
        {q, k, v, out, lse, q_segment_ids.value_or(at::Tensor()),
         kv_segment_ids.value_or(at::Tensor()), ab.value_or(at::Tensor())});
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["sm_scale"] = sm_scale;
    return out;
  }

  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx,
      torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto optional = [](const at::Tensor& t) {
      return t.defined() ? OptionalTensor(t) : OptionalTensor();
    };
    auto [dq, dk, dv] = FlashBackward(
        grads[0], saved[0], saved[1], saved[2], saved[3], saved[4],
        ctx->saved_data["causal"].toBool(), optional(saved[5]),
        optional(saved[6]), ctx->saved_data["sm_scale"].toDouble(),
        optional(saved[7]));
    return {dq,           dk,           dv,           at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor FlashAttentionAutograd(const at::Tensor& q, const at::Tensor& k,
                                  const at::Tensor& v, bool causal,
                                  const OptionalTensor& q_segment_ids,
                                  const OptionalTensor& kv_segment_ids,
                                  double sm_scale, const OptionalTensor& ab) {
  return FlashAttentionFunction::apply(q, k, v, causal, q_segment_ids,
                                       kv_segment_ids, sm_scale, ab);
}

// PyTorch/XLA's paged_attention: no q.k scaling, and pages_per_compute_block
// must divide the pages per sequence.
at::Tensor PagedAttentionOp(const at::Tensor& q, const at::Tensor& k_pages,
                            const at::Tensor& v_pages,
                            const at::Tensor& lengths,
                            const at::Tensor& page_indices,
                            int64_t pages_per_compute_block,
                            c10::optional<double> attn_logits_soft_cap) {
  // Step 1: the operands as the kernel takes them, and the divisibility rule.
  const char* op = "paged_attention";
  CheckCpu(q, op, "q");
  const at::ScalarType type = ComputeType(q, op);
  const at::Tensor qc = q.to(type).contiguous();
  const at::Tensor kc = LikeQ(k_pages, q, type, op, "k_pages");
  const at::Tensor vc = LikeQ(v_pages, q, type, op, "v_pages");
  const at::Tensor lens = Int32(lengths, op, "lengths");
  const at::Tensor table = Int32(page_indices, op, "page_indices");
  TORCH_CHECK_VALUE(table.dim() == 2 && pages_per_compute_block > 0 &&
                        table.size(1) % pages_per_compute_block == 0,
                    "meshdma.paged_attention: pages_per_compute_block (",
                    pages_per_compute_block,
                    ") must be positive and divide the pages per sequence "
                    "(page_indices is ",
                    table.sizes(), ")");
  // Step 2: the kernel.
  PagedAttentionOptions o;
  o.pages_per_compute_block = pages_per_compute_block;
  o.sm_scale = 1.0f;
  if (attn_logits_soft_cap.has_value()) {
    o.logits_soft_cap = static_cast<float>(*attn_logits_soft_cap);
  }
  at::Tensor out = at::empty_like(qc);
  RunKernel([&] {
    return PagedAttention(KernelView(qc), KernelView(kc), KernelView(vc),
                          KernelView(lens), KernelView(table), KernelView(out),
                          o);
  });
  return out.to(q.scalar_type());
}

}  // namespace

TORCH_LIBRARY(meshdma, m) {
  m.def(
      "flash_attention(Tensor q, Tensor k, Tensor v, bool causal=False, "
      "Tensor? q_segment_ids=None, Tensor? kv_segment_ids=None, "
      "float sm_scale=1.0, Tensor? ab=None) -> Tensor");
  m.def(
      "_flash_attention_forward(Tensor q, Tensor k, Tensor v, bool causal, "
      "Tensor? q_segment_ids, Tensor? kv_segment_ids, float sm_scale, "
      "Tensor? ab) -> (Tensor, Tensor)");
  m.def(
      "_flash_attention_backward(Tensor grad_out, Tensor q, Tensor k, "
      "Tensor v, Tensor out, Tensor lse, bool causal, "
      "Tensor? q_segment_ids, Tensor? kv_segment_ids, float sm_scale, "
      "Tensor? ab) -> (Tensor, Tensor, Tensor)");
  m.def(
      "paged_attention(Tensor q, Tensor k_pages, Tensor v_pages, "
      "Tensor lengths, Tensor page_indices, int pages_per_compute_block, "
      "float? attn_logits_soft_cap=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(meshdma, CPU, m) {
  m.impl("flash_attention", FlashAttentionCpu);
  m.impl("_flash_attention_forward", FlashForward);
  m.impl("_flash_attention_backward", FlashBackward);
  m.impl("paged_attention", PagedAttentionOp);
}

TORCH_LIBRARY_IMPL(meshdma, Autograd, m) {
  m.impl("flash_attention", FlashAttentionAutograd);
}

}  // namespace meshdma::torch_backend
