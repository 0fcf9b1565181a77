#include "meshdma/collectives/fused/ring_attention.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/fused/online_attention.h"
#include "meshdma/collectives/fused/peer_read.h"
#include "meshdma/collectives/fused/ring_slots.h"
#include "meshdma/collectives/internal/common.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/check.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/symmetric_memory.h"
#include "meshdma/dma/trace.h"

namespace meshdma {

namespace {

constexpr absl::string_view kName = "ring_attention";

}  // namespace

std::vector<int64_t> SequencePositions(SequenceLayout layout, int64_t local_len,
                                       int n, int device) {
  std::vector<int64_t> pos(local_len);
  if (layout == SequenceLayout::kContiguous) {
    for (int64_t r = 0; r < local_len; ++r) pos[r] = device * local_len + r;
    return pos;
  }
  const int64_t c = local_len / 2;  // One chunk.
  for (int64_t r = 0; r < local_len; ++r) {
    pos[r] = r < c ? device * c + r : (2 * n - 1 - device) * c + (r - c);
  }
  return pos;
}

std::vector<int64_t> ZigZagOrder(int64_t seq_len, int n) {
  std::vector<int64_t> order;
  order.reserve(seq_len);
  const int64_t local = seq_len / n;
  for (int d = 0; d < n; ++d) {
    for (int64_t p : SequencePositions(SequenceLayout::kZigZag, local, n, d)) {
      order.push_back(p);
    }
  }
  return order;
}

namespace {

using fused_internal::RingSemaphores;
using AttendFn = absl::FunctionRef<void(int step, const ArrayRef& keys,
                                        const ArrayRef& values)>;

// The DMA ring (a kernel's body, ring_slots.h): the KV block in hand is
// forwarded into the right neighbour's other slot while it is attended to
// here.
absl::Status RingDma(const collectives_internal::Group& ring, const ArrayRef& k,
                     const ArrayRef& v, OverlapMode mode, AttendFn attend) {
  const int n = ring.size();
  const int64_t hkv = k.dim(0), s_len = k.dim(1), d = k.dim(2);
  // Two receive slots, each holding one K and one V block.
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef slots,
                           AllocateSymmetric<float>({2, 2, hkv, s_len, d}));
  MESHDMA_ASSIGN_OR_RETURN(const RingSemaphores sems,
                           RingSemaphores::Allocate());
  auto slot_k = [&](int slot) { return *(*slots.At(slot)).At(0); };
  auto slot_v = [&](int slot) { return *(*slots.At(slot)).At(1); };

  for (int s = 0; s < n; ++s) {
    const int cur = s % 2, next = (s + 1) % 2;
    const ArrayRef kb = s == 0 ? k : slot_k(cur);
    const ArrayRef vb = s == 0 ? v : slot_v(cur);
    const bool forward = Communicates(mode) && s < n - 1;
    AsyncCopyDescriptor copy_k =
        make_async_remote_copy(kb, slot_k(next), sems.send, sems.recv[next],
                               ring.right(), DeviceIdType::kLogical);
    AsyncCopyDescriptor copy_v =
        make_async_remote_copy(vb, slot_v(next), sems.send, sems.recv[next],
                               ring.right(), DeviceIdType::kLogical);
    // Step 1: forward the block in hand to the right neighbour's other
    // slot. From step 2 on that slot held the block the neighbour got at
    // step s - 1; wait on `free` until it has consumed it.
    if (forward) {
      MESHDMA_RETURN_IF_ERROR(sems.AwaitFree(s));
      MESHDMA_RETURN_IF_ERROR(copy_k.start());
      MESHDMA_RETURN_IF_ERROR(copy_v.start());
      if (mode == OverlapMode::kSequential) {
        MESHDMA_RETURN_IF_ERROR(copy_k.wait());
        MESHDMA_RETURN_IF_ERROR(copy_v.wait());
      }
    }
    // Step 2: fold the block in hand into the online softmax
    // (compute-only mode uses the local block with the same positions,
    // hence the same work).
    if (Computes(mode)) {
      const bool local = s == 0 || !Communicates(mode);
      attend(s, local ? k : kb, local ? v : vb);
    }
    // Step 3: my block has left (`send`) and the next one has arrived
    // (`recv[next]`, the same byte count as my outgoing copies).
    if (forward && mode != OverlapMode::kSequential) {
      MESHDMA_RETURN_IF_ERROR(copy_k.wait());
      MESHDMA_RETURN_IF_ERROR(copy_v.wait());
    }
    // Step 4: slot `cur` is consumed (computed on and forwarded); my left
    // neighbour refills it at its step s + 1 if that step forwards again.
    if (Communicates(mode)) MESHDMA_RETURN_IF_ERROR(sems.ReleaseSlot(ring, s));
  }
  return absl::OkStatus();
}

// In place (ReadInputsInPlaceOrPush): at step s the k and v of the member
// s places to the left, read where that member keeps them (`board`).
absl::Status RingInPlace(const collectives_internal::Group& ring,
                         const fused_internal::InputBoard& board,
                         const ArrayRef& k, const ArrayRef& v, OverlapMode mode,
                         AttendFn attend) {
  fused_internal::PulledBlock pulled_k(mode, k), pulled_v(mode, v);
  for (int s = 0; s < ring.size(); ++s) {
    // Step 1: the block of the member s places to my left, in place
    // (or pulled into a private copy: sequential, communication-only).
    ArrayRef keys = k, values = v;
    if (s > 0 && Communicates(mode)) {
      const int src_device = ring.PositionAt(-s);
      MESHDMA_ASSIGN_OR_RETURN(keys, pulled_k.From(board.Input(src_device, 0)));
      MESHDMA_ASSIGN_OR_RETURN(values,
                               pulled_v.From(board.Input(src_device, 1)));
    }
    // Step 2: fold it into the online softmax.
    if (Computes(mode)) attend(s, keys, values);
  }
  return absl::OkStatus();
}

// Step 0 of RingAttention: the options' enums and the operands.
absl::Status CheckOperands(const ArrayRef& q, const ArrayRef& k,
                           const ArrayRef& v, const ArrayRef& out,
                           const RingAttentionOptions& o, const ArrayRef* lse) {
  auto err = [](auto&&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel 'ring_attention': ", parts...));
  };
  MESHDMA_RETURN_IF_ERROR(CheckOverlapMode("ring_attention", o.mode));
  if (o.layout != SequenceLayout::kContiguous &&
      o.layout != SequenceLayout::kZigZag) {
    return err("options.layout (SequenceLayout) ", static_cast<int>(o.layout),
               " is not one of kContiguous (0), kZigZag (1)");
  }
  const std::pair<const char*, const ArrayRef*> operands[] = {
      {"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}};
  for (const auto& [name, a] : operands) {
    if (a->dtype() != DType::kF32 || a->rank() != 3 || !a->is_contiguous()) {
      return err("operand '", name, "' is ", a->ToString(),
                 ", expected contiguous f32 [heads, local sequence, head_dim]");
    }
  }
  const int64_t h = q.dim(0), s_len = q.dim(1), d = q.dim(2);
  const int64_t hkv = k.dim(0);
  if (k.shape()[0] != v.shape()[0] || k.dim(1) != v.dim(1) ||
      k.dim(2) != v.dim(2)) {
    return err("'k' ", k.ToString(), " and 'v' ", v.ToString(),
               " differ in shape");
  }
  if (k.dim(1) != s_len || k.dim(2) != d || hkv == 0 || h % hkv != 0) {
    return err("'k' ", k.ToString(), " does not fit 'q' ", q.ToString(),
               ": expected [Hkv, ", s_len, ", ", d,
               "] with Hkv dividing H = ", h);
  }
  if (out.dim(0) != h || out.dim(1) != s_len || out.dim(2) != d) {
    return err("'out' is ", out.ToString(), ", expected the shape of 'q' ",
               q.ToString());
  }
  if (lse != nullptr &&
      (lse->dtype() != DType::kF32 || lse->rank() != 2 || lse->dim(0) != h ||
       lse->dim(1) != s_len || !lse->is_contiguous())) {
    return err("'lse' is ", lse->ToString(), ", expected f32[", h, ",", s_len,
               "]");
  }
  if (o.layout == SequenceLayout::kZigZag && s_len % 2 != 0) {
    return err("the zig-zag layout needs an even local sequence; 'q' is ",
               q.ToString());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RingAttention(const ArrayRef& q, const ArrayRef& k,
                           const ArrayRef& v, const ArrayRef& out,
                           const RingAttentionOptions& o, const ArrayRef* lse) {
  // Step 0: check the options' enums and the operands.
  MESHDMA_RETURN_IF_ERROR(CheckOperands(q, k, v, out, o, lse));
  const int64_t h = q.dim(0), s_len = q.dim(1), d = q.dim(2);
  const int64_t hkv = k.dim(0);
  const std::string axes[] = {o.axis};
  MESHDMA_ASSIGN_OR_RETURN(
      const collectives_internal::Group ring,
      collectives_internal::ResolveGroup("ring_attention", axes));
  const int n = ring.size(), me = ring.index;
  const std::vector<int64_t> q_pos = SequencePositions(o.layout, s_len, n, me);
  const float scale =
      o.sm_scale.value_or(1.0f / std::sqrt(static_cast<float>(d)));
  OnlineAttention attention({h, hkv, s_len, d}, scale, o.causal, o.block_q,
                            o.block_k);
  int64_t products = 0;

  auto attend = [&](int s, const ArrayRef& keys, const ArrayRef& values) {
    TraceSpan span(absl::StrCat("ring_attention step ", s));
    const std::vector<int64_t> k_pos =
        SequencePositions(o.layout, s_len, n, ring.PositionAt(-s));
    if (RaceCheckingEnabled()) {
      AnnotateRead(q, "attention read of the queries");
      AnnotateRead(keys, "attention read of a key block");
      AnnotateRead(values, "attention read of a value block");
    }
    products += attention.Attend(q.data_as<float>(), keys.data_as<float>(),
                                 values.data_as<float>(), s_len, q_pos, k_pos);
  };
  MESHDMA_ASSIGN_OR_RETURN(
      const bool may_read,
      fused_internal::ReadsInPlace(kName, ring, o.transfer,
                                   fused_internal::PeerMemory::kInputs));
  auto dma = [&] { return RingDma(ring, k, v, o.mode, attend); };
  auto in_place = [&](const fused_internal::InputBoard& board) {
    return RingInPlace(ring, board, k, v, o.mode, attend);
  };
  const ArrayRef inputs[] = {k, v};
  MESHDMA_RETURN_IF_ERROR(fused_internal::ReadInputsInPlaceOrPush(
      kName, ring, o.transfer, may_read, inputs, in_place, dma));
  // Step 5: out = acc / l.
  if (RaceCheckingEnabled()) {
    AnnotateWrite(out, "attention write of the output");
    if (lse != nullptr) AnnotateWrite(*lse, "attention write of the lse");
  }
  attention.Finish(out.data_as<float>(),
                   lse != nullptr ? lse->data_as<float>() : nullptr);
  if (o.products != nullptr) *o.products = products;
  return absl::OkStatus();
}

}  // namespace meshdma
