#include "meshdma/kernels/ops/flash_attention_backward.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
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
  int64_t b, h, hkv, group, sq, skv, d, bq, bk, nq, nk;
  float scale;
  bool causal;
  DType dtype;
  // Inputs of the masks, -1 when absent: the query's segment ids (the keys'
  // are the next input) and the bias.
  int q_segment_input = -1, ab_input = -1;
};

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Whether dV += P^T dO and dK += dS^T Q run in Gemm's row tiles, against P
// and dS transposed per tile: where the tiles run, d is a width they take,
// and key blocks are at most 128 rows. The tiles load and store the [bk, d]
// accumulator once per 64 query rows; at 256-row key blocks that costs more
// than OpenBLAS's packing of P^T (two alternated rounds each of
// `meshdma-bench-kernels --sections 7 --backward_blocks
// default,128x128[,128x256,256x128]` at head_dim 64 and 128: 4-7% faster at
// 128 x 128, 4-5% slower at 256 x 256, even at 128 x 256 and 256 x 128).
bool TransposedTiles(const Geometry& g) {
  return kernels_internal::RowTilesRun() &&
         g.d % kernels_internal::kRowTileColumns == 0 && g.bk <= 128;
}

// Row index of the last valid query of block i.
int64_t LastQuery(const Geometry& g, int64_t i) {
  return std::min(g.sq, (i + 1) * g.bq) - 1;
}
// Whether block (i, j) has any unmasked entry.
bool Needed(const Geometry& g, int64_t i, int64_t j) {
  return !g.causal || LastQuery(g, i) >= j * g.bk;
}
// The first query block key block j is needed by (causal).
int64_t FirstQueryBlock(const Geometry& g, int64_t j) {
  if (!g.causal) return 0;
  return std::min(g.nq - 1, (j * g.bk) / g.bq);
}

// Scratch of the kernel: 0 p[bq, bk], 1 ds[bq, bk], 2 delta[group, nq * bq]
// (rowsum(dO * O) of every query row of the group, at key block 0), 3 dk and
// 4 dv [bk, d] (the current key block's accumulators), 5 dq [group, sq, d]
// (the accumulators of every query row of the kv head's group), then
// widened copies of 6 q, 7 o, 8 d_out [bq, d], 9 k, 10 v [bk, d] (bf16/f16
// only), 11 scale * K^T and 12 V^T [d, bk] of the current key block (where
// the score products run in Gemm's row tiles), and 13 P^T and 14 (scale *
// dS)^T [bk, bq] of the tile (TransposedTiles).
enum : int {
  kP = 0,
  kDs,
  kDelta,
  kDk,
  kDv,
  kDq,
  kQf,
  kOf,
  kDof,
  kKf,
  kVf,
  kKt,
  kVt,
  kPt,
  kDst
};

std::vector<ScratchShape> Scratch(const Geometry& g) {
  const bool wide = g.dtype != DType::kF32;
  const bool tiles = kernels_internal::RowTilesRun();
  const bool transposed = TransposedTiles(g);
  return {VMEM({g.bq, g.bk}, DType::kF32),
          VMEM({g.bq, g.bk}, DType::kF32),
          VMEM({g.group, g.nq * g.bq}, DType::kF32),
          VMEM({g.bk, g.d}, DType::kF32),
          VMEM({g.bk, g.d}, DType::kF32),
          VMEM({g.group, g.sq, g.d}, DType::kF32),
          VMEM({wide ? g.bq : 1, g.d}, DType::kF32),
          VMEM({wide ? g.bq : 1, g.d}, DType::kF32),
          VMEM({wide ? g.bq : 1, g.d}, DType::kF32),
          VMEM({wide ? g.bk : 1, g.d}, DType::kF32),
          VMEM({wide ? g.bk : 1, g.d}, DType::kF32),
          VMEM({tiles ? g.d : 1, tiles ? g.bk : 1}, DType::kF32),
          VMEM({tiles ? g.d : 1, tiles ? g.bk : 1}, DType::kF32),
          VMEM({transposed ? g.bk : 1, transposed ? g.bq : 1}, DType::kF32),
          VMEM({transposed ? g.bk : 1, transposed ? g.bq : 1}, DType::kF32)};
}

float* F32(const KernelArgs& a, int scratch) {
  return a.scratch_buffer(scratch)->data_as<float>();
}

const float* Widen(const ArrayRef& block, float* buf, DType dtype) {
  if (dtype == DType::kF32) return block.data_as<float>();
  kernels_internal::ToFloat(block.data_as<uint16_t>(), buf,
                            block.num_elements(), dtype == DType::kBF16);
  return buf;
}

void StoreBlock(const float* src, const ArrayRef& dst, float alpha,
                DType dtype) {
  const int64_t n = dst.num_elements();
  if (dtype == DType::kF32) {
    float* o = dst.data_as<float>();
    for (int64_t i = 0; i < n; ++i) o[i] = alpha * src[i];
  } else if (dtype == DType::kBF16) {
    BFloat16* o = dst.data_as<BFloat16>();
    for (int64_t i = 0; i < n; ++i) o[i] = BFloat16(alpha * src[i]);
  } else {
    Half* o = dst.data_as<Half>();
    for (int64_t i = 0; i < n; ++i) o[i] = Half(alpha * src[i]);
  }
}

// The f32 operands of one (i, j) tile. Inputs are ordered q, k, v, o, d_out,
// lse in both kernels.
struct Tile {
  const float *q, *k, *v, *o, *dout, *lse;
  // scale * K^T and V^T (kKt, kVt), null where row tiles do not run.
  const float *kt, *vt;
};
Tile LoadTile(const Geometry& g, const KernelArgs& a) {
  return {Widen(a.input(0), F32(a, kQf), g.dtype),
          Widen(a.input(1), F32(a, kKf), g.dtype),
          Widen(a.input(2), F32(a, kVf), g.dtype),
          Widen(a.input(3), F32(a, kOf), g.dtype),
          Widen(a.input(4), F32(a, kDof), g.dtype),
          a.input(5).data_as<float>(),
          kernels_internal::RowTilesRun() ? F32(a, kKt) : nullptr,
          kernels_internal::RowTilesRun() ? F32(a, kVt) : nullptr};
}

// At a key block's first grid point, where row tiles run: scale * K^T and
// V^T of its valid rows, which every query block's products then read.
void TransposeKeyBlock(const Geometry& g, const KernelArgs& a) {
  if (!kernels_internal::RowTilesRun()) return;
  const int64_t kv_valid = a.in_valid(1, 0);
  kernels_internal::TransposeScaled(Widen(a.input(1), F32(a, kKf), g.dtype),
                                    kv_valid, g.d, g.scale, F32(a, kKt), g.bk);
  kernels_internal::TransposeScaled(Widen(a.input(2), F32(a, kVf), g.dtype),
                                    kv_valid, g.d, 1.0f, F32(a, kVt), g.bk);
}

// Calls fn(r0, rows, cols) for the strips of tile (i, j): query rows [r0, r0
// + rows) and the key columns [0, cols) some row of theirs sees. One strip
// of every row and valid key unless the causal diagonal crosses the tile.
template <typename Fn>
void ForEachStrip(const Geometry& g, int64_t i, int64_t j, int64_t kv_valid,
                  Fn&& fn) {
  auto cols_seen_by_rows_before = [&](int64_t row_end) {
    if (!g.causal) return kv_valid;
    return std::clamp<int64_t>(i * g.bq + row_end - j * g.bk, 0, kv_valid);
  };
  const bool crossed =
      cols_seen_by_rows_before(1) < cols_seen_by_rows_before(g.bq);
  const int64_t strip = crossed ? kernels_internal::kDiagonalStripRows : g.bq;
  for (int64_t r0 = 0; r0 < g.bq; r0 += strip) {
    const int64_t rows = std::min(strip, g.bq - r0);
    const int64_t cols = cols_seen_by_rows_before(r0 + rows);
    if (cols > 0) fn(r0, rows, cols);
  }
}

// P = exp(scale (Q K^T + ab) - lse) (masked entries 0) into scratch kP, and
// scale * dS = scale * P * (dO V^T - delta) into scratch kDs, strip by strip
// (only left of each strip's `cols`), where `delta` holds the tile's rows of
// rowsum(dO * O): computed at key block 0 (every query row sees it), read at
// the others. (dS comes scaled: dK and dQ are scale * dS^T Q and scale * dS
// K, products with alpha 1, which Gemm's row tiles take.)
void ProbsAndDs(const Geometry& g, const KernelArgs& a, const Tile& t,
                int64_t i, int64_t j, float* delta) {
  const int64_t bq = g.bq, bk = g.bk, d = g.d;
  float* p = F32(a, kP);
  float* ds = F32(a, kDs);
  const int64_t q_valid = a.in_valid(0, 0);
  const int64_t kv_valid = a.in_valid(1, 0);
  // Step 1: the scores, then the masks.
  ForEachStrip(g, i, j, kv_valid, [&](int64_t r0, int64_t rows, int64_t cols) {
    kernels_internal::ProductTransposed(rows, cols, d, g.scale, t.q + r0 * d,
                                        t.k, t.kt, bk, p + r0 * bk, bk);
  });
  kernels_internal::ApplyTileMasks(
      kernels_internal::TileMasksOf(a, g.q_segment_input, g.ab_input), g.scale,
      bq, bk, p);
  // Step 2: per row, the probabilities up to its last visible key, zeros
  // after; delta at key block 0.
  for (int64_t r = 0; r < bq; ++r) {
    float* row = p + r * bk;
    int64_t limit = r < q_valid && t.lse[r] != kNegInf ? kv_valid : 0;
    if (g.causal) limit = std::min(limit, i * bq + r - j * bk + 1);
    limit = std::max<int64_t>(limit, 0);
    if (limit > 0) kernels_internal::ExpShiftSum(row, limit, t.lse[r]);
    std::fill(row + limit, row + bk, 0.0f);
    if (j == 0) {
      float dot = 0;
      for (int64_t c = 0; c < d; ++c) dot += t.dout[r * d + c] * t.o[r * d + c];
      delta[r] = dot;
    }
  }
  // Step 3: scale * dS.
  ForEachStrip(g, i, j, kv_valid, [&](int64_t r0, int64_t rows, int64_t cols) {
    kernels_internal::ProductTransposed(rows, cols, d, 1.0f, t.dout + r0 * d,
                                        t.v, t.vt, bk, ds + r0 * bk, bk);
    for (int64_t r = r0; r < r0 + rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        ds[r * bk + c] = g.scale * p[r * bk + c] * (ds[r * bk + c] - delta[r]);
      }
    }
  });
}

// c[m, d] += a^T b, a [k, m] (leading dimension lda) and b [k, d]: in row
// tiles against `at` = a^T (leading dimension ld_at) where given, else by
// BLAS.
void AccumulateTransposedProduct(int64_t m, int64_t d, int64_t k,
                                 const float* a, int64_t lda, const float* at,
                                 int64_t ld_at, const float* b, float* c) {
  if (at != nullptr && kernels_internal::RowTileProduct(
                           m, d, k, 1.0f, at, ld_at, b, d, 1.0f, c, d)) {
    return;
  }
  Gemm(true, false, m, d, k, 1.0f, a, lda, b, d, 1.0f, c, d);
}

// The kernel, grid (b, kv head, key block j, t = head in group * nq + i).
// dK_j and dV_j accumulate over t and are stored when t ends; dQ of every
// query row of the group accumulates over (j, t) and is stored at the
// group's last grid point.
absl::Status BackwardBody(const Geometry& g, const KernelArgs& a) {
  const int64_t j = program_id(2), t = program_id(3);
  const int64_t head = t / g.nq, i = t % g.nq;
  const bool first_t = t == 0, last_t = t == num_programs(3) - 1;
  float* dk = F32(a, kDk);
  float* dv = F32(a, kDv);
  float* dq = F32(a, kDq);
  // Step 1: zero the accumulators that start here; a new key block is
  // transposed for the score products.
  if (first_t) {
    std::fill(dk, dk + g.bk * g.d, 0.0f);
    std::fill(dv, dv + g.bk * g.d, 0.0f);
    if (j == 0) std::fill(dq, dq + g.group * g.sq * g.d, 0.0f);
    TransposeKeyBlock(g, a);
  }
  // Step 2: the tile's P and scale * dS, then, strip by strip, its share of
  // every gradient (dQ only for the rows inside the sequence).
  if (Needed(g, i, j)) {
    const Tile tile = LoadTile(g, a);
    ProbsAndDs(g, a, tile, i, j, F32(a, kDelta) + (head * g.nq + i) * g.bq);
    const float* p = F32(a, kP);
    const float* ds = F32(a, kDs);
    const int64_t bq = g.bq, bk = g.bk, d = g.d, q_valid = a.in_valid(0, 0);
    float* dq_rows = dq + (head * g.sq + i * bq) * d;
    // P^T and (scale * dS)^T, for dV and dK in row tiles (TransposedTiles).
    float* pt = nullptr;
    float* dst = nullptr;
    if (TransposedTiles(g)) {
      pt = F32(a, kPt);
      dst = F32(a, kDst);
      kernels_internal::TransposeScaled(p, bq, bk, 1.0f, pt, bq);
      kernels_internal::TransposeScaled(ds, bq, bk, 1.0f, dst, bq);
    }
    ForEachStrip(
        g, i, j, a.in_valid(1, 0), [&](int64_t r0, int64_t rows, int64_t cols) {
          AccumulateTransposedProduct(cols, d, rows, p + r0 * bk, bk,
                                      pt == nullptr ? nullptr : pt + r0, bq,
                                      tile.dout + r0 * d, dv);
          AccumulateTransposedProduct(cols, d, rows, ds + r0 * bk, bk,
                                      dst == nullptr ? nullptr : dst + r0, bq,
                                      tile.q + r0 * d, dk);
          const int64_t dq_rows_here =
              std::clamp<int64_t>(q_valid - r0, 0, rows);
          Gemm(false, false, dq_rows_here, d, cols, 1.0f, ds + r0 * bk, bk,
               tile.k, d, 1.0f, dq_rows + r0 * d, d);
        });
  }
  // Step 3: store what ends here.
  if (last_t) {
    StoreBlock(dk, a.output(0), 1.0f, g.dtype);
    StoreBlock(dv, a.output(1), 1.0f, g.dtype);
    if (j == num_programs(2) - 1) StoreBlock(dq, a.output(2), 1.0f, g.dtype);
  }
  return absl::OkStatus();
}

template <typename... Parts>
absl::Status Error(const Parts&... parts) {
  return absl::InvalidArgumentError(
      absl::StrCat("kernel 'flash_attention_backward': ", parts...));
}

absl::Status CheckShape(const ArrayRef& a, const char* name, DType dtype,
                        std::initializer_list<int64_t> shape) {
  const bool ok = a.dtype() == dtype && a.rank() == int(shape.size()) &&
                  std::equal(shape.begin(), shape.end(), a.shape().begin());
  if (ok) return absl::OkStatus();
  std::string want;
  for (int64_t s : shape) absl::StrAppend(&want, want.empty() ? "" : ",", s);
  return Error(name, " is ", a.ToString(), ", expected ", DTypeName(dtype), "[",
               want, "]");
}

// The operands of FlashAttentionBackward, as its header states them.
absl::Status CheckOperands(const ArrayRef& q, const ArrayRef& k,
                           const ArrayRef& v, const ArrayRef& out,
                           const ArrayRef& d_out, const ArrayRef& lse,
                           const ArrayRef& dq, const ArrayRef& dk,
                           const ArrayRef& dv, const FlashAttentionMasks& m) {
  const DType dt = q.dtype();
  if (dt != DType::kF32 && dt != DType::kBF16 && dt != DType::kF16) {
    return Error("input 0 ('q') has dtype ", DTypeName(dt),
                 "; f32, bf16 and f16 are supported");
  }
  if (q.rank() != 4 || k.rank() != 4) {
    return Error("input 0 ('q') ", q.ToString(), " and input 1 ('k') ",
                 k.ToString(), " must be [B, H, Sq, D] and [B, Hkv, Skv, D]");
  }
  const int64_t b = q.dim(0), h = q.dim(1), sq = q.dim(2), d = q.dim(3);
  const int64_t hkv = k.dim(1), skv = k.dim(2);
  if (hkv == 0 || h % hkv != 0) {
    return Error("input 1 ('k') ", k.ToString(), " has ", hkv,
                 " kv heads; input 0 ('q') ", q.ToString(), " has ", h,
                 ", which must be a multiple");
  }
  if (b == 0 || sq == 0 || skv == 0 || d == 0) {
    return Error("empty input 0 ('q') ", q.ToString(), " or input 1 ('k') ",
                 k.ToString());
  }
  MESHDMA_RETURN_IF_ERROR(CheckShape(k, "input 1 ('k')", dt, {b, hkv, skv, d}));
  MESHDMA_RETURN_IF_ERROR(CheckShape(v, "input 2 ('v')", dt, {b, hkv, skv, d}));
  MESHDMA_RETURN_IF_ERROR(
      CheckShape(out, "input 3 ('out')", dt, {b, h, sq, d}));
  MESHDMA_RETURN_IF_ERROR(
      CheckShape(d_out, "input 4 ('d_out')", dt, {b, h, sq, d}));
  MESHDMA_RETURN_IF_ERROR(
      CheckShape(lse, "input 5 ('lse')", DType::kF32, {b, h, sq}));
  MESHDMA_RETURN_IF_ERROR(CheckShape(dq, "output 0 ('dq')", dt, {b, h, sq, d}));
  MESHDMA_RETURN_IF_ERROR(
      CheckShape(dk, "output 1 ('dk')", dt, {b, hkv, skv, d}));
  MESHDMA_RETURN_IF_ERROR(
      CheckShape(dv, "output 2 ('dv')", dt, {b, hkv, skv, d}));
  if ((m.q_segment_ids == nullptr) != (m.kv_segment_ids == nullptr)) {
    return Error("'q_segment_ids' and 'kv_segment_ids' come together");
  }
  if (m.q_segment_ids != nullptr) {
    MESHDMA_RETURN_IF_ERROR(
        CheckShape(*m.q_segment_ids, "'q_segment_ids'", DType::kI32, {b, sq}));
    MESHDMA_RETURN_IF_ERROR(CheckShape(*m.kv_segment_ids, "'kv_segment_ids'",
                                       DType::kI32, {b, skv}));
  }
  if (m.ab != nullptr) {
    MESHDMA_RETURN_IF_ERROR(
        CheckShape(*m.ab, "'ab'", DType::kF32, {b, h, sq, skv}));
  }
  return absl::OkStatus();
}

Geometry MakeGeometry(const ArrayRef& q, const ArrayRef& k,
                      const FlashAttentionOptions& o) {
  Geometry g;
  g.b = q.dim(0);
  g.h = q.dim(1);
  g.hkv = k.dim(1);
  g.group = g.h / g.hkv;
  g.sq = q.dim(2);
  g.skv = k.dim(2);
  g.d = q.dim(3);
  g.bq = std::min(o.block_q, g.sq);
  g.bk = std::min(o.block_k, g.skv);
  g.nq = CeilDiv(g.sq, g.bq);
  g.nk = CeilDiv(g.skv, g.bk);
  g.scale = o.sm_scale.value_or(1.0f / std::sqrt(static_cast<float>(g.d)));
  g.causal = o.causal;
  g.dtype = q.dtype();
  return g;
}

using G = std::span<const int64_t>;
using V = std::vector<int64_t>;
// Where a kernel's grid point reads: batch, query head, query block, key
// block.
using TileMap = std::function<std::array<int64_t, 4>(G)>;

// The inputs the kernel reads, in the order LoadTile expects, with their
// block specs from `tile`; then the masks' (setting their input indices).
// The kernel only reads them: whole blocks are read in place.
void AddInputs(const ArrayRef (&operands)[6], const FlashAttentionMasks& m,
               const TileMap& tile, Geometry& g, PallasCallParams& p,
               std::vector<ArrayRef>& ins) {
  const int64_t group = g.group;
  auto q_map = [tile](G x) {
    const auto t = tile(x);
    return V{t[0], t[1], t[2], 0};
  };
  auto k_map = [tile, group](G x) {
    const auto t = tile(x);
    return V{t[0], t[1] / group, t[3], 0};
  };
  auto lse_map = [tile](G x) {
    const auto t = tile(x);
    return V{t[0], t[1], t[2]};
  };
  const V q_block = {kSqueezed, kSqueezed, g.bq, g.d};
  const V k_block = {kSqueezed, kSqueezed, g.bk, g.d};
  p.in_specs = {{q_block, q_map}, {k_block, k_map},
                {k_block, k_map}, {q_block, q_map},
                {q_block, q_map}, {{kSqueezed, kSqueezed, g.bq}, lse_map}};
  p.input_names = {"q", "k", "v", "out", "d_out", "lse"};
  ins.assign(std::begin(operands), std::end(operands));
  if (m.q_segment_ids != nullptr) {
    g.q_segment_input = static_cast<int>(ins.size());
    ins.push_back(*m.q_segment_ids);
    ins.push_back(*m.kv_segment_ids);
    p.in_specs.push_back({{kSqueezed, g.bq}, [tile](G x) {
                            const auto t = tile(x);
                            return V{t[0], t[2]};
                          }});
    p.in_specs.push_back({{kSqueezed, g.bk}, [tile](G x) {
                            const auto t = tile(x);
                            return V{t[0], t[3]};
                          }});
    p.input_names.push_back("q_segment_ids");
    p.input_names.push_back("kv_segment_ids");
  }
  if (m.ab != nullptr) {
    g.ab_input = static_cast<int>(ins.size());
    ins.push_back(*m.ab);
    p.in_specs.push_back({{kSqueezed, kSqueezed, g.bq, g.bk}, [tile](G x) {
                            const auto t = tile(x);
                            return V{t[0], t[1], t[2], t[3]};
                          }});
    p.input_names.push_back("ab");
  }
  for (BlockSpec& spec : p.in_specs)
    spec.in_place = InPlace::kContiguous;  // Read-only.
}

}  // namespace

absl::Status FlashAttentionBackward(const ArrayRef& q, const ArrayRef& k,
                                    const ArrayRef& v, const ArrayRef& out,
                                    const ArrayRef& d_out, const ArrayRef& lse,
                                    const ArrayRef& dq, const ArrayRef& dk,
                                    const ArrayRef& dv,
                                    const FlashAttentionOptions& o,
                                    const FlashAttentionMasks& masks) {
  // Step 1: check every operand.
  MESHDMA_RETURN_IF_ERROR(
      CheckOperands(q, k, v, out, d_out, lse, dq, dk, dv, masks));
  if (o.block_q <= 0 || o.block_k <= 0) {
    return Error("blocks (", o.block_q, ", ", o.block_k, ") must be positive");
  }
  const Geometry geometry = MakeGeometry(q, k, o);
  const ArrayRef operands[6] = {q, k, v, out, d_out, lse};

  // Step 2: one kernel, grid (b, kv head, j, (head in group, i)). Query
  // blocks a key block does not need map to the first one it needs, so they
  // are not copied again.
  Geometry g = geometry;
  PallasCallParams p;
  std::vector<ArrayRef> ins;
  AddInputs(
      operands, masks,
      [g](G x) {
        const int64_t i = std::max(x[3] % g.nq, FirstQueryBlock(g, x[2]));
        return std::array<int64_t, 4>{x[0], x[1] * g.group + x[3] / g.nq, i,
                                      x[2]};
      },
      g, p, ins);
  p.name = "flash_attention_bwd";
  p.grid = {g.b, g.hkv, g.nk, g.group * g.nq};
  auto kv_map = [](G x) { return V{x[0], x[1], x[2], 0}; };
  auto group_map = [](G x) { return V{x[0], x[1], 0, 0}; };
  const V kv_block = {kSqueezed, kSqueezed, g.bk, g.d};
  p.out_specs = {{kv_block, kv_map},
                 {kv_block, kv_map},
                 {{kSqueezed, g.group, g.sq, g.d}, group_map}};
  for (BlockSpec& spec : p.out_specs)
    spec.in_place = InPlace::kContiguous;  // Written whole, once.
  p.scratch_shapes = Scratch(g);
  p.output_names = {"dk", "dv", "dq"};
  p.stats = o.stats;
  const ArrayRef outs[] = {dk, dv, dq};
  return pallas_call(
      p, [g](const KernelArgs& a) { return BackwardBody(g, a); }, ins, outs);
}

}  // namespace meshdma
