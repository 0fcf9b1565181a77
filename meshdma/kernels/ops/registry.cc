#include "meshdma/kernels/ops/registry.h"

#include <algorithm>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/kernels/ops/add_vectors.h"
#include "meshdma/kernels/ops/flash_attention.h"
#include "meshdma/kernels/ops/flash_attention_backward.h"
#include "meshdma/kernels/ops/iota.h"
#include "meshdma/kernels/ops/matmul.h"
#include "meshdma/kernels/ops/paged_attention.h"
#include "meshdma/kernels/ops/softmax.h"

namespace meshdma::kernels_internal {
namespace {

template <typename T>
absl::StatusOr<T> GetAttr(const OpAttrs& attrs, absl::string_view op,
                          absl::string_view name, T dflt, const char* type) {
  auto it = attrs.find(std::string(name));
  if (it == attrs.end()) return dflt;
  if (const T* v = std::get_if<T>(&it->second)) return *v;
  return absl::InvalidArgumentError(
      absl::StrCat("op '", op, "': attribute '", name, "' must be ", type));
}

using Shapes = absl::StatusOr<std::vector<ShapeDtype>>;
using Ins = std::span<const ArrayRef>;
using Outs = std::span<const ArrayRef>;

absl::Status RankError(absl::string_view op, int i, const ArrayRef& a,
                       absl::string_view want) {
  return absl::InvalidArgumentError(absl::StrCat(
      "op '", op, "': input ", i, " is ", a.ToString(), ", expected ", want));
}

OpDef AddVectorsDef() {
  return {"add_vectors",
          2,
          {"block_size"},
          "out = x + y (f32 vectors)",
          [](const OpAttrs& at) -> absl::StatusOr<KernelOp> {
            AddVectorsOptions o;
            MESHDMA_ASSIGN_OR_RETURN(
                o.block_size,
                GetIntAttr(at, "add_vectors", "block_size", o.block_size));
            return make_kernel(
                [o](Ins in, Outs out) {
                  return AddVectors(in[0], in[1], out[0], o);
                },
                SameAsInput(0), "add_vectors", 2);
          }};
}

OpDef IotaDef() {
  return {
      "iota",
      0,
      {"n", "dtype", "block_size"},
      "out[i] = i; attrs n (required), dtype 'i32' (default) or 'f32'",
      [](const OpAttrs& at) -> absl::StatusOr<KernelOp> {
        IotaOptions o;
        MESHDMA_ASSIGN_OR_RETURN(
            o.block_size, GetIntAttr(at, "iota", "block_size", o.block_size));
        MESHDMA_ASSIGN_OR_RETURN(int64_t n, GetIntAttr(at, "iota", "n", -1));
        MESHDMA_ASSIGN_OR_RETURN(std::string dt,
                                 GetStringAttr(at, "iota", "dtype", "i32"));
        if (n < 0) {
          return absl::InvalidArgumentError(
              "op 'iota': attribute 'n' (a length >= 0) is required");
        }
        if (dt != "i32" && dt != "f32") {
          return absl::InvalidArgumentError(
              absl::StrCat("op 'iota': attribute 'dtype' is '", dt,
                           "'; 'i32' and 'f32' are supported"));
        }
        const DType dtype = dt == "i32" ? DType::kI32 : DType::kF32;
        return make_kernel([o](Ins, Outs out) { return Iota(out[0], o); },
                           [n, dtype](Ins) -> Shapes {
                             return std::vector<ShapeDtype>{{dtype, {n}}};
                           },
                           "iota", 0);
      }};
}

absl::StatusOr<Activation> ParseActivation(const std::string& s) {
  for (Activation a : {Activation::kNone, Activation::kRelu, Activation::kGelu,
                       Activation::kSilu}) {
    if (ActivationName(a) == s) return a;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("op 'matmul': attribute 'activation' is '", s,
                   "'; none, relu, gelu and silu are supported"));
}

OpDef MatmulDef() {
  return {
      "matmul",
      2,
      {"block_m", "block_n", "block_k", "activation"},
      "f32 [m, k] x [k, n] -> [m, n] with a fused activation",
      [](const OpAttrs& at) -> absl::StatusOr<KernelOp> {
        MatmulOptions o;
        MESHDMA_ASSIGN_OR_RETURN(
            o.block_m, GetIntAttr(at, "matmul", "block_m", o.block_m));
        MESHDMA_ASSIGN_OR_RETURN(
            o.block_n, GetIntAttr(at, "matmul", "block_n", o.block_n));
        MESHDMA_ASSIGN_OR_RETURN(
            o.block_k, GetIntAttr(at, "matmul", "block_k", o.block_k));
        MESHDMA_ASSIGN_OR_RETURN(
            std::string act, GetStringAttr(at, "matmul", "activation", "none"));
        MESHDMA_ASSIGN_OR_RETURN(o.activation, ParseActivation(act));
        return make_kernel(
            [o](Ins in, Outs out) { return Matmul(in[0], in[1], out[0], o); },
            [](Ins in) -> Shapes {
              if (in[0].rank() != 2)
                return RankError("matmul", 0, in[0], "[m, k]");
              if (in[1].rank() != 2)
                return RankError("matmul", 1, in[1], "[k, n]");
              return std::vector<ShapeDtype>{
                  {DType::kF32, {in[0].dim(0), in[1].dim(1)}}};
            },
            "matmul", 2);
      }};
}

OpDef SoftmaxDef() {
  return {"softmax",
          1,
          {"block_rows"},
          "row softmax of f32 [rows, cols]",
          [](const OpAttrs& at) -> absl::StatusOr<KernelOp> {
            SoftmaxOptions o;
            MESHDMA_ASSIGN_OR_RETURN(
                o.block_rows,
                GetIntAttr(at, "softmax", "block_rows", o.block_rows));
            return make_kernel(
                [o](Ins in, Outs out) { return Softmax(in[0], out[0], o); },
                SameAsInput(0), "softmax", 1);
          }};
}

absl::StatusOr<FlashAttentionOptions> FlashOptions(const OpAttrs& at,
                                                   const char* op) {
  FlashAttentionOptions o;
  MESHDMA_ASSIGN_OR_RETURN(o.block_q, GetIntAttr(at, op, "block_q", o.block_q));
  MESHDMA_ASSIGN_OR_RETURN(o.block_k, GetIntAttr(at, op, "block_k", o.block_k));
  MESHDMA_ASSIGN_OR_RETURN(o.causal, GetBoolAttr(at, op, "causal", false));
  if (at.count("sm_scale") != 0) {
    MESHDMA_ASSIGN_OR_RETURN(double s, GetFloatAttr(at, op, "sm_scale", 0));
    o.sm_scale = static_cast<float>(s);
  }
  return o;
}

OpDef FlashAttentionDef() {
  return {
      "flash_attention",
      3,
      {"block_q", "block_k", "causal", "sm_scale", "with_lse"},
      "q [B,H,Sq,D], k, v [B,Hkv,Skv,D] -> out (and f32 lse [B,H,Sq] "
      "with with_lse)",
      [](const OpAttrs& at) -> absl::StatusOr<KernelOp> {
        MESHDMA_ASSIGN_OR_RETURN(FlashAttentionOptions o,
                                 FlashOptions(at, "flash_attention"));
        MESHDMA_ASSIGN_OR_RETURN(
            bool with_lse,
            GetBoolAttr(at, "flash_attention", "with_lse", false));
        return make_kernel(
            [o, with_lse](Ins in, Outs out) {
              return FlashAttention(in[0], in[1], in[2], out[0], o,
                                    with_lse ? &out[1] : nullptr);
            },
            [with_lse](Ins in) -> Shapes {
              if (in[0].rank() != 4) {
                return RankError("flash_attention", 0, in[0], "[B, H, Sq, D]");
              }
              std::vector<ShapeDtype> s = {{in[0].dtype(), ShapeOf(in[0])}};
              if (with_lse) {
                s.push_back(
                    {DType::kF32, {in[0].dim(0), in[0].dim(1), in[0].dim(2)}});
              }
              return s;
            },
            "flash_attention", 3);
      }};
}

OpDef FlashAttentionBackwardDef() {
  return {
      "flash_attention_backward",
      6,
      {"block_q", "block_k", "causal", "sm_scale"},
      "(q, k, v, out, d_out, lse) -> (dq, dk, dv)",
      [](const OpAttrs& at) -> absl::StatusOr<KernelOp> {
        MESHDMA_ASSIGN_OR_RETURN(FlashAttentionOptions o,
                                 FlashOptions(at, "flash_attention_backward"));
        return make_kernel(
            [o](Ins in, Outs out) {
              return FlashAttentionBackward(in[0], in[1], in[2], in[3], in[4],
                                            in[5], out[0], out[1], out[2], o);
            },
            [](Ins in) -> Shapes {
              return std::vector<ShapeDtype>{{in[0].dtype(), ShapeOf(in[0])},
                                             {in[1].dtype(), ShapeOf(in[1])},
                                             {in[2].dtype(), ShapeOf(in[2])}};
            },
            "flash_attention_backward", 6);
      }};
}

OpDef PagedAttentionDef() {
  return {"paged_attention",
          5,
          {"pages_per_compute_block", "sm_scale"},
          "(query, key_cache, value_cache, context_lens, block_tables) -> out",
          [](const OpAttrs& at) -> absl::StatusOr<KernelOp> {
            PagedAttentionOptions o;
            MESHDMA_ASSIGN_OR_RETURN(
                o.pages_per_compute_block,
                GetIntAttr(at, "paged_attention", "pages_per_compute_block",
                           o.pages_per_compute_block));
            if (at.count("sm_scale") != 0) {
              MESHDMA_ASSIGN_OR_RETURN(
                  double s, GetFloatAttr(at, "paged_attention", "sm_scale", 0));
              o.sm_scale = static_cast<float>(s);
            }
            return make_kernel(
                [o](Ins in, Outs out) {
                  return PagedAttention(in[0], in[1], in[2], in[3], in[4],
                                        out[0], o);
                },
                SameAsInput(0), "paged_attention", 5);
          }};
}

struct Registry {
  std::mutex mu;
  std::map<std::string, OpDef, std::less<>> ops;
};

Registry& GetRegistry() {
  static Registry* r = [] {
    auto* reg = new Registry;
    for (OpDef def : {AddVectorsDef(), IotaDef(), MatmulDef(), SoftmaxDef(),
                      FlashAttentionDef(), FlashAttentionBackwardDef(),
                      PagedAttentionDef()}) {
      std::string name = def.name;
      reg->ops.emplace(std::move(name), std::move(def));
    }
    return reg;
  }();
  return *r;
}

}  // namespace
}  // namespace meshdma::kernels_internal

namespace meshdma {

absl::StatusOr<int64_t> GetIntAttr(const OpAttrs& attrs, absl::string_view op,
                                   absl::string_view name, int64_t dflt) {
  return kernels_internal::GetAttr<int64_t>(attrs, op, name, dflt,
                                            "an integer");
}
absl::StatusOr<double> GetFloatAttr(const OpAttrs& attrs, absl::string_view op,
                                    absl::string_view name, double dflt) {
  auto it = attrs.find(std::string(name));
  if (it != attrs.end()) {
    if (const int64_t* v = std::get_if<int64_t>(&it->second)) return *v;
  }
  return kernels_internal::GetAttr<double>(attrs, op, name, dflt, "a number");
}
absl::StatusOr<bool> GetBoolAttr(const OpAttrs& attrs, absl::string_view op,
                                 absl::string_view name, bool dflt) {
  return kernels_internal::GetAttr<bool>(attrs, op, name, dflt, "a bool");
}
absl::StatusOr<std::string> GetStringAttr(const OpAttrs& attrs,
                                          absl::string_view op,
                                          absl::string_view name,
                                          std::string dflt) {
  return kernels_internal::GetAttr<std::string>(attrs, op, name,
                                                std::move(dflt), "a string");
}

absl::Status RegisterOp(OpDef def) {
  if (def.name.empty() || !def.build) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RegisterOp: op '", def.name, "' needs a name and a build function"));
  }
  kernels_internal::Registry& r = kernels_internal::GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.ops.count(def.name) != 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("RegisterOp: op '", def.name, "' is already registered"));
  }
  std::string name = def.name;
  r.ops.emplace(std::move(name), std::move(def));
  return absl::OkStatus();
}

std::vector<std::string> RegisteredOps() {
  kernels_internal::Registry& r = kernels_internal::GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [name, def] : r.ops) names.push_back(name);
  return names;
}

absl::StatusOr<OpDef> FindOp(absl::string_view name) {
  kernels_internal::Registry& r = kernels_internal::GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.ops.find(std::string(name));
  if (it == r.ops.end()) {
    std::vector<std::string> names;
    for (const auto& [n, def] : r.ops) names.push_back(n);
    return absl::NotFoundError(absl::StrCat(
        "no op named '", name, "'; registered: ", absl::StrJoin(names, ", ")));
  }
  return it->second;
}

absl::StatusOr<std::vector<HostArray>> CallOp(absl::string_view name,
                                              std::span<const ArrayRef> inputs,
                                              const OpAttrs& attrs) {
  MESHDMA_ASSIGN_OR_RETURN(OpDef def, FindOp(name));
  if (def.num_inputs >= 0 &&
      static_cast<int>(inputs.size()) != def.num_inputs) {
    return absl::InvalidArgumentError(
        absl::StrCat("op '", name, "' takes ", def.num_inputs, " inputs, got ",
                     inputs.size()));
  }
  for (const auto& [attr, value] : attrs) {
    if (std::find(def.attrs.begin(), def.attrs.end(), attr) ==
        def.attrs.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("op '", name, "' has no attribute '", attr,
                       "'; it takes: ", absl::StrJoin(def.attrs, ", ")));
    }
  }
  MESHDMA_ASSIGN_OR_RETURN(KernelOp op, def.build(attrs));
  return op(inputs);
}

}  // namespace meshdma
