#include "meshdma/collectives/fused/collective_matmul.h"

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "meshdma/base/config.h"
#include "meshdma/base/env.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/all_gather.h"
#include "meshdma/collectives/fused/peer_read.h"
#include "meshdma/collectives/fused/ring_slots.h"
#include "meshdma/collectives/internal/common.h"
#include "meshdma/collectives/internal/direct.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/check.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/peer_view.h"
#include "meshdma/dma/symmetric_memory.h"
#include "meshdma/dma/trace.h"
#include "meshdma/kernels/blas.h"

namespace meshdma {
namespace {

using collectives_internal::Group;
using fused_internal::InputBoard;
using fused_internal::PeerMemory;
using fused_internal::PulledBlock;
using fused_internal::ReadsInPlace;
using fused_internal::RingSemaphores;

constexpr absl::string_view kAllGatherMatmul = "all_gather_matmul";
constexpr absl::string_view kMatmulReduceScatter = "matmul_reduce_scatter";

absl::Status CheckMatrix(absl::string_view kernel, absl::string_view name,
                         const ArrayRef& a) {
  if (a.dtype() != DType::kF32 || a.rank() != 2 || !a.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel '", kernel, "': operand '", name, "' is ",
                     a.ToString(), ", expected a contiguous f32 matrix"));
  }
  return absl::OkStatus();
}

// What both kernels check first: `mode`, that `x`, `w` and `out` are
// contiguous f32 matrices (how their shapes fit is the kernel's), then the
// ring along `axes` (the caller's: the group refers to them).
absl::StatusOr<Group> CheckOperands(absl::string_view kernel, const ArrayRef& x,
                                    const ArrayRef& w, const ArrayRef& out,
                                    OverlapMode mode,
                                    std::span<const std::string> axes) {
  MESHDMA_RETURN_IF_ERROR(CheckOverlapMode(kernel, mode));
  MESHDMA_RETURN_IF_ERROR(CheckMatrix(kernel, "x", x));
  MESHDMA_RETURN_IF_ERROR(CheckMatrix(kernel, "w", w));
  MESHDMA_RETURN_IF_ERROR(CheckMatrix(kernel, "out", out));
  return collectives_internal::ResolveGroup(kernel, axes);
}

// A kernel's operands, described for its errors only ("x f32[2, 8], w
// f32[8, 8] and out f32[4, 8]").
struct Operands {
  const ArrayRef& x;
  const ArrayRef& w;
  const ArrayRef& out;
  std::string ToString() const {
    return absl::StrCat("x ", x.ToString(), ", w ", w.ToString(), " and out ",
                        out.ToString());
  }
};

// c[m, n] (+)= a[m, k] b[k, n], row-major contiguous; checked mode sees the
// reads of a and b and the write of c.
void MatMul(const ArrayRef& a, const ArrayRef& b, const ArrayRef& c,
            float beta) {
  const int64_t m = a.dim(0), k = a.dim(1), n = b.dim(1);
  if (RaceCheckingEnabled()) {
    AnnotateRead(a, "matmul read of the left operand");
    AnnotateRead(b, "matmul read of the right operand");
    AnnotateWrite(c, "matmul write of the product");
  }
  Gemm(false, false, m, n, k, 1.0f, a.data_as<float>(), k, b.data_as<float>(),
       n, beta, c.data_as<float>(), n);
}

// kAuto's answer on every member: each member's `mine` is gathered over
// `ring` (one word each). Members whose shapes differ across kAuto's test
// would enter different kernels and wait for each other until the timeout;
// instead every member gets InvalidArgument naming the first member whose
// answer differs and this device's `operands`.
absl::Status AgreeOnSchedule(absl::string_view kernel, const Group& ring,
                             CollectiveMatmulSchedule mine,
                             const Operands& operands) {
  return run_scoped([&]() -> absl::Status {
    const int32_t answer = static_cast<int32_t>(mine);
    MESHDMA_ASSIGN_OR_RETURN(
        const ArrayRef in,
        ArrayRef::FromPointer(const_cast<int32_t*>(&answer), DType::kI32,
                              std::vector<int64_t>{1}));
    MESHDMA_ASSIGN_OR_RETURN(const ArrayRef answers,
                             AllocateSymmetric<int32_t>({ring.size()}));
    const std::vector<std::string> axes(ring.axes.begin(), ring.axes.end());
    MESHDMA_RETURN_IF_ERROR(all_gather(in, answers, axes, /*tiled=*/true));
    for (int p = 0; p < ring.size(); ++p) {
      const int32_t theirs = answers.data_as<int32_t>()[p];
      if (theirs == answer) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          "kernel '", kernel, "' on ", ring.Describe(), ": schedule kAuto is ",
          CollectiveMatmulScheduleName(
              static_cast<CollectiveMatmulSchedule>(theirs)),
          " on member ", ring.members[p], " (logical) but ",
          CollectiveMatmulScheduleName(mine), " for this device's ",
          operands.ToString(), ": every member passes the same shapes"));
    }
    return absl::OkStatus();
  });
}

// The schedule `kernel` runs: `o.schedule`, else
// MESHDMA_COLLECTIVE_MATMUL_SCHEDULE, resolved on `ring` (the same answer on
// every member, AgreeOnSchedule). kAuto's tests (collective_matmul.h):
// `w_outweighs_rows`, w is at least the rows a member moves; and one
// product's buffer, of `one_product_bytes`, takes at most half the free heap
// (the same on every member: the heaps are symmetric), so that a call the
// ring's two slots allow does not fail for want of heap. `operands`
// describes this device's x, w and out for errors.
absl::StatusOr<CollectiveMatmulSchedule> ResolveSchedule(
    absl::string_view kernel, const Group& ring,
    const CollectiveMatmulOptions& o, bool w_outweighs_rows,
    int64_t one_product_bytes, const Operands& operands) {
  using enum CollectiveMatmulSchedule;
  // Step 1: the schedule asked for.
  CollectiveMatmulSchedule asked = kAuto;
  if (o.schedule.has_value()) {
    asked = *o.schedule;
    if (asked != kAuto && asked != kRing && asked != kOneProduct) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kernel '", kernel, "': options.schedule (CollectiveMatmulSchedule) ",
          static_cast<int>(asked),
          " is not one of kAuto (0), kRing (1), kOneProduct (2)"));
    }
  } else {
    MESHDMA_ASSIGN_OR_RETURN(
        std::optional<std::string> env,
        base_internal::EnvChoice(config::kCollectiveMatmulSchedule));
    if (env == "ring") asked = kRing;
    if (env == "one_product") asked = kOneProduct;
  }
  if (asked == kRing || ring.size() == 1) return kRing;
  // Step 2: a transfer asked for pins kAuto to the ring, whose blocks it
  // moves; one product stores into the members' memory itself.
  MESHDMA_ASSIGN_OR_RETURN(const FusedTransfer transfer,
                           ResolveFusedTransfer(kernel, o.transfer));
  if (asked == kAuto && transfer != FusedTransfer::kAuto) return kRing;
  if (transfer == FusedTransfer::kDma) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel '", kernel,
        "': schedule one_product stores the blocks itself, but the transfer "
        "is dma; use FusedTransfer::kAuto or kPeerRead"));
  }
  MESHDMA_ASSIGN_OR_RETURN(const bool reaches,
                           collectives_internal::DirectReaches(ring));
  if (!reaches) {
    if (asked == kAuto) return kRing;
    return absl::FailedPreconditionError(absl::StrCat(
        "kernel '", kernel, "' on ", ring.Describe(),
        ": schedule one_product, but some member is not on this host (or "
        "checked mode is on); use CollectiveMatmulSchedule::kRing or kAuto"));
  }
  // Step 3: kAuto's test on this member's shapes, then every member's.
  if (asked == kOneProduct) return kOneProduct;
  MESHDMA_ASSIGN_OR_RETURN(const int64_t heap_free, SymmetricBytesFree());
  const CollectiveMatmulSchedule mine =
      w_outweighs_rows && one_product_bytes <= heap_free / 2 ? kOneProduct
                                                             : kRing;
  MESHDMA_RETURN_IF_ERROR(AgreeOnSchedule(kernel, ring, mine, operands));
  return mine;
}

// The algorithms below are kernel bodies, run by the entry points.

// The DMA ring (ring_slots.h): at step s the x block in hand is forwarded
// into the right neighbour's slot while it is multiplied here.
absl::Status AllGatherMatmulDma(const Group& ring, const ArrayRef& x,
                                const ArrayRef& w, const ArrayRef& out,
                                OverlapMode mode) {
  const int n = ring.size();
  const int64_t mb = x.dim(0), k = x.dim(1);
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef slots,
                           AllocateSymmetric<float>({2, mb, k}));
  MESHDMA_ASSIGN_OR_RETURN(const RingSemaphores sems,
                           RingSemaphores::Allocate());
  for (int s = 0; s < n; ++s) {
    const int src_device = ring.PositionAt(-s);
    const int cur = s % 2, next = (s + 1) % 2;
    const ArrayRef block = s == 0 ? x : *slots.At(cur);
    const bool forward = Communicates(mode) && s < n - 1;
    AsyncCopyDescriptor copy = make_async_remote_copy(
        block, *slots.At(next), sems.send, sems.recv[next], ring.right(),
        DeviceIdType::kLogical);
    // Step 1: forward the x block in hand (from step 2 on, once the right
    // neighbour has consumed the slot it lands in: `free`).
    if (forward) {
      MESHDMA_RETURN_IF_ERROR(sems.AwaitFree(s));
      MESHDMA_RETURN_IF_ERROR(copy.start());
      if (mode == OverlapMode::kSequential) {
        MESHDMA_RETURN_IF_ERROR(copy.wait());
      }
    }
    // Step 2: rows block `src_device` of out = block @ w.
    if (Computes(mode)) {
      TraceSpan span(absl::StrCat(kAllGatherMatmul, " step ", s));
      const ArrayRef a = Communicates(mode) ? block : x;
      MESHDMA_ASSIGN_OR_RETURN(ArrayRef product,
                               out.Slice(0, src_device * mb, mb));
      MatMul(a, w, product, 0.0f);
    }
    // Step 3: my block has left and the next has arrived.
    if (forward && mode != OverlapMode::kSequential) {
      MESHDMA_RETURN_IF_ERROR(copy.wait());
    }
    // Step 4: slot `cur` is consumed; the left neighbour may refill it.
    if (Communicates(mode)) MESHDMA_RETURN_IF_ERROR(sems.ReleaseSlot(ring, s));
  }
  return absl::OkStatus();
}

// In place (ReadInputsInPlaceOrPush): at step s the rows block of the
// member s places to the left, read from its x where it lies (`board`); no
// slot, no copy.
absl::Status AllGatherMatmulInPlace(const Group& ring, const InputBoard& board,
                                    const ArrayRef& x, const ArrayRef& w,
                                    const ArrayRef& out, OverlapMode mode) {
  const int n = ring.size();
  const int64_t mb = x.dim(0);
  PulledBlock pulled(mode, x);
  for (int s = 0; s < n; ++s) {
    const int src_device = ring.PositionAt(-s);
    // Step 1: the block, read in place (or pulled into a private
    // copy in the sequential and communication-only modes).
    ArrayRef block = x;
    if (s > 0 && Communicates(mode)) {
      MESHDMA_ASSIGN_OR_RETURN(block, pulled.From(board.Input(src_device, 0)));
    }
    // Step 2: rows block `src_device` of out = block @ w.
    if (Computes(mode)) {
      TraceSpan span(absl::StrCat(kAllGatherMatmul, " step ", s));
      MESHDMA_ASSIGN_OR_RETURN(ArrayRef product,
                               out.Slice(0, src_device * mb, mb));
      MatMul(block, w, product, 0.0f);
    }
  }
  return absl::OkStatus();
}

// The entry of a one-product kernel (run without the kernel's entry
// barrier): a board of x, w and out (InputBoard), whose barrier is the entry
// barrier and which fails, naming the member, where the members' shapes
// differ and with them the symmetric buffers they would allocate. The peers
// read my board after that barrier: the collective's last step (every peer
// done with my memory) also says that they have; a kernel that runs no
// collective (compute-only) ends with the board's Release instead.
absl::StatusOr<InputBoard> EnterOneProduct(absl::string_view kernel,
                                           const Group& ring, const ArrayRef& x,
                                           const ArrayRef& w,
                                           const ArrayRef& out) {
  const ArrayRef operands[] = {x, w, out};
  return InputBoard::Publish(kernel, ring, operands);
}

// One product: every member stores its x block into block `ring.index` of
// every member's gathered x (DirectAllGather, which returns once every
// peer's block has arrived here), then out = gathered @ w in one call.
absl::Status AllGatherMatmulOneProduct(const Group& ring, const ArrayRef& x,
                                       const ArrayRef& w, const ArrayRef& out,
                                       OverlapMode mode) {
  // Step 1: the members' shapes agree (EnterOneProduct).
  MESHDMA_ASSIGN_OR_RETURN(const InputBoard board,
                           EnterOneProduct(kAllGatherMatmul, ring, x, w, out));
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef gathered,
                           AllocateSymmetric<float>({out.dim(0), x.dim(1)}));
  // Step 2: the gather (compute-only multiplies the zeros of the heap).
  if (Communicates(mode)) {
    TraceSpan span(absl::StrCat(kAllGatherMatmul, " gather"));
    MESHDMA_RETURN_IF_ERROR(
        collectives_internal::DirectAllGather(ring, x, gathered));
  }
  // Step 3: the product.
  if (Computes(mode)) {
    TraceSpan span(absl::StrCat(kAllGatherMatmul, " product"));
    MatMul(gathered, w, out, 0.0f);
  }
  return Communicates(mode) ? absl::OkStatus() : board.Release(ring);
}

// The DMA ring (ring_slots.h): the running sum of step s is pushed into the
// right neighbour's slot while the partial product of step s + 1 is
// computed.
absl::Status MatmulReduceScatterDma(const Group& ring, const ArrayRef& x,
                                    const ArrayRef& w, const ArrayRef& out,
                                    OverlapMode mode) {
  const int n = ring.size();
  const int64_t mb = out.dim(0), n_out = out.dim(1);
  auto rows = [&](int block) { return *x.Slice(0, block * mb, mb); };
  // Received accumulators (symmetric, double-buffered) and the partial
  // sums this device computes and sends (local, double-buffered).
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef recv_buf,
                           AllocateSymmetric<float>({2, mb, n_out}));
  std::vector<float> send_store(2 * mb * n_out);
  MESHDMA_ASSIGN_OR_RETURN(
      ArrayRef send_buf,
      ArrayRef::FromPointer(send_store.data(), DType::kF32,
                            std::vector<int64_t>{2, mb, n_out}));
  MESHDMA_ASSIGN_OR_RETURN(const RingSemaphores sems,
                           RingSemaphores::Allocate());
  const bool comm = Communicates(mode);
  std::optional<AsyncCopyDescriptor> in_flight;  // The previous step's send.
  for (int s = 0; s < n; ++s) {
    const int block = ring.PositionAt(-s - 1);
    const int cur = s % 2, next = (s + 1) % 2;
    const bool last = s == n - 1;
    const ArrayRef acc = last ? out : *send_buf.At(cur);
    // Step 1: my partial product for rows block `block`, computed while
    // the previous step's sum travels.
    if (Computes(mode)) {
      TraceSpan span(absl::StrCat(kMatmulReduceScatter, " step ", s));
      MatMul(rows(block), w, acc, 0.0f);
    }
    // Step 2: the sum of the devices to my left for this block arrives in
    // slot `cur`; add it, then release the slot to my left neighbour
    // (`free`) if it will fill it again.
    // (Compute-only adds the slot as it is: the same adds, no data.)
    if (s >= 1) {
      if (comm) {
        AsyncCopyDescriptor incoming = make_async_remote_copy(
            *send_buf.At(cur), *recv_buf.At(cur), sems.send, sems.recv[cur],
            ring.right(), DeviceIdType::kLogical);
        MESHDMA_RETURN_IF_ERROR(incoming.wait_recv());
      }
      if (Computes(mode)) {
        TraceSpan span(absl::StrCat(kMatmulReduceScatter, " add ", s));
        const ArrayRef arrived = *recv_buf.At(cur);
        if (RaceCheckingEnabled()) {
          AnnotateRead(arrived, "read of the arrived partial sum");
          AnnotateWrite(acc, "accumulation of the partial sum");
        }
        const float* in = arrived.data_as<float>();
        float* sum = acc.data_as<float>();
        for (int64_t i = 0; i < mb * n_out; ++i) sum[i] += in[i];
      }
      if (comm) MESHDMA_RETURN_IF_ERROR(sems.ReleaseSlot(ring, s));
    }
    // Step 3: the previous send has left: its source buffer is reused at
    // the next step.
    if (in_flight.has_value()) {
      MESHDMA_RETURN_IF_ERROR(in_flight->wait_send());
      in_flight.reset();
    }
    // Step 4: forward the running sum into the right neighbour's slot
    // `next` (from step 2 on, once it has consumed that slot: `free`).
    if (comm && !last) {
      MESHDMA_RETURN_IF_ERROR(sems.AwaitFree(s));
      AsyncCopyDescriptor copy = make_async_remote_copy(
          *send_buf.At(cur), *recv_buf.At(next), sems.send, sems.recv[next],
          ring.right(), DeviceIdType::kLogical);
      MESHDMA_RETURN_IF_ERROR(copy.start());
      if (mode == OverlapMode::kSequential) {
        MESHDMA_RETURN_IF_ERROR(copy.wait_send());
      } else {
        in_flight = copy;
      }
    }
  }
  if (in_flight.has_value()) {
    MESHDMA_RETURN_IF_ERROR(in_flight->wait_send());
  }
  return absl::OkStatus();
}

// In place: the running sums travel the ring as in the DMA ring, but each
// device adds its left neighbour's sum straight from that neighbour's slot.
// Semaphores (REGULAR): `ready`, signalled by my left neighbour when its sum
// for my next step is complete in its slot; `free`, signalled by my right
// neighbour when it has added the sum in my slot, so that I may write the
// slot again (and, the last time, leave the kernel and free it).
absl::Status MatmulReduceScatterInPlace(const Group& ring, const ArrayRef& x,
                                        const ArrayRef& w, const ArrayRef& out,
                                        OverlapMode mode) {
  const int n = ring.size();
  const int64_t mb = out.dim(0), n_out = out.dim(1);
  auto rows = [&](int block) { return *x.Slice(0, block * mb, mb); };
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef slots,
                           AllocateSymmetric<float>({2, mb, n_out}));
  MESHDMA_ASSIGN_OR_RETURN(Semaphore ready,
                           AllocateSemaphore(SemaphoreType::kRegular, "ready"));
  MESHDMA_ASSIGN_OR_RETURN(Semaphore free_sem,
                           AllocateSemaphore(SemaphoreType::kRegular, "free"));
  const bool comm = Communicates(mode) && n > 1;
  ArrayRef left_slots = slots;
  if (comm) {
    MESHDMA_ASSIGN_OR_RETURN(
        left_slots, peer_view(slots, ring.left(), DeviceIdType::kLogical));
  }
  PulledBlock pulled(mode, *slots.At(0));
  int frees_waited = 0;
  for (int s = 0; s < n; ++s) {
    const int block = ring.PositionAt(-s - 1);
    const bool last = s == n - 1;
    const ArrayRef acc = last ? out : *slots.At(s % 2);
    // Step 1: from step 2 on, my slot held the sum of step s - 2 until
    // my right neighbour added it (`free`).
    if (comm && s >= 2 && !last) {
      MESHDMA_RETURN_IF_ERROR(semaphore_wait(free_sem, 1));
      ++frees_waited;
    }
    // Step 2: my partial product for rows block `block`.
    if (Computes(mode)) {
      TraceSpan span(absl::StrCat(kMatmulReduceScatter, " step ", s));
      MatMul(rows(block), w, acc, 0.0f);
    }
    // Step 3: add the sum of the devices to my left for this block,
    // from my left neighbour's slot once it is complete (`ready`); then
    // give the slot back (`free`).
    // (Compute-only adds my own slot: the same adds on local data.)
    if (s >= 1) {
      ArrayRef arrived = *slots.At((s - 1) % 2);
      if (comm) {
        MESHDMA_RETURN_IF_ERROR(semaphore_wait(ready, 1));
        MESHDMA_ASSIGN_OR_RETURN(
            arrived, pulled.From((*left_slots.At((s - 1) % 2)).data()));
      }
      if (Computes(mode)) {
        TraceSpan span(absl::StrCat(kMatmulReduceScatter, " add ", s));
        const float* in = arrived.data_as<float>();
        float* sum = acc.data_as<float>();
        for (int64_t i = 0; i < mb * n_out; ++i) sum[i] += in[i];
      }
      if (comm) {
        MESHDMA_RETURN_IF_ERROR(
            semaphore_signal(free_sem, 1, ring.left(), DeviceIdType::kLogical));
      }
    }
    // Step 4: my sum for this step is complete in my slot.
    if (comm && !last) {
      MESHDMA_RETURN_IF_ERROR(
          semaphore_signal(ready, 1, ring.right(), DeviceIdType::kLogical));
    }
  }
  // Step 5: my right neighbour has added every sum of my slots.
  if (comm) {
    MESHDMA_RETURN_IF_ERROR(semaphore_wait(free_sem, (n - 1) - frees_waited));
  }
  return absl::OkStatus();
}

// One product: partial = x @ w into a symmetric [m, n_out]; once every
// member's is complete (a signal to every peer, DirectFinish), each member
// sums rows block `ring.index` of all of them into out, reading the peers'
// in place (DirectReduceScatter, which returns once every peer has read
// mine).
absl::Status MatmulReduceScatterOneProduct(const Group& ring, const ArrayRef& x,
                                           const ArrayRef& w,
                                           const ArrayRef& out,
                                           OverlapMode mode) {
  const int n = ring.size();
  const int64_t m = x.dim(0), n_out = w.dim(1), mb = out.dim(0);
  // Step 1: the members' shapes agree (EnterOneProduct).
  MESHDMA_ASSIGN_OR_RETURN(
      const InputBoard board,
      EnterOneProduct(kMatmulReduceScatter, ring, x, w, out));
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef partial,
                           AllocateSymmetric<float>({m * n_out}));
  MESHDMA_ASSIGN_OR_RETURN(Semaphore complete,
                           collectives_internal::AllocateDone());
  // Step 2: the product.
  if (Computes(mode)) {
    TraceSpan span(absl::StrCat(kMatmulReduceScatter, " product"));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef product,
                             partial.Reshape(std::vector<int64_t>{m, n_out}));
    MatMul(x, w, product, 0.0f);
  }
  // Step 3: the sums of every member's rows block `ring.index`
  // (compute-only: of my own n rows blocks, the same adds on local data).
  TraceSpan span(absl::StrCat(kMatmulReduceScatter, " sum"));
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef mine,
                           out.Reshape(std::vector<int64_t>{mb * n_out}));
  if (!Communicates(mode)) {
    const float* p = partial.data_as<float>();
    float* sum = mine.data_as<float>();
    std::copy_n(p, mb * n_out, sum);
    for (int b = 1; b < n; ++b) {
      for (int64_t i = 0; i < mb * n_out; ++i) sum[i] += p[b * mb * n_out + i];
    }
    return board.Release(ring);
  }
  MESHDMA_RETURN_IF_ERROR(collectives_internal::DirectFinish(ring, complete));
  return collectives_internal::DirectReduceScatter<float>(
      ring, ReduceOp::kSum, partial, mine, nullptr);
}

}  // namespace

absl::string_view CollectiveMatmulScheduleName(
    CollectiveMatmulSchedule schedule) {
  switch (schedule) {
    case CollectiveMatmulSchedule::kAuto:
      return "auto";
    case CollectiveMatmulSchedule::kRing:
      return "ring";
    case CollectiveMatmulSchedule::kOneProduct:
      return "one_product";
  }
  return "?";
}

absl::Status AllGatherMatmul(const ArrayRef& x, const ArrayRef& w,
                             const ArrayRef& out,
                             const CollectiveMatmulOptions& o) {
  constexpr absl::string_view kName = kAllGatherMatmul;
  const std::string axes[] = {o.axis};
  MESHDMA_ASSIGN_OR_RETURN(const Group ring,
                           CheckOperands(kName, x, w, out, o.mode, axes));
  const int n = ring.size();
  const int64_t mb = x.dim(0), k = x.dim(1), n_out = w.dim(1);
  if (w.dim(0) != k || out.dim(0) != mb * n || out.dim(1) != n_out) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel '", kName, "': x ", x.ToString(), ", w ", w.ToString(),
        " and out ", out.ToString(), " do not fit: expected w [", k,
        ", n_out] and out [", mb * n, ", n_out] over mesh axis '", o.axis,
        "' of size ", n));
  }
  MESHDMA_ASSIGN_OR_RETURN(
      const CollectiveMatmulSchedule schedule,
      ResolveSchedule(kName, ring, o, n_out >= mb,
                      out.dim(0) * k * sizeof(float), Operands{x, w, out}));
  if (schedule == CollectiveMatmulSchedule::kOneProduct) {
    return RunKernel(
        {.name = std::string(kName),
         .entry_barrier = false,
         .collective_id = std::nullopt},
        [&] { return AllGatherMatmulOneProduct(ring, x, w, out, o.mode); });
  }
  MESHDMA_ASSIGN_OR_RETURN(
      const bool may_read,
      ReadsInPlace(kName, ring, o.transfer, PeerMemory::kInputs));
  auto dma = [&] { return AllGatherMatmulDma(ring, x, w, out, o.mode); };
  auto in_place = [&](const InputBoard& board) {
    return AllGatherMatmulInPlace(ring, board, x, w, out, o.mode);
  };
  const ArrayRef inputs[] = {x};
  return fused_internal::ReadInputsInPlaceOrPush(
      kName, ring, o.transfer, may_read, inputs, in_place, dma);
}

absl::Status MatmulReduceScatter(const ArrayRef& x, const ArrayRef& w,
                                 const ArrayRef& out,
                                 const CollectiveMatmulOptions& o) {
  constexpr absl::string_view kName = kMatmulReduceScatter;
  const std::string axes[] = {o.axis};
  MESHDMA_ASSIGN_OR_RETURN(const Group ring,
                           CheckOperands(kName, x, w, out, o.mode, axes));
  const int n = ring.size();
  const int64_t m = x.dim(0), k = x.dim(1), n_out = w.dim(1);
  if (w.dim(0) != k || m % n != 0 || out.dim(0) != m / n ||
      out.dim(1) != n_out) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel '", kName, "': x ", x.ToString(), ", w ", w.ToString(),
        " and out ", out.ToString(), " do not fit: expected w [", k,
        ", n_out], x rows divisible by ", n, " (mesh axis '", o.axis,
        "') and out [", m / n, ", n_out]"));
  }
  MESHDMA_ASSIGN_OR_RETURN(
      const CollectiveMatmulSchedule schedule,
      ResolveSchedule(kName, ring, o, k >= m / n, m * n_out * sizeof(float),
                      Operands{x, w, out}));
  const bool one_product = schedule == CollectiveMatmulSchedule::kOneProduct;
  bool in_place = false;  // The ring's transfer.
  if (!one_product) {
    MESHDMA_ASSIGN_OR_RETURN(in_place, ReadsInPlace(kName, ring, o.transfer,
                                                    PeerMemory::kSymmetric));
  }
  return RunKernel(
      {.name = std::string(kName),
       .entry_barrier = !one_product,
       .collective_id = std::nullopt},
      [&] {
        if (one_product) {
          return MatmulReduceScatterOneProduct(ring, x, w, out, o.mode);
        }
        return in_place ? MatmulReduceScatterInPlace(ring, x, w, out, o.mode)
                        : MatmulReduceScatterDma(ring, x, w, out, o.mode);
      });
}

}  // namespace meshdma
