#include "meshdma/kernels/ops/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/kernels/blas.h"
#include "meshdma/kernels/internal/vector_math.h"

namespace meshdma {
namespace {

constexpr char kName[] = "paged_attention";

struct Geometry {
  int64_t num_seqs, num_kv_heads, group, d;
  int64_t page_size, pages_per_seq, ppcb;
  int64_t bt;  // Tokens per compute block: ppcb * page_size.
  float scale;
  float soft_cap;  // 0: none.
  DType dtype;
  int64_t* pages_copied;
};

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Scratch indices.
enum : int {
  kM = 0,  // f32[group]: running row max.
  kL,      // f32[group]: running row sum.
  kAcc,    // f32[group, d]: output accumulator.
  kS,      // f32[group, bt]: scores / probabilities.
  kKBuf,   // dtype[2, bt, d]: double-buffered key pages.
  kVBuf,   // dtype[2, bt, d]: double-buffered value pages.
  kQf,     // f32: widened query (bf16/f16).
  kKf,     // f32: widened key block.
  kVf,     // f32: widened value block.
  kState,  // i32[2] SMEM: {slot of the current block, prefetched?}.
  kSems,   // DMA[4]: key slot 0/1, value slot 0/1.
};

std::vector<ScratchShape> Scratch(const Geometry& g) {
  const bool wide = g.dtype != DType::kF32;
  return {VMEM({g.group}, DType::kF32),
          VMEM({g.group}, DType::kF32),
          VMEM({g.group, g.d}, DType::kF32),
          VMEM({g.group, g.bt}, DType::kF32),
          VMEM({2, g.bt, g.d}, g.dtype),
          VMEM({2, g.bt, g.d}, g.dtype),
          VMEM({wide ? g.group : 1, g.d}, DType::kF32),
          VMEM({wide ? g.bt : 1, g.d}, DType::kF32),
          VMEM({wide ? g.bt : 1, g.d}, DType::kF32),
          SMEM({2}, DType::kI32),
          SemaphoreShape(SemaphoreType::kDma, 4)};
}

float* F32(const KernelArgs& a, int scratch) {
  return a.scratch_buffer(scratch)->data_as<float>();
}

// A block as f32: itself, or widened into `buf`.
const float* Widen(const std::byte* data, float* buf, int64_t n, DType dtype) {
  if (dtype == DType::kF32) return reinterpret_cast<const float*>(data);
  kernels_internal::ToFloat(reinterpret_cast<const uint16_t*>(data), buf, n,
                            dtype == DType::kBF16);
  return buf;
}

struct Point {
  int64_t s, h, j;
};

// Whether compute block j of sequence s holds any token it attends to.
bool Active(const Geometry& g, const int32_t* lens, int64_t s, int64_t j) {
  return j * g.bt < lens[s];
}

// The next grid point after `p` (row-major) whose block is active.
std::optional<Point> NextActive(const Geometry& g, const int32_t* lens,
                                Point p) {
  const int64_t nc = CeilDiv(g.pages_per_seq, g.ppcb);
  if (p.j + 1 < nc && Active(g, lens, p.s, p.j + 1)) {
    return Point{p.s, p.h, p.j + 1};
  }
  int64_t s = p.s, h = p.h + 1;
  for (;;) {
    if (h == g.num_kv_heads) {
      h = 0;
      ++s;
    }
    if (s == g.num_seqs) return std::nullopt;
    if (Active(g, lens, s, 0)) return Point{s, h, 0};
    h = g.num_kv_heads;  // Sequence s is empty: skip all its heads.
  }
}

// Starts (or waits for) the page copies of block `p` into buffer `slot`: one
// async copy per page of each cache, each counted on that slot's semaphore.
absl::Status PageCopies(const Geometry& g, const KernelArgs& a,
                        const int32_t* lens, const int32_t* tables, Point p,
                        int slot, bool start) {
  MESHDMA_ASSIGN_OR_RETURN(SemaphoreArray sems, a.semaphores(kSems));
  const int64_t used_pages = CeilDiv(lens[p.s], g.page_size);
  const int64_t first = p.j * g.ppcb;
  const int64_t n = std::min(g.ppcb, used_pages - first);
  for (int c = 0; c < 2; ++c) {
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef cache, a.input(1 + c).At(p.h));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef buf, a.scratch_buffer(kKBuf + c));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef dst_block, buf.At(slot));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t page = tables[p.s * g.pages_per_seq + first + i];
      MESHDMA_ASSIGN_OR_RETURN(ArrayRef src, cache.At(page));
      MESHDMA_ASSIGN_OR_RETURN(
          ArrayRef dst, dst_block.Slice(0, i * g.page_size, g.page_size));
      auto copy = make_async_copy(src, dst, sems[2 * c + slot]);
      if (start) {
        MESHDMA_RETURN_IF_ERROR(copy.start());
        if (g.pages_copied != nullptr && c == 0) ++*g.pages_copied;
      } else {
        MESHDMA_RETURN_IF_ERROR(copy.wait());
      }
    }
  }
  return absl::OkStatus();
}

// One compute block: S = scale * Q K^T over its valid tokens (capped: cap *
// tanh(S / cap)), then the online softmax update of m, l and acc with P V.
void Compute(const Geometry& g, const KernelArgs& a, int slot, int64_t valid) {
  const int64_t group = g.group, d = g.d, bt = g.bt;
  float* m = F32(a, kM);
  float* l = F32(a, kL);
  float* acc = F32(a, kAcc);
  float* s = F32(a, kS);
  const int64_t esize = DTypeSize(g.dtype);
  const std::byte* kdata =
      a.scratch_buffer(kKBuf)->data() + slot * bt * d * esize;
  const std::byte* vdata =
      a.scratch_buffer(kVBuf)->data() + slot * bt * d * esize;
  const float* qp =
      g.dtype == DType::kF32 ? a.input(0).data_as<float>() : F32(a, kQf);
  const float* kp = Widen(kdata, F32(a, kKf), valid * d, g.dtype);
  const float* vp = Widen(vdata, F32(a, kVf), valid * d, g.dtype);
  Gemm(false, true, group, valid, d, g.scale, qp, d, kp, d, 0.0f, s, bt);
  for (int64_t r = 0; r < group; ++r) {
    float* row = s + r * bt;
    if (g.soft_cap > 0) {
      for (int64_t c = 0; c < valid; ++c)
        row[c] = g.soft_cap * std::tanh(row[c] / g.soft_cap);
    }
    const float m_new = std::max(m[r], kernels_internal::RowMax(row, valid));
    const float alpha = std::exp(m[r] - m_new);
    l[r] = alpha * l[r] + kernels_internal::ExpShiftSum(row, valid, m_new);
    if (alpha != 1.0f) kernels_internal::Scale(acc + r * d, d, alpha);
    m[r] = m_new;
  }
  Gemm(false, false, group, d, valid, 1.0f, s, bt, vp, d, 1.0f, acc, d);
}

void WriteOutput(const Geometry& g, const KernelArgs& a) {
  const float* l = F32(a, kL);
  const float* acc = F32(a, kAcc);
  const ArrayRef& o = a.output(0);
  for (int64_t r = 0; r < g.group; ++r) {
    const float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;
    const float* src = acc + r * g.d;
    for (int64_t c = 0; c < g.d; ++c) {
      const float v = src[c] * inv;
      if (g.dtype == DType::kF32) {
        o.data_as<float>()[r * g.d + c] = v;
      } else if (g.dtype == DType::kBF16) {
        o.data_as<BFloat16>()[r * g.d + c] = BFloat16(v);
      } else {
        o.data_as<Half>()[r * g.d + c] = Half(v);
      }
    }
  }
}

absl::Status Body(const Geometry& g, const KernelArgs& a) {
  const Point p{program_id(0), program_id(1), program_id(2)};
  const int64_t nc = num_programs(2);
  const int32_t* lens = a.input(3).data_as<int32_t>();
  const int32_t* tables = a.input(4).data_as<int32_t>();
  int32_t* state = a.scratch_buffer(kState)->data_as<int32_t>();
  // Step 1: the first grid point: no copy is in flight yet.
  if (p.s == 0 && p.h == 0 && p.j == 0) {
    state[0] = 0;
    state[1] = 0;
  }
  // Step 2: a new (sequence, kv head): reset the online softmax and widen
  // the query heads once.
  if (p.j == 0) {
    std::fill(F32(a, kM), F32(a, kM) + g.group,
              -std::numeric_limits<float>::infinity());
    std::fill(F32(a, kL), F32(a, kL) + g.group, 0.0f);
    std::fill(F32(a, kAcc), F32(a, kAcc) + g.group * g.d, 0.0f);
    if (g.dtype != DType::kF32) {
      Widen(a.input(0).data(), F32(a, kQf), g.group * g.d, g.dtype);
    }
  }
  // Step 3: an active block: make sure its pages are on the way, start the
  // next active block's pages into the other buffer, wait for ours, compute.
  if (Active(g, lens, p.s, p.j)) {
    const int slot = state[0];
    if (state[1] == 0) {
      MESHDMA_RETURN_IF_ERROR(PageCopies(g, a, lens, tables, p, slot, true));
    }
    const std::optional<Point> next = NextActive(g, lens, p);
    if (next.has_value()) {
      MESHDMA_RETURN_IF_ERROR(
          PageCopies(g, a, lens, tables, *next, 1 - slot, true));
    }
    MESHDMA_RETURN_IF_ERROR(PageCopies(g, a, lens, tables, p, slot, false));
    Compute(g, a, slot, std::min(g.bt, lens[p.s] - p.j * g.bt));
    state[0] = next.has_value() ? 1 - slot : slot;
    state[1] = next.has_value() ? 1 : 0;
  }
  // Step 4: the last compute block: out = acc / l.
  if (p.j == nc - 1) WriteOutput(g, a);
  return absl::OkStatus();
}

template <typename... Parts>
absl::Status Error(const Parts&... parts) {
  return absl::InvalidArgumentError(
      absl::StrCat("kernel '", kName, "': ", parts...));
}

// The operands' shapes and dtypes, the options, and the data the body
// trusts: every length in range, every page it will copy inside the cache.
absl::Status CheckOperands(const ArrayRef& q, const ArrayRef& key_cache,
                           const ArrayRef& value_cache,
                           const ArrayRef& context_lens,
                           const ArrayRef& block_tables,
                           const PagedAttentionOptions& o) {
  const DType dt = q.dtype();
  if (dt != DType::kF32 && dt != DType::kBF16 && dt != DType::kF16) {
    return Error("input 0 ('query') has dtype ", DTypeName(dt),
                 "; f32, bf16 and f16 are supported");
  }
  if (q.rank() != 3 || q.dim(0) == 0 || q.dim(1) == 0 || q.dim(2) == 0) {
    return Error("input 0 ('query') is ", q.ToString(),
                 ", expected non-empty [num_seqs, num_heads, head_dim]");
  }
  const int64_t num_seqs = q.dim(0), h = q.dim(1), d = q.dim(2);
  const std::pair<const ArrayRef*, const char*> caches[] = {
      {&key_cache, "input 1 ('key_cache')"},
      {&value_cache, "input 2 ('value_cache')"}};
  for (const auto& [ref, name] : caches) {
    if (ref->dtype() != dt) {
      return Error(name, " is ", ref->ToString(), " but query is ",
                   q.ToString());
    }
    if (ref->rank() != 4 || ref->dim(3) != d || ref->dim(0) == 0 ||
        ref->dim(1) == 0 || ref->dim(2) == 0) {
      return Error(name, " is ", ref->ToString(), "; with query ", q.ToString(),
                   " it must be [num_kv_heads, total_pages, page_size, ", d,
                   "]");
    }
  }
  if (value_cache.shape().size() != key_cache.shape().size() ||
      !std::equal(key_cache.shape().begin(), key_cache.shape().end(),
                  value_cache.shape().begin())) {
    return Error("input 2 ('value_cache') is ", value_cache.ToString(),
                 " but input 1 ('key_cache') is ", key_cache.ToString());
  }
  const int64_t hkv = key_cache.dim(0), total_pages = key_cache.dim(1),
                page_size = key_cache.dim(2);
  if (h % hkv != 0) {
    return Error("input 0 ('query') has ", h, " heads, not a multiple of the ",
                 hkv, " kv heads of input 1 ('key_cache') ",
                 key_cache.ToString());
  }
  if (context_lens.dtype() != DType::kI32 || context_lens.rank() != 1 ||
      context_lens.dim(0) != num_seqs) {
    return Error("input 3 ('context_lens') is ", context_lens.ToString(),
                 ", expected i32[", num_seqs, "]");
  }
  if (block_tables.dtype() != DType::kI32 || block_tables.rank() != 2 ||
      block_tables.dim(0) != num_seqs || block_tables.dim(1) == 0) {
    return Error("input 4 ('block_tables') is ", block_tables.ToString(),
                 ", expected i32[", num_seqs, ", pages_per_sequence > 0]");
  }
  if (o.pages_per_compute_block <= 0) {
    return Error("pages_per_compute_block is ", o.pages_per_compute_block,
                 ", must be positive");
  }
  if (o.logits_soft_cap.has_value() && !(*o.logits_soft_cap > 0)) {
    return Error("logits_soft_cap is ", *o.logits_soft_cap,
                 ", must be positive (or unset)");
  }
  const int64_t pps = block_tables.dim(1);
  auto lens = *Ref<int32_t>::Of(context_lens);
  auto tables = *Ref<int32_t>::Of(block_tables);
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t len = lens(s);
    if (len < 0 || len > pps * page_size) {
      return Error("input 3 ('context_lens')[", s, "] = ", len,
                   " is outside [0, pages_per_sequence * page_size = ", pps,
                   " * ", page_size, "]");
    }
    for (int64_t i = 0; i < CeilDiv(len, page_size); ++i) {
      const int64_t page = tables(s, i);
      if (page < 0 || page >= total_pages) {
        return Error("input 4 ('block_tables')[", s, ", ", i, "] = ", page,
                     " is outside the ", total_pages,
                     " pages of input 1 ('key_cache') ", key_cache.ToString());
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status PagedAttention(const ArrayRef& q, const ArrayRef& key_cache,
                            const ArrayRef& value_cache,
                            const ArrayRef& context_lens,
                            const ArrayRef& block_tables, const ArrayRef& out,
                            const PagedAttentionOptions& o) {
  // Step 1: check the operands and the tables.
  MESHDMA_RETURN_IF_ERROR(
      CheckOperands(q, key_cache, value_cache, context_lens, block_tables, o));
  const DType dt = q.dtype();
  const int64_t num_seqs = q.dim(0), h = q.dim(1), d = q.dim(2);
  const int64_t hkv = key_cache.dim(0), page_size = key_cache.dim(2);
  const int64_t pps = block_tables.dim(1);
  // Step 2: the geometry and the pallas_call.
  Geometry g;
  g.num_seqs = num_seqs;
  g.num_kv_heads = hkv;
  g.group = h / hkv;
  g.d = d;
  g.page_size = page_size;
  g.pages_per_seq = pps;
  g.ppcb = std::min(o.pages_per_compute_block, pps);
  g.bt = g.ppcb * page_size;
  g.scale = o.sm_scale.value_or(1.0f / std::sqrt(static_cast<float>(d)));
  g.soft_cap = o.logits_soft_cap.value_or(0.0f);
  g.dtype = dt;
  g.pages_copied = o.pages_copied;
  if (g.pages_copied != nullptr) *g.pages_copied = 0;

  PallasCallParams p;
  p.name = kName;
  p.grid = {num_seqs, hkv, CeilDiv(pps, g.ppcb)};
  using G = std::span<const int64_t>;
  auto q_map = [](G x) { return std::vector<int64_t>{x[0], x[1], 0}; };
  const BlockSpec q_spec{{kSqueezed, g.group, d}, q_map};
  const BlockSpec smem{{}, {}, MemorySpace::kSmem};
  p.in_specs = {q_spec, AnySpec(), AnySpec(), smem, smem};
  p.out_specs = {q_spec};
  p.out_shape = {{dt, {num_seqs, h, d}}};
  p.scratch_shapes = Scratch(g);
  // Its DMA semaphores serve local page gathers only, and a decode device
  // calls it alone (inside KV transfer): no entry barrier.
  p.entry_barrier = false;
  p.input_names = {"query", "key_cache", "value_cache", "context_lens",
                   "block_tables"};
  p.output_names = {"out"};
  p.stats = o.stats;
  const ArrayRef ins[] = {q, key_cache, value_cache, context_lens,
                          block_tables};
  return pallas_call(p, [g](const KernelArgs& a) { return Body(g, a); }, ins,
                     {&out, 1});
}

}  // namespace meshdma
