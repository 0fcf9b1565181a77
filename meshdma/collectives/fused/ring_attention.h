// Ring attention: attention over a sequence sharded along a mesh axis, with
// the key/value blocks passed around the ring by remote DMA while each device
// attends its local queries to the block in hand.
//
// Every device of the axis holds `S / n` rows of q, k and v (per head). At
// ring step s (0 <= s < n) a device holds the KV block that started on the
// device s places to its left; it starts the DMA of that block into its right
// neighbour's other buffer (double-buffered), folds the block into its
// online-softmax state (kernels/overlap/online_attention.h), then waits for
// the block arriving from its left. After n steps every query has seen every
// key; out = acc / l. The result equals full attention on the gathered
// sequence.
//
// Causal attention and load balance. With the sequence split contiguously,
// device i's queries see only keys of devices <= i, so device n-1 works n
// times as much as device 0. The zig-zag layout splits the sequence into 2n
// chunks and gives device i chunks i and 2n-1-i: every device then computes
// the same amount at every step. The caller lays the sequence out that way:
// `ZigZagOrder` gives the global position of each row of the permuted
// sequence, which is then sharded contiguously (P(None, 'x', None)).
//
// Semaphores (all allocated in the kernel's scope, 0 at exit):
//   - `send` (DMA): my outgoing block has been read; waited before the
//     buffer it came from is reused.
//   - `recv[2]` (DMA): bytes that arrived in my buffer `slot`.
//   - `free` (REGULAR): my right neighbour's signal that its buffer I am
//     about to fill has been consumed (it finished computing on it and
//     forwarding it). Needed from step 2 on, because a fast device could
//     otherwise overwrite a block its neighbour is still reading.
#ifndef MESHDMA_COLLECTIVES_FUSED_RING_ATTENTION_H_
#define MESHDMA_COLLECTIVES_FUSED_RING_ATTENTION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "meshdma/collectives/fused/overlap.h"
#include "meshdma/dma/array_ref.h"

namespace meshdma {

enum class SequenceLayout {
  kContiguous,  // device i holds rows [i*S/n, (i+1)*S/n)
  kZigZag,      // device i holds chunks i and 2n-1-i of 2n chunks
};

struct RingAttentionOptions {
  std::string axis = "x";
  bool causal = false;
  SequenceLayout layout = SequenceLayout::kContiguous;
  std::optional<float> sm_scale;  // Default 1 / sqrt(D).
  int64_t block_q = 128;
  int64_t block_k = 128;
  OverlapMode mode = OverlapMode::kOverlapped;
  // Who moves the KV blocks (overlap.h); kPeerRead reads them where their
  // owners keep them (the members are threads of one process). Unset:
  // MESHDMA_FUSED_TRANSFER, else kAuto.
  std::optional<FusedTransfer> transfer;
  // Filled when set: (head, q-block, k-block) products this device computed.
  int64_t* products = nullptr;
};

// q f32 [H, S/n, D], k and v f32 [Hkv, S/n, D] (contiguous; H a multiple of
// Hkv), the calling device's shards in `options.layout`; out f32 [H, S/n, D];
// lse, when given, f32 [H, S/n]. Call on every device of the current mesh
// (inside `Runtime::Run` or a `shard_map` function); runs as one kernel with
// an entry barrier. Errors name the operand and its shape.
absl::Status RingAttention(const ArrayRef& q, const ArrayRef& k,
                           const ArrayRef& v, const ArrayRef& out,
                           const RingAttentionOptions& options = {},
                           const ArrayRef* lse = nullptr);

// The global sequence positions of the `local_len` rows device `device` of
// `n` holds in `layout`.
std::vector<int64_t> SequencePositions(SequenceLayout layout, int64_t local_len,
                                       int n, int device);

// Row r of the zig-zag-permuted sequence of length `seq_len` over `n`
// devices is global position `ZigZagOrder(seq_len, n)[r]`. `seq_len` must be
// a multiple of 2n.
std::vector<int64_t> ZigZagOrder(int64_t seq_len, int n);

}  // namespace meshdma

#endif  // MESHDMA_COLLECTIVES_FUSED_RING_ATTENTION_H_
