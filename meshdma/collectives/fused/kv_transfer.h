// KV-cache transfer pipelining between a prefill group and a decode group
// (disaggregated serving): the prefill side computes a prompt's keys and
// values layer by layer and streams them, page by page, into the decode
// side's paged KV cache with remote DMA while it computes the next layer;
// the decode side attends over layer L as soon as L has arrived, while L + 1
// is still in flight.
//
// Roles. Mesh axis `options.role_axis` has an even size 2m: its first half
// (coordinates 0 .. m-1) is the prefill group, its second half the decode
// group, and coordinate i pairs with i + m. A device's peer has the same
// coordinates on every other axis, so a mesh {stage: 2, x: n} pairs n
// prefill devices with n decode devices, and so does the one axis {x: 2n}
// of a launch (threads of one process, or ranks on different hosts under
// mpirun).
//
// The decode cache belongs to the caller, so that it outlives the transfer
// (decode keeps attending over it, and pages of other sequences stay): f32
// [num_layers, 2 (key, value), num_kv_heads, total_pages, page_size,
// head_dim], a symmetric allocation that every device of the mesh makes
// (`AllocateKvCache`, in the same sequence of allocations on both roles).
// For one layer, key_cache and value_cache are [num_kv_heads, total_pages,
// page_size, head_dim], the layout of kernels/ops/paged_attention.h.
// KvTransfer writes the prompt's pages and nothing else of it.
//
// Protocol, per decode/prefill pair, with no barrier across the mesh (each
// pair meets on its own):
//   1. The decode device chose the pages of the sequence (its block table,
//      page p of the prompt -> cache page block_table[p]); it pushes the
//      table, behind this call's number and the table's length, into the
//      prefill device's table mailbox (DMA semaphore `table_arrived`), as a
//      scheduler would. The mailbox is persistent memory (allocated by the
//      pair's first call of the Run), so the table may land before the
//      prefill device has entered the call; only in that first call does
//      the decode device wait for the prefill device's announcement on its
//      barrier semaphore (collective id 63, as the collectives). One mailbox
//      suffices: the decode device pushes call m + 1's table only once all
//      of call m's pages have arrived, and the prefill device reads call
//      m's table before any of them leaves. Prefill waits for the table only
//      before its first pages leave (step 2), so that it travels while
//      layer 0 is computed, and checks the table's header first: the call
//      number, the prompt's pages, the cache's heap offset and the options'
//      sizes (a pair whose calls or caches differ fails at once, naming the
//      field and both values; caches at different offsets would otherwise
//      take pages at the wrong place). Nothing lands
//      in a kernel scope before its device has entered it: the pages come
//      after the table. A mode that does not communicate (`kComputeOnly`)
//      meets no peer.
//   2. Prefill, for each layer l: waits until staging slot l % 2 is free
//      (`send[l % 2]`: the DMAs of layer l - 2 have read it), calls
//      `prefill(l, k, v)` to compute the layer's keys and values into the
//      slot ([num_kv_heads, seq_len, head_dim] each), then starts one DMA per
//      run of prompt pages that the block table puts on consecutive cache
//      pages (a strided copy of the run's rows of every key and value head;
//      a table of scattered pages gives one DMA per page), all counted on
//      the decode device's `layer_recv[l]`.
//   3. Decode, for each layer l: waits on `layer_recv[l]` for the layer's
//      bytes (2 * num_kv_heads * seq_len * head_dim * 4), then calls
//      `decode(l, key_cache, value_cache)`.
// Every semaphore is back to 0 at the end (the prefill side waits its last
// two layers' sends). Each device keeps its state for its pair until the Run
// ends (per role axis and cache size): the table mailbox, and on the
// prefill device the staging slots, 2 x 2 x num_kv_heads x seq_len x
// head_dim floats for the longest prompt so far, so that later calls touch
// no fresh memory.
#ifndef MESHDMA_COLLECTIVES_FUSED_KV_TRANSFER_H_
#define MESHDMA_COLLECTIVES_FUSED_KV_TRANSFER_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "meshdma/collectives/fused/overlap.h"
#include "meshdma/dma/array_ref.h"

namespace meshdma {

struct KvTransferOptions {
  std::string role_axis = "stage";
  int num_layers = 1;
  int64_t num_kv_heads = 1;
  int64_t head_dim = 64;
  int64_t page_size = 16;
  int64_t total_pages = 0;  // Pages per layer in the decode cache.
  OverlapMode mode = OverlapMode::kOverlapped;
};

// Fills `k` and `v` (f32 [num_kv_heads, seq_len, head_dim]) for `layer`.
using PrefillLayerFn = std::function<absl::Status(int layer, const ArrayRef& k,
                                                  const ArrayRef& v)>;
// Consumes one arrived layer: key_cache, value_cache f32 [num_kv_heads,
// total_pages, page_size, head_dim].
using DecodeLayerFn = std::function<absl::Status(
    int layer, const ArrayRef& key_cache, const ArrayRef& value_cache)>;

// The decode cache for `options` (see above): a zero-initialised symmetric
// allocation in the innermost open scope (a kernel, `run_scoped`, or the
// Run), made by every device of the mesh.
absl::StatusOr<ArrayRef> AllocateKvCache(const KvTransferOptions& options);

// The checks of KvTransfer's arguments that need no device: positive sizes,
// a cache of pages enough for the prompt, and on the decode side
// (`is_decode`) a block table of one distinct page in range per page of the
// prompt. InvalidArgument naming the value.
absl::Status CheckKvTransferRequest(int64_t seq_len,
                                    std::span<const int32_t> block_table,
                                    const KvTransferOptions& options,
                                    bool is_decode);

// Called by every device of the current mesh. `cache` is this device's
// decode cache (`AllocateKvCache`), of the shape `options` describes;
// `block_table` (ceil(seq_len / page_size) entries, distinct, < total_pages)
// is read on decode devices only; `prefill` runs on prefill devices,
// `decode` on decode devices.
absl::Status KvTransfer(int64_t seq_len, std::span<const int32_t> block_table,
                        const ArrayRef& cache, const KvTransferOptions& options,
                        const PrefillLayerFn& prefill,
                        const DecodeLayerFn& decode);

// Decode attention for one sequence over a paged cache, with the paged
// attention kernel (kernels/ops/paged_attention.h): query f32 [num_heads,
// head_dim]; caches as above; the first `context_len` tokens, token t in page
// block_table[t / page_size] at row t % page_size. Returns f32 [num_heads,
// head_dim]. Query head h reads kv head h / (num_heads / num_kv_heads).
absl::StatusOr<std::vector<float>> DecodePagedAttention(
    const float* query, int64_t num_heads, const ArrayRef& key_cache,
    const ArrayRef& value_cache, int64_t context_len,
    std::span<const int32_t> block_table, float scale);

}  // namespace meshdma

#endif  // MESHDMA_COLLECTIVES_FUSED_KV_TRANSFER_H_
