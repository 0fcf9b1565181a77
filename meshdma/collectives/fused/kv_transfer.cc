#include "meshdma/collectives/fused/kv_transfer.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/semaphore.h"
#include "meshdma/dma/symmetric_memory.h"
#include "meshdma/dma/trace.h"
#include "meshdma/kernels/ops/paged_attention.h"

namespace meshdma {

namespace {

// The collective id whose BARRIER semaphore carries the prefill device's
// announcement; the collectives' id, which they signal only once every
// device of the mesh has entered them (docs/semantics.md §5).
constexpr int kKvTransferCollectiveId = kMaxCollectiveIds - 1;

std::vector<int64_t> KvCacheShape(const KvTransferOptions& o) {
  return {o.num_layers,  2,           o.num_kv_heads,
          o.total_pages, o.page_size, o.head_dim};
}

// Words before the block table in a table mailbox: the call number and the
// table's length.
constexpr int64_t kTableHeaderWords = 2;

// A device's state for its pair, for the rest of the Run:
// - on the prefill device, the mailbox for its decode device's block tables
//   (step 1): persistent memory, so that after the pair's first call a
//   table may land in it before the prefill device has entered the call it
//   is for. One table at a time suffices: the decode device pushes call
//   m + 1's table only after all of call m's pages have arrived, and the
//   prefill device reads call m's table before any of them leaves. (Every
//   device allocates it, in the same sequence of persistent allocations.)
// - on the prefill device, the staging slots, kept from call to call as the
//   cache is: fresh memory for each call pays its page faults inside the
//   call (16 MiB at 1,024 tokens; BENCHMARKS.md, "KV-cache transfer: calls
//   as a server makes them").
struct PairState {
  std::string role_axis;
  int64_t total_pages = 0;
  ArrayRef table_words;     // int32 [kTableHeaderWords + total_pages].
  Semaphore table_arrived;  // DMA: the bytes of a table pushed there.
  int64_t calls = 0;  // This pair's communicating calls so far in the Run.
  std::unique_ptr<float[]> stage;  // Uninitialised; grows as needed.
  int64_t stage_elems = 0;
};

// This device thread's pair states for the current Run, one per (role axis,
// cache size) it has called KvTransfer with; forgotten when the Run ends.
thread_local std::vector<std::unique_ptr<PairState>>* t_pairs = nullptr;

// The state for calls with `o`: allocated by the first such call of the
// Run, in the same sequence on every device (each calls KvTransfer with the
// same options).
absl::StatusOr<PairState*> PairStateFor(const KvTransferOptions& o) {
  if (t_pairs != nullptr) {
    for (auto& p : *t_pairs) {
      if (p->role_axis == o.role_axis && p->total_pages == o.total_pages) {
        return p.get();
      }
    }
  }
  auto p = std::make_unique<PairState>();
  p->role_axis = o.role_axis;
  p->total_pages = o.total_pages;
  const int64_t shape[] = {kTableHeaderWords + o.total_pages};
  MESHDMA_ASSIGN_OR_RETURN(
      p->table_words,
      AllocatePersistent(DType::kI32, shape, "kv_transfer table"));
  MESHDMA_ASSIGN_OR_RETURN(
      SemaphoreArray arrived,
      AllocatePersistentSemaphores(SemaphoreType::kDma, 1,
                                   "kv_transfer table_arrived"));
  p->table_arrived = arrived[0];
  if (t_pairs == nullptr) {
    t_pairs = new std::vector<std::unique_ptr<PairState>>();
    MESHDMA_RETURN_IF_ERROR(AtRunEnd([] {
      delete t_pairs;
      t_pairs = nullptr;
    }));
  }
  t_pairs->push_back(std::move(p));
  return t_pairs->back().get();
}

}  // namespace

absl::StatusOr<ArrayRef> AllocateKvCache(const KvTransferOptions& options) {
  return AllocateSymmetric<float>(KvCacheShape(options));
}

absl::Status KvTransfer(int64_t seq_len, std::span<const int32_t> block_table,
                        const ArrayRef& cache, const KvTransferOptions& o,
                        const PrefillLayerFn& prefill,
                        const DecodeLayerFn& decode) {
  auto err = [](auto&&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel 'kv_transfer': ", parts...));
  };
  MESHDMA_RETURN_IF_ERROR(CheckOverlapMode("kv_transfer", o.mode));
  MESHDMA_ASSIGN_OR_RETURN(int role, axis_index(o.role_axis));
  MESHDMA_ASSIGN_OR_RETURN(int roles, axis_size(o.role_axis));
  if (roles != 2) {
    return err("mesh axis '", o.role_axis, "' has size ", roles,
               "; it must be 2 (prefill, decode)");
  }
  const int64_t hkv = o.num_kv_heads, d = o.head_dim, ps = o.page_size;
  const int64_t pages = (seq_len + ps - 1) / ps;
  const int layers = o.num_layers;
  if (seq_len <= 0 || hkv <= 0 || d <= 0 || ps <= 0 || layers <= 0) {
    return err("seq_len ", seq_len, ", num_kv_heads ", hkv, ", head_dim ", d,
               ", page_size ", ps, " and num_layers ", layers,
               " must be positive");
  }
  if (o.total_pages < pages) {
    return err("the decode cache has ", o.total_pages,
               " pages per layer; the prompt of ", seq_len, " tokens needs ",
               pages, " pages of ", ps);
  }
  const std::vector<int64_t> cache_shape = KvCacheShape(o);
  if (cache.dtype() != DType::kF32 ||
      !std::ranges::equal(cache.shape(), cache_shape) ||
      !cache.is_contiguous() || !cache.is_symmetric()) {
    return err("the cache is ", cache.ToString(),
               cache.is_symmetric() ? "" : " outside the symmetric heap",
               "; the options need a contiguous symmetric f32[",
               absl::StrJoin(cache_shape, ","),
               "] (num_layers, key/value, num_kv_heads, total_pages, "
               "page_size, head_dim), as AllocateKvCache gives");
  }
  const bool is_decode = role == 1;
  if (is_decode) {
    if (static_cast<int64_t>(block_table.size()) != pages) {
      return err("block_table has ", block_table.size(), " entries; ", seq_len,
                 " tokens in pages of ", ps, " need ", pages);
    }
    for (int32_t p : block_table) {
      if (p < 0 || p >= o.total_pages) {
        return err("block_table names page ", p, " of a cache of ",
                   o.total_pages, " pages");
      }
    }
  }
  // The peer: same coordinates, the other role.
  const DeviceId peer = DeviceId::Partial({{{o.role_axis}, 1 - role}});
  const int64_t layer_bytes = 2 * hkv * seq_len * d * 4;

  // No barrier across the mesh at entry: each pair meets on its own. The
  // table lands in persistent memory, and the decode device's allocations
  // exist once its block table arrives, so no DMA lands in a scope that is
  // not there yet (step 1).
  return RunKernel(
      {.name = "kv_transfer",
       .entry_barrier = false,
       .collective_id = kKvTransferCollectiveId},
      [&]() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(PairState * pair, PairStateFor(o));
        // Symmetric allocations, the same sequence on both roles.
        MESHDMA_ASSIGN_OR_RETURN(
            SemaphoreArray send,
            AllocateSemaphoreArray(SemaphoreType::kDma, 2, "send"));
        MESHDMA_ASSIGN_OR_RETURN(
            SemaphoreArray layer_recv,
            AllocateSemaphoreArray(SemaphoreType::kDma, layers, "layer_recv"));
        MESHDMA_ASSIGN_OR_RETURN(
            Semaphore table_send,
            AllocateSemaphore(SemaphoreType::kDma, "table_send"));
        // The table as it travels: this call's number, its length, then the
        // pages (the decode device's; the prefill device only waits for it).
        const int64_t call = Communicates(o.mode) ? pair->calls++ : -1;
        const int64_t table_words = kTableHeaderWords + pages;
        std::vector<int32_t> table_local(table_words);
        table_local[0] = static_cast<int32_t>(call);
        table_local[1] = static_cast<int32_t>(pages);
        if (is_decode) {
          std::ranges::copy(block_table,
                            table_local.begin() + kTableHeaderWords);
        }
        MESHDMA_ASSIGN_OR_RETURN(
            ArrayRef table_src,
            ArrayRef::FromPointer(table_local.data(), DType::kI32,
                                  std::vector<int64_t>{table_words}));
        MESHDMA_ASSIGN_OR_RETURN(ArrayRef table,
                                 pair->table_words.Slice(0, 0, table_words));
        AsyncCopyDescriptor table_copy = make_async_remote_copy(
            table_src, table, table_send, pair->table_arrived, peer);

        MESHDMA_ASSIGN_OR_RETURN(Semaphore entered, get_barrier_semaphore());
        if (is_decode) {
          // Step 1: hand the prefill device the block table; in the pair's
          // first call of the Run, once it has entered this call (its
          // mailbox exists from then on). (A mode that moves nothing meets
          // no peer.)
          if (Communicates(o.mode)) {
            if (call == 0) {
              MESHDMA_RETURN_IF_ERROR(semaphore_wait(entered, 1));
            }
            MESHDMA_RETURN_IF_ERROR(table_copy.start());
            MESHDMA_RETURN_IF_ERROR(table_copy.wait_send());
          }
          // Step 3: consume each layer as soon as its bytes are here.
          for (int l = 0; l < layers; ++l) {
            MESHDMA_ASSIGN_OR_RETURN(ArrayRef layer_cache, cache.At(l));
            if (Communicates(o.mode)) {
              // A wait-only descriptor of the layer's byte count.
              MESHDMA_ASSIGN_OR_RETURN(
                  ArrayRef layer_flat,
                  layer_cache.Reshape({2 * hkv * o.total_pages * ps * d}));
              MESHDMA_ASSIGN_OR_RETURN(ArrayRef expected,
                                       layer_flat.Slice(0, 0, layer_bytes / 4));
              AsyncCopyDescriptor arrival = make_async_remote_copy(
                  expected, expected, send[0], layer_recv[l], peer);
              MESHDMA_RETURN_IF_ERROR(arrival.wait_recv());
            }
            if (Computes(o.mode)) {
              TraceSpan span(absl::StrCat("decode layer ", l));
              MESHDMA_RETURN_IF_ERROR(
                  decode(l, *layer_cache.At(0), *layer_cache.At(1)));
            }
          }
          return absl::OkStatus();
        }

        // Prefill. Step 1: in the pair's first call of the Run, announce
        // it. The decode device's block table is taken when the first pages
        // leave, so that it travels while layer 0 is computed.
        if (call == 0) {
          MESHDMA_RETURN_IF_ERROR(semaphore_signal(entered, 1, peer));
        }
        bool have_table = false;
        auto take_table = [&]() -> absl::Status {
          if (have_table) return absl::OkStatus();
          have_table = true;
          // The table lands as one DMA, so once its header's bytes are
          // counted the whole table is here: a table of another length
          // fails at once instead of waiting for bytes that never come.
          auto wait_words = [&](int64_t start, int64_t words) -> absl::Status {
            MESHDMA_ASSIGN_OR_RETURN(ArrayRef part,
                                     table.Slice(0, start, words));
            return make_async_remote_copy(part, part, table_send,
                                          pair->table_arrived, peer)
                .wait_recv();
          };
          MESHDMA_RETURN_IF_ERROR(wait_words(0, kTableHeaderWords));
          const int32_t* header = table.data_as<int32_t>();
          if (header[0] != static_cast<int32_t>(call) || header[1] != pages) {
            return absl::FailedPreconditionError(absl::StrCat(
                "the decode device's block table is for its call ", header[0],
                " of this Run, of ", header[1],
                " pages; this prefill device is in call ", call, ", of ", pages,
                " pages (both must call KvTransfer alike)"));
          }
          return wait_words(kTableHeaderWords, pages);
        };
        const int32_t* dst_page = table.data_as<int32_t>() + kTableHeaderWords;
        // Two staging slots, left uninitialised: `prefill` writes every
        // element before a DMA reads it (kCommunicationOnly moves whatever
        // they hold; its results are not the kernel's). No DMA of an
        // earlier call reads them any more: each call waits for its sends.
        const int64_t stage_elems = 2 * 2 * hkv * seq_len * d;
        if (pair->stage_elems < stage_elems) {
          pair->stage.reset();
          pair->stage = std::make_unique_for_overwrite<float[]>(stage_elems);
          pair->stage_elems = stage_elems;
        }
        MESHDMA_ASSIGN_OR_RETURN(
            ArrayRef stage,
            ArrayRef::FromPointer(pair->stage.get(), DType::kF32,
                                  std::vector<int64_t>{2, 2, hkv, seq_len, d}));
        // A wait-only descriptor for one layer's sends from staging slot
        // `slot`.
        auto layer_sent = [&](int slot) -> absl::Status {
          MESHDMA_ASSIGN_OR_RETURN(ArrayRef flat,
                                   stage.Reshape({2, 2 * hkv * seq_len * d}));
          AsyncCopyDescriptor sent = make_async_remote_copy(
              *flat.At(slot), *flat.At(slot), send[slot], layer_recv[0], peer);
          return sent.wait_send();
        };
        for (int l = 0; l < layers; ++l) {
          const int slot = l % 2;
          // Step 2a: staging slot `slot` is free once layer l - 2 has been
          // read.
          if (Communicates(o.mode) && l >= 2 &&
              o.mode != OverlapMode::kSequential) {
            MESHDMA_RETURN_IF_ERROR(layer_sent(slot));
          }
          MESHDMA_ASSIGN_OR_RETURN(ArrayRef slot_kv, stage.At(slot));
          // Step 2b: compute this layer's keys and values.
          if (Computes(o.mode)) {
            TraceSpan span(absl::StrCat("prefill layer ", l));
            MESHDMA_RETURN_IF_ERROR(prefill(l, *slot_kv.At(0), *slot_kv.At(1)));
          }
          if (!Communicates(o.mode)) continue;
          MESHDMA_RETURN_IF_ERROR(take_table());
          // Step 2c: stream its pages into the decode cache, one DMA per run
          // of prompt pages that the block table puts on consecutive cache
          // pages: that run's rows are contiguous in every kv head of the
          // cache as in the staging slot, so keys and values of every head
          // travel as one strided copy.
          MESHDMA_ASSIGN_OR_RETURN(ArrayRef layer_cache, cache.At(l));
          MESHDMA_ASSIGN_OR_RETURN(
              ArrayRef cache_rows,
              layer_cache.Reshape({2, hkv, o.total_pages * ps, d}));
          for (int64_t p0 = 0, p1 = 1; p0 < pages; p0 = p1++) {
            while (p1 < pages && dst_page[p1] == int64_t{dst_page[p1 - 1]} + 1)
              ++p1;
            const int64_t rows = std::min(p1 * ps, seq_len) - p0 * ps;
            const int64_t src_start[] = {0, 0, p0 * ps, 0};
            const int64_t dst_start[] = {0, 0, dst_page[p0] * ps, 0};
            const int64_t sizes[] = {2, hkv, rows, d};
            MESHDMA_ASSIGN_OR_RETURN(ArrayRef src,
                                     slot_kv.Block(src_start, sizes));
            MESHDMA_ASSIGN_OR_RETURN(ArrayRef dst,
                                     cache_rows.Block(dst_start, sizes));
            AsyncCopyDescriptor copy = make_async_remote_copy(
                src, dst, send[slot], layer_recv[l], peer);
            MESHDMA_RETURN_IF_ERROR(copy.start());
          }
          if (o.mode == OverlapMode::kSequential) {
            MESHDMA_RETURN_IF_ERROR(layer_sent(slot));
          }
        }
        // Step 4: the last (up to two) layers' sends.
        if (Communicates(o.mode) && o.mode != OverlapMode::kSequential) {
          for (int l = std::max(0, layers - 2); l < layers; ++l) {
            MESHDMA_RETURN_IF_ERROR(layer_sent(l % 2));
          }
        }
        return absl::OkStatus();
      });
}

absl::StatusOr<std::vector<float>> DecodePagedAttention(
    const float* query, int64_t num_heads, const ArrayRef& key_cache,
    const ArrayRef& value_cache, int64_t context_len,
    std::span<const int32_t> block_table, float scale) {
  const int64_t d = key_cache.dim(3);
  const int64_t pages = static_cast<int64_t>(block_table.size());
  std::vector<float> q(query, query + num_heads * d);
  std::vector<float> out(num_heads * d, 0.0f);
  std::vector<int32_t> lens = {static_cast<int32_t>(context_len)};
  std::vector<int32_t> table(block_table.begin(), block_table.end());
  MESHDMA_ASSIGN_OR_RETURN(
      ArrayRef q_ref,
      ArrayRef::FromPointer(q.data(), DType::kF32,
                            std::vector<int64_t>{1, num_heads, d}));
  MESHDMA_ASSIGN_OR_RETURN(
      ArrayRef o_ref,
      ArrayRef::FromPointer(out.data(), DType::kF32,
                            std::vector<int64_t>{1, num_heads, d}));
  MESHDMA_ASSIGN_OR_RETURN(
      ArrayRef lens_ref,
      ArrayRef::FromPointer(lens.data(), DType::kI32, std::vector<int64_t>{1}));
  MESHDMA_ASSIGN_OR_RETURN(
      ArrayRef table_ref,
      ArrayRef::FromPointer(table.data(), DType::kI32,
                            std::vector<int64_t>{1, pages}));
  PagedAttentionOptions options;
  options.sm_scale = scale;
  options.pages_per_compute_block =
      std::min<int64_t>(4, std::max<int64_t>(1, pages));
  MESHDMA_RETURN_IF_ERROR(PagedAttention(q_ref, key_cache, value_cache,
                                         lens_ref, table_ref, o_ref, options));
  return out;
}

}  // namespace meshdma
