#include "meshdma/kernels/ops/flash_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/kernels/blas.h"
#include "meshdma/kernels/internal/attention_masks.h"
#include "meshdma/kernels/internal/vector_math.h"

namespace meshdma {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Geometry {
  int64_t sq, skv, d, bq, bk;
  float scale;
  bool causal;
  DType dtype;
  int q_axis, k_axis;  // Grid axes of the query and key blocks.
  bool has_lse;
  // Inputs of the masks (FlashAttentionMasks), -1 when absent: the query's
  // segment ids (the keys' are the next input) and the bias.
  int q_segment_input = -1, ab_input = -1;
};

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The last key block query block `i` needs (causal), else the last block.
int64_t LastKeyBlock(const Geometry& g, int64_t i) {
  const int64_t nk = CeilDiv(g.skv, g.bk);
  if (!g.causal) return nk - 1;
  const int64_t last_q = std::min(g.sq, (i + 1) * g.bq) - 1;
  return std::min(nk - 1, last_q / g.bk);
}

// Scratch: 0 m[bq], 1 l[bq], 2 acc[bq, d], 3 s[bq, bk], 4 qf[bq, d],
// 5 kf[bk, d], 6 vf[bk, d] (4-6 widen bf16/f16 blocks), 7 kt[d, bk] (scale
// * K^T, where the score products run in Gemm's row tiles).
constexpr int kKt = 7;
std::vector<ScratchShape> Scratch(const Geometry& g) {
  const bool wide = g.dtype != DType::kF32;
  const bool tiles = kernels_internal::RowTilesRun();
  return {VMEM({g.bq}, DType::kF32),
          VMEM({g.bq}, DType::kF32),
          VMEM({g.bq, g.d}, DType::kF32),
          VMEM({g.bq, g.bk}, DType::kF32),
          VMEM({wide ? g.bq : 1, g.d}, DType::kF32),
          VMEM({wide ? g.bk : 1, g.d}, DType::kF32),
          VMEM({wide ? g.bk : 1, g.d}, DType::kF32),
          VMEM({tiles ? g.d : 1, tiles ? g.bk : 1}, DType::kF32)};
}

float* F32(const KernelArgs& a, int scratch) {
  return a.scratch_buffer(scratch)->data_as<float>();
}

// A block as f32: the VMEM block itself, or its widened copy.
const float* Widen(const ArrayRef& block, float* buf, int64_t n, DType dtype) {
  if (dtype == DType::kF32) return block.data_as<float>();
  kernels_internal::ToFloat(block.data_as<uint16_t>(), buf, n,
                            dtype == DType::kBF16);
  return buf;
}

// S[rows, c0 .. c0 + cols) = scale * Q K^T (q the rows' first, s their row
// of S), against `kt` (scale * K^T, made where row tiles run) or K.
void ScoreProduct(const Geometry& g, int64_t rows, int64_t c0, int64_t cols,
                  const float* q, const float* kp, const float* kt, float* s) {
  kernels_internal::ProductTransposed(
      rows, cols, g.d, g.scale, q, kp + c0 * g.d,
      kt == nullptr ? nullptr : kt + c0, g.bk, s + c0, g.bk);
}

// Step 2 of Body: S = scale * Q K^T for key block j and the online softmax
// update of m, l and acc. Only the key columns some row of a strip may see
// are multiplied and exponentiated: those of a ragged last block, and left of
// the causal diagonal. A block the diagonal crosses is taken in strips of
// kernels_internal::kDiagonalStripRows rows, so that part of it is skipped, and
// the rows that see all its columns in one product; the rest of S is never
// read.
void AccumulateKeyBlock(const Geometry& g, const KernelArgs& a, int64_t i,
                        int64_t j) {
  const int64_t bq = g.bq, bk = g.bk, d = g.d;
  float* m = F32(a, 0);
  float* l = F32(a, 1);
  float* acc = F32(a, 2);
  float* s = F32(a, 3);
  const float* qp =
      g.dtype == DType::kF32 ? a.input(0).data_as<float>() : F32(a, 4);
  const float* kp = Widen(a.input(1), F32(a, 5), bk * d, g.dtype);
  const float* vp = Widen(a.input(2), F32(a, 6), bk * d, g.dtype);
  const int64_t kv_valid = a.in_valid(1, 0);
  auto seen_by_rows_before = [&](int64_t row_end) {
    const int64_t cols =
        g.causal ? std::min(kv_valid, i * bq + row_end - j * bk) : kv_valid;
    return std::max<int64_t>(cols, 0);
  };
  const int64_t first_row_cols = seen_by_rows_before(1);
  const bool crossed = g.causal && first_row_cols < seen_by_rows_before(bq);
  const int64_t strip = crossed ? kernels_internal::kDiagonalStripRows : bq;
  // The columns every row sees (left of where the diagonal enters the block),
  // when a strip's worth or more, go in one product of all bq rows; each
  // strip adds its own columns after them.
  const int64_t shared =
      crossed && first_row_cols >= kernels_internal::kDiagonalStripRows
          ? first_row_cols
          : 0;
  auto strip_cols = [&](int64_t r0) {
    return seen_by_rows_before(std::min(bq, r0 + strip));
  };
  // The strips' products right of the shared columns: one per strip, but
  // one for all the rows from the first strip that sees every column (the
  // rows below the diagonal when query blocks are taller than key blocks).
  const int64_t all_cols = seen_by_rows_before(bq);
  auto for_each_strip = [&](auto&& product) {
    for (int64_t r0 = 0; r0 < bq; r0 += strip) {
      const int64_t cols = strip_cols(r0);
      const int64_t rows =
          cols == all_cols ? bq - r0 : std::min(strip, bq - r0);
      if (cols > shared) product(r0, rows, cols);
      if (cols == all_cols) return;
    }
  };
  // 2a: the scores (from scale * K^T's columns that some row sees, where
  // row tiles run), then the segment and bias masks.
  float* kt = nullptr;
  if (kernels_internal::RowTilesRun()) {
    kt = F32(a, kKt);
    kernels_internal::TransposeScaled(kp, all_cols, d, g.scale, kt, bk);
  }
  if (shared > 0) ScoreProduct(g, bq, 0, shared, qp, kp, kt, s);
  for_each_strip([&](int64_t r0, int64_t rows, int64_t cols) {
    ScoreProduct(g, rows, shared, cols - shared, qp + r0 * d, kp, kt,
                 s + r0 * bk);
  });
  kernels_internal::ApplyTileMasks(
      kernels_internal::TileMasksOf(a, g.q_segment_input, g.ab_input), g.scale,
      bq, bk, s);
  // 2b: per row, the running max and sum (P in place of S); then acc += P V,
  // the shared columns in one product.
  for (int64_t r = 0; r < bq; ++r) {
    float* row = s + r * bk;
    const int64_t cols = strip_cols(r / strip * strip);
    const int64_t limit = g.causal ? seen_by_rows_before(r + 1) : kv_valid;
    std::fill(row + limit, row + cols, kNegInf);
    kernels_internal::OnlineSoftmaxRow(row, cols, &m[r], &l[r], acc + r * d, d);
  }
  if (shared > 0) {
    Gemm(false, false, bq, d, shared, 1.0f, s, bk, vp, d, 1.0f, acc, d);
  }
  for_each_strip([&](int64_t r0, int64_t rows, int64_t cols) {
    Gemm(false, false, rows, d, cols - shared, 1.0f, s + r0 * bk + shared, bk,
         vp + shared * d, d, 1.0f, acc + r0 * d, d);
  });
}

// Step 3 of Body: O = acc / l in the output's dtype, and the log-sum-exp.
void WriteQueryBlock(const Geometry& g, const KernelArgs& a) {
  const float* m = F32(a, 0);
  const float* l = F32(a, 1);
  const float* acc = F32(a, 2);
  const int64_t d = g.d;
  const ArrayRef& o = a.output(0);
  for (int64_t r = 0; r < g.bq; ++r) {
    const float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;
    const float* src = acc + r * d;
    if (g.dtype == DType::kF32) {
      float* dst = o.data_as<float>() + r * d;
      for (int64_t c = 0; c < d; ++c) dst[c] = src[c] * inv;
    } else if (g.dtype == DType::kBF16) {
      BFloat16* dst = o.data_as<BFloat16>() + r * d;
      for (int64_t c = 0; c < d; ++c) dst[c] = BFloat16(src[c] * inv);
    } else {
      Half* dst = o.data_as<Half>() + r * d;
      for (int64_t c = 0; c < d; ++c) dst[c] = Half(src[c] * inv);
    }
  }
  if (g.has_lse) {
    float* lse = a.output(1).data_as<float>();
    for (int64_t r = 0; r < g.bq; ++r) {
      lse[r] = l[r] > 0 ? m[r] + std::log(l[r]) : kNegInf;
    }
  }
}

absl::Status Body(const Geometry& g, const KernelArgs& a) {
  const int64_t i = program_id(g.q_axis);
  const int64_t j = program_id(g.k_axis);
  // Step 1: a new query block: reset the running max, sum and accumulator,
  // and widen Q once.
  if (j == 0) {
    std::fill(F32(a, 0), F32(a, 0) + g.bq, kNegInf);
    std::fill(F32(a, 1), F32(a, 1) + g.bq, 0.0f);
    std::fill(F32(a, 2), F32(a, 2) + g.bq * g.d, 0.0f);
    if (g.dtype != DType::kF32) {
      Widen(a.input(0), F32(a, 4), g.bq * g.d, g.dtype);
    }
  }
  // Step 2: the key block's scores and softmax update, unless it lies wholly
  // above the causal diagonal.
  if (j <= LastKeyBlock(g, i)) AccumulateKeyBlock(g, a, i, j);
  // Step 3: after the last key block, the output.
  if (j == num_programs(g.k_axis) - 1) WriteQueryBlock(g, a);
  return absl::OkStatus();
}

absl::Status CheckDtype(DType t) {
  if (t == DType::kF32 || t == DType::kBF16 || t == DType::kF16) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("kernel 'flash_attention': input 0 ('q') has dtype ",
                   DTypeName(t), "; f32, bf16 and f16 are supported"));
}

Geometry MakeGeometry(int64_t sq, int64_t skv, int64_t d, DType dtype,
                      const FlashAttentionOptions& o) {
  Geometry g;
  g.sq = sq;
  g.skv = skv;
  g.d = d;
  g.bq = std::max<int64_t>(1, std::min(o.block_q, sq));
  g.bk = std::max<int64_t>(1, std::min(o.block_k, skv));
  g.scale = o.sm_scale.value_or(1.0f / std::sqrt(static_cast<float>(d)));
  g.causal = o.causal;
  g.dtype = dtype;
  return g;
}

}  // namespace

absl::StatusOr<Kernel> FlashAttentionKernel(int64_t sq, int64_t skv, int64_t d,
                                            DType dtype,
                                            const FlashAttentionOptions& o) {
  MESHDMA_RETURN_IF_ERROR(CheckDtype(dtype));
  if (o.block_q <= 0 || o.block_k <= 0 || sq <= 0 || skv <= 0 || d <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel 'flash_attention': sizes Sq=", sq, " Skv=", skv, " D=", d,
        " and blocks (", o.block_q, ", ", o.block_k, ") must be positive"));
  }
  Geometry g = MakeGeometry(sq, skv, d, dtype, o);
  g.q_axis = 0;
  g.k_axis = 1;
  g.has_lse = false;
  Kernel kernel;
  PallasCallParams& p = kernel.params;
  p.name = "flash_attention";
  p.grid = {CeilDiv(sq, g.bq), CeilDiv(skv, g.bk)};
  using G = std::span<const int64_t>;
  auto q_map = [](G x) { return std::vector<int64_t>{x[0], 0}; };
  auto k_map = [g](G x) {
    return std::vector<int64_t>{std::min(x[1], LastKeyBlock(g, x[0])), 0};
  };
  p.in_specs = {{{g.bq, d}, q_map}, {{g.bk, d}, k_map}, {{g.bk, d}, k_map}};
  for (BlockSpec& spec : p.in_specs)
    spec.in_place = InPlace::kContiguous;  // Read-only.
  p.out_specs = {{{g.bq, d}, q_map}};
  p.out_specs[0].in_place = InPlace::kContiguous;  // Written whole, once.
  p.out_shape = {{dtype, {sq, d}}};
  p.scratch_shapes = Scratch(g);
  p.input_names = {"q", "k", "v"};
  p.output_names = {"out"};
  p.stats = o.stats;
  kernel.body = [g](const KernelArgs& a) { return Body(g, a); };
  return kernel;
}

namespace {

template <typename... Parts>
absl::Status Error(const Parts&... parts) {
  return absl::InvalidArgumentError(
      absl::StrCat("kernel 'flash_attention': ", parts...));
}

// q [B, H, Sq, D]; k and v [B, Hkv, Skv, D] of q's dtype, H a multiple of Hkv.
absl::Status CheckOperands(const ArrayRef& q, const ArrayRef& k,
                           const ArrayRef& v) {
  MESHDMA_RETURN_IF_ERROR(CheckDtype(q.dtype()));
  if (q.rank() != 4)
    return Error("input 0 ('q') is ", q.ToString(), ", expected [B, H, Sq, D]");
  const int64_t b = q.dim(0), h = q.dim(1), d = q.dim(3);
  const std::pair<const ArrayRef*, const char*> kv[] = {{&k, "input 1 ('k')"},
                                                        {&v, "input 2 ('v')"}};
  for (const auto& [ref, name] : kv) {
    if (ref->dtype() != q.dtype()) {
      return Error(name, " is ", ref->ToString(), " but q is ", q.ToString());
    }
    if (ref->rank() != 4 || ref->dim(0) != b || ref->dim(3) != d ||
        ref->dim(1) == 0 || h % ref->dim(1) != 0 || ref->dim(2) != k.dim(2) ||
        ref->dim(1) != k.dim(1)) {
      return Error(name, " is ", ref->ToString(), "; with q ", q.ToString(),
                   " it must be [B, Hkv, Skv, D] with H a multiple of Hkv");
    }
  }
  if (q.dim(2) == 0 || k.dim(2) == 0 || d == 0)
    return Error("empty q ", q.ToString(), " or k ", k.ToString());
  return absl::OkStatus();
}

absl::Status CheckMask(const ArrayRef* mask, const char* name, DType dtype,
                       std::vector<int64_t> shape) {
  if (mask->dtype() == dtype &&
      std::equal(shape.begin(), shape.end(), mask->shape().begin(),
                 mask->shape().end())) {
    return absl::OkStatus();
  }
  std::string want;
  for (int64_t n : shape) absl::StrAppend(&want, want.empty() ? "" : ",", n);
  return Error("'", name, "' is ", mask->ToString(), ", expected ",
               DTypeName(dtype), "[", want, "]");
}

absl::Status CheckMasks(const ArrayRef& q, const ArrayRef& k,
                        const FlashAttentionMasks& m) {
  const int64_t b = q.dim(0), h = q.dim(1), sq = q.dim(2), skv = k.dim(2);
  if ((m.q_segment_ids == nullptr) != (m.kv_segment_ids == nullptr)) {
    return Error("'q_segment_ids' and 'kv_segment_ids' come together; only '",
                 m.q_segment_ids ? "q" : "kv", "_segment_ids' is given");
  }
  if (m.q_segment_ids != nullptr) {
    MESHDMA_RETURN_IF_ERROR(
        CheckMask(m.q_segment_ids, "q_segment_ids", DType::kI32, {b, sq}));
    MESHDMA_RETURN_IF_ERROR(
        CheckMask(m.kv_segment_ids, "kv_segment_ids", DType::kI32, {b, skv}));
  }
  if (m.ab != nullptr) {
    MESHDMA_RETURN_IF_ERROR(
        CheckMask(m.ab, "ab", DType::kF32, {b, h, sq, skv}));
  }
  return absl::OkStatus();
}

// Appends the masks' operands and block specs (grid (b, h, i, j)); key blocks
// above the causal diagonal repeat the last one needed, as k's do.
void AddMaskOperands(const FlashAttentionMasks& m, Geometry& g,
                     PallasCallParams& p, std::vector<ArrayRef>& ins) {
  using G = std::span<const int64_t>;
  using V = std::vector<int64_t>;
  auto key_block = [g](G x) { return std::min(x[3], LastKeyBlock(g, x[2])); };
  if (m.q_segment_ids != nullptr) {
    g.q_segment_input = static_cast<int>(ins.size());
    ins.push_back(*m.q_segment_ids);
    ins.push_back(*m.kv_segment_ids);
    p.in_specs.push_back({{kSqueezed, g.bq}, [](G x) {
                            return V{x[0], x[2]};
                          }});
    p.in_specs.push_back({{kSqueezed, g.bk}, [key_block](G x) {
                            return V{x[0], key_block(x)};
                          }});
    p.input_names.push_back("q_segment_ids");
    p.input_names.push_back("kv_segment_ids");
  }
  if (m.ab != nullptr) {
    g.ab_input = static_cast<int>(ins.size());
    ins.push_back(*m.ab);
    p.in_specs.push_back({{kSqueezed, kSqueezed, g.bq, g.bk}, [key_block](G x) {
                            return V{x[0], x[1], x[2], key_block(x)};
                          }});
    p.input_names.push_back("ab");
  }
}

}  // namespace

absl::Status FlashAttention(const ArrayRef& q, const ArrayRef& k,
                            const ArrayRef& v, const ArrayRef& out,
                            const FlashAttentionOptions& o, const ArrayRef* lse,
                            const FlashAttentionMasks& masks) {
  // Step 1: check the operands and the masks.
  MESHDMA_RETURN_IF_ERROR(CheckOperands(q, k, v));
  MESHDMA_RETURN_IF_ERROR(CheckMasks(q, k, masks));
  const int64_t b = q.dim(0), h = q.dim(1), sq = q.dim(2), d = q.dim(3);
  const int64_t skv = k.dim(2), group = h / k.dim(1);
  Geometry g = MakeGeometry(sq, skv, d, q.dtype(), o);
  g.q_axis = 2;
  g.k_axis = 3;
  g.has_lse = lse != nullptr;
  // Step 2: the grid (b, h, query block, key block) and the block specs.
  PallasCallParams p;
  p.name = "flash_attention";
  p.grid = {b, h, CeilDiv(sq, g.bq), CeilDiv(skv, g.bk)};
  using G = std::span<const int64_t>;
  auto q_map = [](G x) { return std::vector<int64_t>{x[0], x[1], x[2], 0}; };
  auto k_map = [g, group](G x) {
    return std::vector<int64_t>{x[0], x[1] / group,
                                std::min(x[3], LastKeyBlock(g, x[2])), 0};
  };
  const std::vector<int64_t> q_block = {kSqueezed, kSqueezed, g.bq, d};
  const std::vector<int64_t> k_block = {kSqueezed, kSqueezed, g.bk, d};
  p.in_specs = {{q_block, q_map}, {k_block, k_map}, {k_block, k_map}};
  p.input_names = {"q", "k", "v"};
  std::vector<ArrayRef> ins = {q, k, v};
  AddMaskOperands(masks, g, p, ins);
  for (BlockSpec& spec : p.in_specs)
    spec.in_place = InPlace::kContiguous;  // Read-only.
  // Step 3: the outputs: out, and the log-sum-exp when asked for.
  p.out_specs = {{q_block, q_map}};
  p.out_shape = {{q.dtype(), {b, h, sq, d}}};
  p.output_names = {"out"};
  std::vector<ArrayRef> outs = {out};
  if (lse != nullptr) {
    p.out_specs.push_back({{kSqueezed, kSqueezed, g.bq}, [](G x) {
                             return std::vector<int64_t>{x[0], x[1], x[2]};
                           }});
    p.out_shape.push_back({DType::kF32, {b, h, sq}});
    p.output_names.push_back("lse");
    outs.push_back(*lse);
  }
  for (BlockSpec& spec : p.out_specs)
    spec.in_place = InPlace::kContiguous;  // Written whole, once.
  p.scratch_shapes = Scratch(g);
  p.stats = o.stats;
  return pallas_call(
      p, [g](const KernelArgs& a) { return Body(g, a); }, ins, outs);
}

}  // namespace meshdma
