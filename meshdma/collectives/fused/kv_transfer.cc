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
  // prefill device's allocations exist once it announces itself on the
  // barrier semaphore, and the decode device's once its block table arrives,
  // so no DMA lands in a scope that is not there yet (step 1).
  return RunKernel(
      {.name = "kv_transfer",
       .entry_barrier = false,
       .collective_id = kKvTransferCollectiveId},
      [&]() -> absl::Status {
        // Symmetric allocations, the same sequence on both roles.
        MESHDMA_ASSIGN_OR_RETURN(ArrayRef table,
                                 AllocateSymmetric<int32_t>({pages}));
        MESHDMA_ASSIGN_OR_RETURN(
            SemaphoreArray send,
            AllocateSemaphoreArray(SemaphoreType::kDma, 2, "send"));
        MESHDMA_ASSIGN_OR_RETURN(
            SemaphoreArray layer_recv,
            AllocateSemaphoreArray(SemaphoreType::kDma, layers, "layer_recv"));
        MESHDMA_ASSIGN_OR_RETURN(
            Semaphore table_send,
            AllocateSemaphore(SemaphoreType::kDma, "table_send"));
        MESHDMA_ASSIGN_OR_RETURN(
            Semaphore table_recv,
            AllocateSemaphore(SemaphoreType::kDma, "table_recv"));
        std::vector<int32_t> table_local(block_table.begin(),
                                         block_table.end());
        table_local.resize(pages);
        MESHDMA_ASSIGN_OR_RETURN(
            ArrayRef table_src,
            ArrayRef::FromPointer(table_local.data(), DType::kI32,
                                  std::vector<int64_t>{pages}));
        AsyncCopyDescriptor table_copy = make_async_remote_copy(
            table_src, table, table_send, table_recv, peer);

        MESHDMA_ASSIGN_OR_RETURN(Semaphore entered, get_barrier_semaphore());
        if (is_decode) {
          // Step 1: once the prefill device has entered this call, hand it
          // the block table. (A mode that moves nothing meets no peer.)
          if (Communicates(o.mode)) {
            MESHDMA_RETURN_IF_ERROR(semaphore_wait(entered, 1));
            MESHDMA_RETURN_IF_ERROR(table_copy.start());
            MESHDMA_RETURN_IF_ERROR(table_copy.wait_send());
          }
          // Step 3: consume each layer as soon as its bytes are here.
          std::vector<float> size_only(1);
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

        // Prefill. Step 1: announce this call. The decode device's block
        // table is taken when the first pages leave, so that it travels
        // while layer 0 is computed.
        if (Communicates(o.mode)) {
          MESHDMA_RETURN_IF_ERROR(semaphore_signal(entered, 1, peer));
        }
        bool have_table = false;
        auto take_table = [&]() -> absl::Status {
          if (have_table) return absl::OkStatus();
          have_table = true;
          return table_copy.wait_recv();
        };
        const int32_t* dst_page = table.data_as<int32_t>();
        // Two staging slots, left uninitialised: `prefill` writes every
        // element before a DMA reads it (kCommunicationOnly moves whatever
        // they hold; its results are not the kernel's).
        auto stage_store =
            std::make_unique_for_overwrite<float[]>(2 * 2 * hkv * seq_len * d);
        MESHDMA_ASSIGN_OR_RETURN(
            ArrayRef stage,
            ArrayRef::FromPointer(stage_store.get(), DType::kF32,
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
