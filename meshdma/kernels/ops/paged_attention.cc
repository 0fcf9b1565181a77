#include "meshdma/kernels/ops/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/check.h"
#include "meshdma/kernels/internal/paged_rows.h"
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
  // The caches' rows are f32 with unit column stride: read in place.
  bool in_place;
  int64_t* pages_read;
};

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Scratch indices.
enum : int {
  kM = 0,  // f32[group]: running row max.
  kL,      // f32[group]: running row sum.
  kAcc,    // f32[group, d]: output accumulator.
  kS,      // f32[group, bt]: scores / probabilities.
  kQf,     // f32: widened query (bf16/f16).
  kStage,  // f32[bt, d]: a block's rows as f32 (unless read in place).
};

std::vector<ScratchShape> Scratch(const Geometry& g) {
  const bool wide = g.dtype != DType::kF32;
  return {VMEM({g.group}, DType::kF32),
          VMEM({g.group}, DType::kF32),
          VMEM({g.group, g.d}, DType::kF32),
          VMEM({g.group, g.bt}, DType::kF32),
          VMEM({wide ? g.group : 1, g.d}, DType::kF32),
          VMEM({g.in_place ? 1 : g.bt, g.d}, DType::kF32)};
}

float* F32(const KernelArgs& a, int scratch) {
  return a.scratch_buffer(scratch)->data_as<float>();
}

// A run as f32: itself, or widened into `buf`.
const float* Widen(const std::byte* data, float* buf, int64_t n, DType dtype) {
  if (dtype == DType::kF32) return reinterpret_cast<const float*>(data);
  kernels_internal::ToFloat(reinterpret_cast<const uint16_t*>(data), buf, n,
                            dtype == DType::kBF16);
  return buf;
}

float ElementAsFloat(const std::byte* p, DType dtype) {
  if (dtype == DType::kF32) return *reinterpret_cast<const float*>(p);
  if (dtype == DType::kBF16)
    return float(*reinterpret_cast<const BFloat16*>(p));
  return float(*reinterpret_cast<const Half*>(p));
}

// Page `page` of kv head `h` of `cache`, `rows` rows, as f32 rows of d
// floats at `out`: widened, or gathered where the columns are strided.
void StagePage(const Geometry& g, const ArrayRef& cache, int64_t h,
               int64_t page, int64_t rows, float* out) {
  const auto st = cache.strides();
  const int64_t esize = DTypeSize(g.dtype);
  const std::byte* base = cache.data() + (h * st[0] + page * st[1]) * esize;
  for (int64_t r = 0; r < rows; ++r) {
    const std::byte* row = base + r * st[2] * esize;
    float* dst = out + r * g.d;
    if (st[3] != 1) {
      for (int64_t c = 0; c < g.d; ++c) {
        dst[c] = ElementAsFloat(row + c * st[3] * esize, g.dtype);
      }
    } else if (g.dtype == DType::kF32) {
      std::memcpy(dst, row, g.d * sizeof(float));
    } else {
      Widen(row, dst, g.d, g.dtype);
    }
  }
}

struct Point {
  int64_t s, h, j;
};

// Tokens of compute block j of sequence s that it attends to (0: none).
int64_t Valid(const Geometry& g, const int32_t* lens, int64_t s, int64_t j) {
  return std::clamp<int64_t>(lens[s] - j * g.bt, 0, g.bt);
}

// The next grid point after `p` (row-major) whose block is active.
std::optional<Point> NextActive(const Geometry& g, const int32_t* lens,
                                Point p) {
  const int64_t nc = CeilDiv(g.pages_per_seq, g.ppcb);
  if (p.j + 1 < nc && Valid(g, lens, p.s, p.j + 1) > 0) {
    return Point{p.s, p.h, p.j + 1};
  }
  int64_t s = p.s, h = p.h + 1;
  for (;;) {
    if (h == g.num_kv_heads) {
      h = 0;
      ++s;
    }
    if (s == g.num_seqs) return std::nullopt;
    if (lens[s] > 0) return Point{s, h, 0};
    h = g.num_kv_heads;  // Sequence s is empty: skip all its heads.
  }
}

// Appends where the first `n` pages of block `p` of cache `c` (0: keys, 1:
// values) lie, in place.
void AppendPages(const Geometry& g, const KernelArgs& a, const int32_t* tables,
                 Point p, int c, int64_t n, std::vector<const float*>& out) {
  const ArrayRef& cache = a.input(1 + c);
  const auto st = cache.strides();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t page = tables[p.s * g.pages_per_seq + p.j * g.ppcb + i];
    out.push_back(cache.data_as<float>() + p.h * st[0] + page * st[1]);
  }
}

// Tells checked mode about the block's page reads (the body reads the ANY
// caches through raw pointers), and counts them.
void NotePageReads(const Geometry& g, const KernelArgs& a,
                   const int32_t* tables, Point p, int64_t n) {
  if (g.pages_read != nullptr) *g.pages_read += n;
  if (!RaceCheckingEnabled()) return;
  for (int c = 0; c < 2; ++c) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t page = tables[p.s * g.pages_per_seq + p.j * g.ppcb + i];
      absl::StatusOr<ArrayRef> ref = a.input(1 + c).At(p.h);
      if (ref.ok()) ref = ref->At(page);
      if (ref.ok()) AnnotateRead(*ref, "paged attention page read");
    }
  }
}

// Pages fetched ahead of the one computed on: enough to cover the memory's
// latency, few enough to stay in L1 beside the page in use.
constexpr int64_t kPagesAhead = 2;

// The key and value rows of block `p` (`valid` tokens), read in place: each
// fetches the pages kPagesAhead after its own in `order` (this block's keys,
// its values, then the next active block's first keys). `order` holds the
// pointers.
std::pair<kernels_internal::PagedRows, kernels_internal::PagedRows> InPlaceRows(
    const Geometry& g, const KernelArgs& a, const int32_t* lens,
    const int32_t* tables, Point p, int64_t valid,
    std::vector<const float*>& order) {
  const int64_t n = CeilDiv(valid, g.page_size);
  order.clear();
  AppendPages(g, a, tables, p, 0, n, order);
  AppendPages(g, a, tables, p, 1, n, order);
  if (const std::optional<Point> next = NextActive(g, lens, p)) {
    const int64_t next_pages =
        CeilDiv(Valid(g, lens, next->s, next->j), g.page_size);
    AppendPages(g, a, tables, *next, 0, std::min(kPagesAhead, next_pages),
                order);
  }
  const int64_t total = static_cast<int64_t>(order.size());
  const int64_t stride = a.input(1).strides()[2];
  auto rows = [&](int64_t first) {
    const int64_t ahead = first + kPagesAhead;
    return kernels_internal::PagedRows{order.data() + first,
                                       g.page_size,
                                       stride,
                                       valid,
                                       g.d,
                                       order.data() + ahead,
                                       std::min(n, total - ahead)};
  };
  return {rows(0), rows(n)};
}

// The rows of block `p` of cache `c` (`valid` tokens) widened or gathered
// into the staging buffer; `pages` holds the pointers.
kernels_internal::PagedRows StagedRows(const Geometry& g, const KernelArgs& a,
                                       const int32_t* tables, Point p, int c,
                                       int64_t valid,
                                       std::vector<const float*>& pages) {
  const int64_t n = CeilDiv(valid, g.page_size);
  pages.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t page = tables[p.s * g.pages_per_seq + p.j * g.ppcb + i];
    float* out = F32(a, kStage) + i * g.page_size * g.d;
    StagePage(g, a.input(1 + c), p.h, page,
              std::min(g.page_size, valid - i * g.page_size), out);
    pages[i] = out;
  }
  return {pages.data(), g.page_size, g.d, valid, g.d};
}

// The online softmax over one block's scores s [group, bt] (`valid` of
// them): capped (cap * tanh(S / cap)), new row maxima, P = exp(S - m) in
// place, the sums and accumulators rescaled.
void SoftmaxUpdate(const Geometry& g, const KernelArgs& a, int64_t valid) {
  float* m = F32(a, kM);
  float* l = F32(a, kL);
  float* acc = F32(a, kAcc);
  for (int64_t r = 0; r < g.group; ++r) {
    float* row = F32(a, kS) + r * g.bt;
    if (g.soft_cap > 0) {
      for (int64_t c = 0; c < valid; ++c)
        row[c] = g.soft_cap * std::tanh(row[c] / g.soft_cap);
    }
    const float m_new = std::max(m[r], kernels_internal::RowMax(row, valid));
    const float alpha = std::exp(m[r] - m_new);
    l[r] = alpha * l[r] + kernels_internal::ExpShiftSum(row, valid, m_new);
    if (alpha != 1.0f) kernels_internal::Scale(acc + r * g.d, g.d, alpha);
    m[r] = m_new;
  }
}

// One compute block, each key and value row read once from the caches for
// all the group's heads: S = scale * Q K^T, the online softmax, acc += P V.
void Compute(const Geometry& g, const KernelArgs& a, const int32_t* lens,
             const int32_t* tables, Point p) {
  const int64_t valid = Valid(g, lens, p.s, p.j);
  const float* q =
      g.dtype == DType::kF32 ? a.input(0).data_as<float>() : F32(a, kQf);
  float* s = F32(a, kS);
  NotePageReads(g, a, tables, p, CeilDiv(valid, g.page_size));
  std::vector<const float*> pages;
  if (g.in_place) {
    const auto [k, v] = InPlaceRows(g, a, lens, tables, p, valid, pages);
    kernels_internal::PagedScores(k, q, g.group, g.scale, s, g.bt);
    SoftmaxUpdate(g, a, valid);
    kernels_internal::PagedAccumulate(v, s, g.bt, g.group, F32(a, kAcc));
    return;
  }
  kernels_internal::PagedScores(StagedRows(g, a, tables, p, 0, valid, pages), q,
                                g.group, g.scale, s, g.bt);
  SoftmaxUpdate(g, a, valid);
  kernels_internal::PagedAccumulate(
      StagedRows(g, a, tables, p, 1, valid, pages), s, g.bt, g.group,
      F32(a, kAcc));
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
  const int32_t* lens = a.input(3).data_as<int32_t>();
  const int32_t* tables = a.input(4).data_as<int32_t>();
  // Step 1: a new (sequence, kv head): reset the online softmax and widen
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
  // Step 2: a block that holds tokens the sequence attends to: compute on
  // its pages where they lie.
  if (Valid(g, lens, p.s, p.j) > 0) Compute(g, a, lens, tables, p);
  // Step 3: the last compute block: out = acc / l.
  if (p.j == num_programs(2) - 1) WriteOutput(g, a);
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
  // Keys and values are read in place where their rows are f32 with unit
  // column stride, both caches laid out alike.
  g.in_place =
      dt == DType::kF32 && key_cache.strides()[3] == 1 &&
      std::equal(key_cache.strides().begin(), key_cache.strides().end(),
                 value_cache.strides().begin());
  g.pages_read = o.pages_read;
  if (g.pages_read != nullptr) *g.pages_read = 0;

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
  // It touches no other device's memory, and a decode device calls it alone
  // (inside KV transfer): no entry barrier.
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
