#include "python/csrc/fused_ops.h"

#include <ATen/ATen.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/fused/collective_matmul.h"
#include "meshdma/collectives/fused/kv_transfer.h"
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

// `t` as a kernel takes it: where `group` is given and `t` lies in its
// symmetric heap (`meshdma.torch.empty`), a symmetric view, which devices of
// other processes on this host read in place; else a view of its memory.
ArrayRef ViewOf(const at::Tensor& t,
                const ProcessGroupMeshdma* group = nullptr) {
  std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
  if (group != nullptr) {
    absl::StatusOr<ArrayRef> heap = group->HeapView(t, DType::kF32);
    if (heap.ok()) heap = heap->Reshape(shape);
    if (heap.ok()) return *heap;
  }
  absl::StatusOr<ArrayRef> ref =
      ArrayRef::FromPointer(t.data_ptr(), DType::kF32, shape);
  TORCH_CHECK_VALUE(ref.ok(), ref.status().message());
  return *ref;
}

// A group that is not the launch is a bad argument (ValueError); a kernel
// that ran and failed raises RuntimeError.
void Run(ProcessGroupMeshdma& group, const char* op,
         std::function<absl::Status()> kernel) {
  const absl::Status whole = group.RequireWholeLaunch(op);
  TORCH_CHECK_VALUE(whole.ok(), whole.message());
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
    return meshdma::AllGatherMatmul(ViewOf(xc, &group), ViewOf(wc),
                                    ViewOf(out));
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

std::tuple<at::Tensor, at::Tensor> RingAttention(
    ProcessGroupMeshdma& group, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, bool causal, c10::optional<double> sm_scale,
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
  // Step 2: one ring per batch element, in one device call; the rows'
  // log-sum-exp too (the backward's).
  at::Tensor out = at::empty_like(qc);
  at::Tensor lse = at::empty({qc.size(0), qc.size(1), qc.size(2)},
                             qc.options().dtype(at::kFloat));
  Run(group, op, [&]() -> absl::Status {
    for (int64_t b = 0; b < qc.size(0); ++b) {
      const ArrayRef lse_b = ViewOf(lse[b]);
      absl::Status s = meshdma::RingAttention(
          ViewOf(qc[b]), ViewOf(kc[b], &group), ViewOf(vc[b], &group),
          ViewOf(out[b]), options, &lse_b);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  });
  return {out, lse};
}

namespace {

// The options KvTransfer needs, read off the cache's shape (checked on the
// rank before anything runs; the pair compares them when it meets).
KvTransferOptions KvOptionsOf(const at::Tensor& cache, int me) {
  const char* op = "KvCacheTransfer";
  TORCH_CHECK_VALUE(cache.dim() == 6 && cache.size(1) == 2, "meshdma.", op,
                    " on rank ", me, ": 'cache' is ", cache.sizes(),
                    "; expected [num_layers, 2, num_kv_heads, total_pages, "
                    "page_size, head_dim]");
  KvTransferOptions o;
  o.role_axis = "x";  // The launch's mesh axis (process_device.h).
  o.num_layers = static_cast<int>(cache.size(0));
  o.num_kv_heads = cache.size(2);
  o.total_pages = cache.size(3);
  o.page_size = cache.size(4);
  o.head_dim = cache.size(5);
  return o;
}

// A callback's exception as the kernel's failure, naming the callback.
template <typename Fn>
absl::Status Guarded(const char* what, int64_t layer, Fn&& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("meshdma.KvCacheTransfer: ", what,
                                            "(layer ", layer,
                                            ") raised: ", e.what()));
  }
}

// Copies the prefill callback's tensor into staging slot `slot` ([num_kv_heads,
// seq_len, head_dim] float32).
absl::Status StageLayer(const at::Tensor& t, const ArrayRef& slot,
                        const char* name, int64_t layer) {
  const std::vector<int64_t> want(slot.shape().begin(), slot.shape().end());
  if (t.scalar_type() != at::kFloat || !t.device().is_cpu() ||
      t.sizes().vec() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "meshdma.KvCacheTransfer: prefill(layer ", layer, ") returned ", name,
        " of ", c10::toString(t.scalar_type()), " [",
        absl::StrJoin(t.sizes(), ", "), "]; expected a float32 CPU tensor [",
        absl::StrJoin(want, ", "), "] (num_kv_heads, seq_len, head_dim)"));
  }
  const at::Tensor c = t.contiguous();
  std::memcpy(slot.data(), c.data_ptr(), slot.size_bytes());
  return absl::OkStatus();
}

}  // namespace

void KvCacheTransfer(ProcessGroupMeshdma& group, const at::Tensor& cache,
                     int64_t seq_len, const at::Tensor& block_table,
                     const KvPrefillLayer& prefill,
                     const KvDecodeLayer& decode) {
  const char* op = "KvCacheTransfer";
  const int me = group.getRank();
  // Step 1: this rank's arguments, before anything is queued.
  const int half = group.getSize() / 2;
  TORCH_CHECK_VALUE(group.getSize() % 2 == 0, "meshdma.", op, " on rank ", me,
                    ": the group has ", group.getSize(),
                    " ranks; a KV-cache transfer pairs an even number (the "
                    "first half prefills, rank i for rank i + n/2)");
  const KvTransferOptions o =
      KvOptionsOf(Operand(cache, op, "cache", 6, me), me);
  absl::StatusOr<ArrayRef> heap = group.HeapView(cache, DType::kF32);
  TORCH_CHECK_VALUE(heap.ok(), "meshdma.", op, " on rank ", me,
                    ": 'cache' is not a tensor of meshdma's symmetric heap "
                    "(allocate it with meshdma.torch.zeros on both ranks)");
  absl::StatusOr<ArrayRef> cache_ref =
      heap->Reshape({o.num_layers, 2, o.num_kv_heads, o.total_pages,
                     o.page_size, o.head_dim});
  TORCH_CHECK_VALUE(cache_ref.ok(), cache_ref.status().message());
  const bool is_decode = me >= half;
  TORCH_CHECK_VALUE(is_decode || prefill, "meshdma.", op, " on rank ", me,
                    " (prefill): a prefill function is required");
  std::vector<int32_t> table;
  if (is_decode) {
    TORCH_CHECK_TYPE(
        block_table.scalar_type() == at::kInt && block_table.dim() == 1,
        "meshdma.", op, " on rank ", me, " (decode): 'block_table' is ",
        c10::toString(block_table.scalar_type()), " ", block_table.sizes(),
        "; expected int32 [pages]");
    const at::Tensor t = block_table.contiguous();
    table.assign(t.data_ptr<int32_t>(), t.data_ptr<int32_t>() + t.numel());
  }
  absl::Status request = CheckKvTransferRequest(seq_len, table, o, is_decode);
  TORCH_CHECK_VALUE(request.ok(), "meshdma.", op, " on rank ", me, ": ",
                    request.message());
  // Step 2: the pair's transfer, its callbacks on the device thread (the
  // binding released the GIL; the callbacks take it).
  PrefillLayerFn on_prefill = [&](int l, const ArrayRef& k,
                                  const ArrayRef& v) -> absl::Status {
    std::tuple<at::Tensor, at::Tensor> kv;
    MESHDMA_RETURN_IF_ERROR(Guarded("prefill", l, [&] { kv = prefill(l); }));
    MESHDMA_RETURN_IF_ERROR(StageLayer(std::get<0>(kv), k, "k", l));
    return StageLayer(std::get<1>(kv), v, "v", l);
  };
  DecodeLayerFn on_decode = [&](int l, const ArrayRef&,
                                const ArrayRef&) -> absl::Status {
    if (!decode) return absl::OkStatus();
    return Guarded("decode", l, [&] { decode(l, cache[l][0], cache[l][1]); });
  };
  Run(group, op, [&] {
    return KvTransfer(seq_len, table, *cache_ref, o, on_prefill, on_decode);
  });
}

}  // namespace meshdma::torch_backend
