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

// The words before the block table in a table mailbox: what the prefill
// device checks against its own call before it moves a byte (a pair that
// calls KvTransfer differently fails at once, naming the field).
struct TableHeader {
  static constexpr int kWords = 9;
  static constexpr const char* kNames[kWords] = {"call number",
                                                 "prompt pages",
                                                 "cache offset (low word)",
                                                 "cache offset (high word)",
                                                 "num_layers",
                                                 "num_kv_heads",
                                                 "head_dim",
                                                 "page_size",
                                                 "total_pages"};
  int32_t words[kWords];

  static TableHeader Of(int64_t call, int64_t pages, const ArrayRef& cache,
                        const KvTransferOptions& o) {
    const uint64_t offset = static_cast<uint64_t>(cache.heap_offset());
    return {{static_cast<int32_t>(call), static_cast<int32_t>(pages),
             static_cast<int32_t>(offset & 0xffffffffu),
             static_cast<int32_t>(offset >> 32), o.num_layers,
             static_cast<int32_t>(o.num_kv_heads),
             static_cast<int32_t>(o.head_dim),
             static_cast<int32_t>(o.page_size),
             static_cast<int32_t>(o.total_pages)}};
  }
  // OK when `arrived` (the decode device's) matches this prefill device's.
  absl::Status Check(const int32_t* arrived) const {
    for (int i = 0; i < kWords; ++i) {
      if (arrived[i] == words[i]) continue;
      return absl::FailedPreconditionError(absl::StrCat(
          "the decode device's call has ", kNames[i], " ", arrived[i],
          " where this prefill device's has ", words[i],
          " (both devices of a pair must call KvTransfer alike, on caches "
          "allocated alike)"));
    }
    return absl::OkStatus();
  }
};
constexpr int64_t kTableHeaderWords = TableHeader::kWords;

// A device's state for its pair, for the rest of the Run:
// - on the prefill device, the mailbox for its decode device's block tables
//   (step 1): persistent memory, so that after the pair's first call a
//   table may land in it before the prefill device has entered the call it
//   is for. One table at a time suffices: the decode device pushes call
//   m + 1's table only after all of call m's pages have arrived, and the
//   prefill device reads call m's table before any of them leaves. (Every
//   device allocates it, in the same sequence of persistent allocations.)
// - on the prefill device, the staging slots, kept from call to call as the
//   cache is: fresh memory for each call would pay its page faults inside
//   the call (4 MiB at 256 tokens, 16 MiB at 1,024 with
//   `meshdma-bench-kv`'s default sizes).
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

// The arguments of one call, checked (step 1 of KvTransfer).
absl::Status CheckKvTransferArguments(int64_t seq_len,
                                      std::span<const int32_t> block_table,
                                      const ArrayRef& cache,
                                      const KvTransferOptions& o, int roles,
                                      bool is_decode) {
  if (roles < 2 || roles % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel 'kv_transfer': mesh axis '", o.role_axis, "' has size ", roles,
        "; it must be even: its first half prefills, its second half "
        "decodes"));
  }
  MESHDMA_RETURN_IF_ERROR(
      CheckKvTransferRequest(seq_len, block_table, o, is_decode));
  const std::vector<int64_t> cache_shape = KvCacheShape(o);
  if (cache.dtype() != DType::kF32 ||
      !std::ranges::equal(cache.shape(), cache_shape) ||
      !cache.is_contiguous() || !cache.is_symmetric()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel 'kv_transfer': the cache is ", cache.ToString(),
        cache.is_symmetric() ? "" : " outside the symmetric heap",
        "; the options need a contiguous symmetric f32[",
        absl::StrJoin(cache_shape, ","),
        "] (num_layers, key/value, num_kv_heads, total_pages, page_size, "
        "head_dim), as AllocateKvCache gives"));
  }
  return absl::OkStatus();
}

// One call of a pair, inside its kernel: the checked arguments and the
// call's symmetric allocations (the same sequence on both roles).
struct PairCall {
  PairCall(const KvTransferOptions& options, const ArrayRef& decode_cache,
           int64_t prompt_len, int peer_index)
      : o(options),
        cache(decode_cache),
        seq_len(prompt_len),
        pages((prompt_len + options.page_size - 1) / options.page_size),
        layer_bytes(2 * options.num_kv_heads * prompt_len * options.head_dim *
                    4),
        peer(DeviceId::Partial({{{options.role_axis}, peer_index}})) {}

  const KvTransferOptions& o;
  const ArrayRef& cache;
  const int64_t seq_len;
  const int64_t pages;
  const int64_t layer_bytes;  // One layer's keys and values of the prompt.
  const DeviceId peer;        // The other half's device at the same place.
  PairState* pair = nullptr;
  int64_t call = -1;  // The pair's call number (-1: a mode that moves none).
  TableHeader header = {};
  SemaphoreArray send;        // Per staging slot: its DMAs have read it.
  SemaphoreArray layer_recv;  // Per layer: its bytes arrived at decode.
  Semaphore table_send;
  ArrayRef table;  // The prefill device's mailbox, this call's length.
  Semaphore entered;

  // The call's allocations, and its number within the pair.
  absl::Status Allocate() {
    MESHDMA_ASSIGN_OR_RETURN(pair, PairStateFor(o));
    MESHDMA_ASSIGN_OR_RETURN(
        send, AllocateSemaphoreArray(SemaphoreType::kDma, 2, "send"));
    MESHDMA_ASSIGN_OR_RETURN(
        layer_recv, AllocateSemaphoreArray(SemaphoreType::kDma, o.num_layers,
                                           "layer_recv"));
    MESHDMA_ASSIGN_OR_RETURN(
        table_send, AllocateSemaphore(SemaphoreType::kDma, "table_send"));
    MESHDMA_ASSIGN_OR_RETURN(
        table, pair->table_words.Slice(0, 0, kTableHeaderWords + pages));
    MESHDMA_ASSIGN_OR_RETURN(entered, get_barrier_semaphore());
    call = Communicates(o.mode) ? pair->calls++ : -1;
    header = TableHeader::Of(call, pages, cache, o);
    return absl::OkStatus();
  }
  // A wait-only descriptor of `array`'s bytes on `sem` and `recv`.
  AsyncCopyDescriptor Counting(const ArrayRef& array, Semaphore sem,
                               Semaphore recv) const {
    return make_async_remote_copy(array, array, sem, recv, peer);
  }
};

// The decode side: hands over the block table, then consumes each layer as
// soon as its bytes are here (steps 1 and 3 of the protocol).
absl::Status RunDecode(PairCall& c, std::span<const int32_t> block_table,
                       const DecodeLayerFn& decode) {
  const KvTransferOptions& o = c.o;
  // Step 1: the table as it travels (the header, then the pages), pushed
  // into the prefill device's mailbox; in the pair's first call of the Run,
  // once the prefill device has entered (its mailbox exists from then on).
  if (Communicates(o.mode)) {
    std::vector<int32_t> words(kTableHeaderWords + c.pages);
    std::ranges::copy(c.header.words, words.begin());
    std::ranges::copy(block_table, words.begin() + kTableHeaderWords);
    MESHDMA_ASSIGN_OR_RETURN(
        ArrayRef src,
        ArrayRef::FromPointer(words.data(), DType::kI32,
                              std::vector<int64_t>{c.table.dim(0)}));
    if (c.call == 0) MESHDMA_RETURN_IF_ERROR(semaphore_wait(c.entered, 1));
    AsyncCopyDescriptor push = make_async_remote_copy(
        src, c.table, c.table_send, c.pair->table_arrived, c.peer);
    MESHDMA_RETURN_IF_ERROR(push.start());
    MESHDMA_RETURN_IF_ERROR(push.wait_send());
  }
  // Step 3: each layer, once its bytes have arrived.
  const int64_t layer_elems =
      2 * o.num_kv_heads * o.total_pages * o.page_size * o.head_dim;
  for (int l = 0; l < o.num_layers; ++l) {
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef layer_cache, c.cache.At(l));
    if (Communicates(o.mode)) {
      MESHDMA_ASSIGN_OR_RETURN(ArrayRef flat,
                               layer_cache.Reshape({layer_elems}));
      MESHDMA_ASSIGN_OR_RETURN(ArrayRef expected,
                               flat.Slice(0, 0, c.layer_bytes / 4));
      MESHDMA_RETURN_IF_ERROR(
          c.Counting(expected, c.send[0], c.layer_recv[l]).wait_recv());
    }
    if (Computes(o.mode)) {
      TraceSpan span(absl::StrCat("decode layer ", l));
      MESHDMA_RETURN_IF_ERROR(
          decode(l, *layer_cache.At(0), *layer_cache.At(1)));
    }
  }
  return absl::OkStatus();
}

// The decode device's block table for this call, checked against this
// prefill device's call (step 1 of the prefill side). The table lands as one
// DMA, so once its header's bytes are counted the whole table is here: a
// call that differs fails at once instead of waiting for bytes that never
// come.
absl::StatusOr<const int32_t*> TakeBlockTable(const PairCall& c) {
  auto wait_words = [&](int64_t start, int64_t words) -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef part, c.table.Slice(0, start, words));
    return c.Counting(part, c.table_send, c.pair->table_arrived).wait_recv();
  };
  MESHDMA_RETURN_IF_ERROR(wait_words(0, kTableHeaderWords));
  MESHDMA_RETURN_IF_ERROR(c.header.Check(c.table.data_as<int32_t>()));
  MESHDMA_RETURN_IF_ERROR(wait_words(kTableHeaderWords, c.pages));
  return c.table.data_as<int32_t>() + kTableHeaderWords;
}

// Starts one layer's DMAs from staging slot `slot_kv` ([2, kv heads,
// seq_len, head_dim]) into the decode cache: one per run of prompt pages
// that the block table puts on consecutive cache pages (that run's rows are
// contiguous in every kv head of the cache as in the slot, so keys and
// values of every head travel as one strided copy), counted on `sent` and
// the decode device's `layer_recv[layer]`.
absl::Status StartLayerPages(const PairCall& c, int layer,
                             const ArrayRef& slot_kv, const int32_t* dst_page,
                             Semaphore sent) {
  const KvTransferOptions& o = c.o;
  const int64_t ps = o.page_size;
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef layer_cache, c.cache.At(layer));
  MESHDMA_ASSIGN_OR_RETURN(
      ArrayRef cache_rows,
      layer_cache.Reshape({2, o.num_kv_heads, o.total_pages * ps, o.head_dim}));
  for (int64_t p0 = 0, p1 = 1; p0 < c.pages; p0 = p1++) {
    while (p1 < c.pages && dst_page[p1] == int64_t{dst_page[p1 - 1]} + 1) ++p1;
    const int64_t rows = std::min(p1 * ps, c.seq_len) - p0 * ps;
    const int64_t src_start[] = {0, 0, p0 * ps, 0};
    const int64_t dst_start[] = {0, 0, dst_page[p0] * ps, 0};
    const int64_t sizes[] = {2, o.num_kv_heads, rows, o.head_dim};
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef src, slot_kv.Block(src_start, sizes));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef dst, cache_rows.Block(dst_start, sizes));
    MESHDMA_RETURN_IF_ERROR(
        make_async_remote_copy(src, dst, sent, c.layer_recv[layer], c.peer)
            .start());
  }
  return absl::OkStatus();
}

// The prefill side: per layer, computes its keys and values into a staging
// slot and streams them while the next layer is computed (step 2 of the
// protocol).
absl::Status RunPrefill(PairCall& c, const PrefillLayerFn& prefill) {
  const KvTransferOptions& o = c.o;
  const bool pipelined =
      Communicates(o.mode) && o.mode != OverlapMode::kSequential;
  // Step 1: in the pair's first call of the Run, announce it. The block
  // table is taken when the first pages leave, so that it travels while
  // layer 0 is computed.
  if (c.call == 0)
    MESHDMA_RETURN_IF_ERROR(semaphore_signal(c.entered, 1, c.peer));
  // Step 2: two staging slots, kept by the pair and left uninitialised:
  // `prefill` writes every element before a DMA reads it
  // (kCommunicationOnly moves whatever they hold; its results are not the
  // kernel's). No DMA of an earlier call reads them any more: each call
  // waits for its sends.
  const int64_t hkv = o.num_kv_heads, d = o.head_dim;
  const int64_t stage_elems = 2 * 2 * hkv * c.seq_len * d;
  if (c.pair->stage_elems < stage_elems) {
    c.pair->stage.reset();
    c.pair->stage = std::make_unique_for_overwrite<float[]>(stage_elems);
    c.pair->stage_elems = stage_elems;
  }
  MESHDMA_ASSIGN_OR_RETURN(
      ArrayRef stage,
      ArrayRef::FromPointer(c.pair->stage.get(), DType::kF32,
                            std::vector<int64_t>{2, 2, hkv, c.seq_len, d}));
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef stage_flat,
                           stage.Reshape({2, 2 * hkv * c.seq_len * d}));
  auto slot_sent = [&](int slot) -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef bytes, stage_flat.At(slot));
    return c.Counting(bytes, c.send[slot], c.layer_recv[0]).wait_send();
  };
  const int32_t* dst_page = nullptr;
  for (int l = 0; l < o.num_layers; ++l) {
    const int slot = l % 2;
    // Step 3: the slot is free once layer l - 2's DMAs have read it.
    if (pipelined && l >= 2) MESHDMA_RETURN_IF_ERROR(slot_sent(slot));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef slot_kv, stage.At(slot));
    // Step 4: compute this layer's keys and values.
    if (Computes(o.mode)) {
      TraceSpan span(absl::StrCat("prefill layer ", l));
      MESHDMA_RETURN_IF_ERROR(prefill(l, *slot_kv.At(0), *slot_kv.At(1)));
    }
    if (!Communicates(o.mode)) continue;
    // Step 5: stream its pages (the block table first, once).
    if (dst_page == nullptr) {
      MESHDMA_ASSIGN_OR_RETURN(dst_page, TakeBlockTable(c));
    }
    MESHDMA_RETURN_IF_ERROR(
        StartLayerPages(c, l, slot_kv, dst_page, c.send[slot]));
    if (!pipelined) MESHDMA_RETURN_IF_ERROR(slot_sent(slot));
  }
  // Step 6: the last (up to two) layers' sends.
  if (pipelined) {
    for (int l = std::max(0, o.num_layers - 2); l < o.num_layers; ++l) {
      MESHDMA_RETURN_IF_ERROR(slot_sent(l % 2));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckKvTransferRequest(int64_t seq_len,
                                    std::span<const int32_t> block_table,
                                    const KvTransferOptions& o,
                                    bool is_decode) {
  auto err = [](auto&&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel 'kv_transfer': ", parts...));
  };
  const int64_t ps = o.page_size;
  if (seq_len <= 0 || o.num_kv_heads <= 0 || o.head_dim <= 0 || ps <= 0 ||
      o.num_layers <= 0) {
    return err("seq_len ", seq_len, ", num_kv_heads ", o.num_kv_heads,
               ", head_dim ", o.head_dim, ", page_size ", ps,
               " and num_layers ", o.num_layers, " must be positive");
  }
  const int64_t pages = (seq_len + ps - 1) / ps;
  if (o.total_pages < pages) {
    return err("the decode cache has ", o.total_pages,
               " pages per layer; the prompt of ", seq_len, " tokens needs ",
               pages, " pages of ", ps);
  }
  if (!is_decode) return absl::OkStatus();
  if (static_cast<int64_t>(block_table.size()) != pages) {
    return err("block_table has ", block_table.size(), " entries; ", seq_len,
               " tokens in pages of ", ps, " need ", pages);
  }
  std::vector<bool> taken(o.total_pages, false);
  for (int32_t p : block_table) {
    if (p < 0 || p >= o.total_pages) {
      return err("block_table names page ", p, " of a cache of ", o.total_pages,
                 " pages");
    }
    if (taken[p]) {
      return err("block_table names page ", p,
                 " twice; a prompt's pages must be distinct");
    }
    taken[p] = true;
  }
  return absl::OkStatus();
}

absl::StatusOr<ArrayRef> AllocateKvCache(const KvTransferOptions& options) {
  return AllocateSymmetric<float>(KvCacheShape(options));
}

absl::Status KvTransfer(int64_t seq_len, std::span<const int32_t> block_table,
                        const ArrayRef& cache, const KvTransferOptions& o,
                        const PrefillLayerFn& prefill,
                        const DecodeLayerFn& decode) {
  // Step 1: this device's role, and the arguments.
  MESHDMA_RETURN_IF_ERROR(CheckOverlapMode("kv_transfer", o.mode));
  MESHDMA_ASSIGN_OR_RETURN(int index, axis_index(o.role_axis));
  MESHDMA_ASSIGN_OR_RETURN(int roles, axis_size(o.role_axis));
  const int half = roles / 2;
  const bool is_decode = half > 0 && index >= half;
  MESHDMA_RETURN_IF_ERROR(CheckKvTransferArguments(seq_len, block_table, cache,
                                                   o, roles, is_decode));
  PairCall c(o, cache, seq_len, is_decode ? index - half : index + half);
  // Step 2: the kernel, with no barrier across the mesh at entry: each
  // pair meets on its own. The table lands in persistent memory, and the
  // decode device's allocations exist once its block table arrives, so no
  // DMA lands in a scope that is not there yet.
  return RunKernel({.name = "kv_transfer",
                    .entry_barrier = false,
                    .collective_id = kKvTransferCollectiveId},
                   [&]() -> absl::Status {
                     MESHDMA_RETURN_IF_ERROR(c.Allocate());
                     return is_decode ? RunDecode(c, block_table, decode)
                                      : RunPrefill(c, prefill);
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
