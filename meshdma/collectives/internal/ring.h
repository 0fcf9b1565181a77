// The ring phases that the reducing and gathering collectives are made of.
// Both run inside a kernel (after its entry barrier), on every member of a
// `Group`, with one lane per ring direction: lane 0 sends to the next member
// (+1), lane 1 (bidirectional rings) to the previous one (-1). Each lane
// carries its own part of every block: lane l of block [b, b + len) is
// [b + len*l/L, b + len*(l+1)/L).
#ifndef MESHDMA_COLLECTIVES_INTERNAL_RING_H_
#define MESHDMA_COLLECTIVES_INTERNAL_RING_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/internal/common.h"
#include "meshdma/collectives/internal/reduce.h"
#include "meshdma/collectives/options.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma::collectives_internal {

// Ring all-gather phase. `blocks` has n + 1 element offsets into the 1-D
// symmetric `output`: member i owns [blocks[i], blocks[i+1]). On entry the
// caller's own block is in `own` (a view of the same size, possibly outside
// `output`: the input of `all_gather`); on return every member's block is in
// every member's `output`. No scratch: each step lands directly in the
// neighbour's output (single copy).
//
// For each lane (direction d, peer r+d):
//   step 0:      push my block r to member r+d's output (from `own`);
//   steps 1..n-2: wait for block r-d*k, which member r-d pushed in its step
//                k-1 (one DMA semaphore per step, so that copies completing
//                out of order cannot be mistaken for each other), and pass
//                it on to member r+d;
//   last:        wait for block r-d*(n-1) = r+d.
// Finally wait until every push has been read (send semaphores).
//
// `state` holds the semaphores and sends of each lane (`AllocateAllGather`).
// All-reduce allocates it before its reduce-scatter, which then pushes each
// finished piece of its segment to the neighbour at once (step 0, while the
// piece is still in cache); `step0_sent` tells this phase to skip step 0's
// sends and only wait for them.
struct AllGatherLane {
  int dir = 1;
  SemaphoreArray recv_sems;  // One per step.
  Semaphore send_sem;
  std::vector<AsyncCopyDescriptor> sends;
};
using AllGatherState = std::vector<AllGatherLane>;
absl::StatusOr<AllGatherState> AllocateAllGather(const Group& g, int num_lanes);
absl::Status RingAllGather(const Group& g, const ArrayRef& own,
                           const ArrayRef& output,
                           const std::vector<int64_t>& blocks,
                           AllGatherState& state, bool step0_sent = false);

// Ring reduce-scatter phase over the 1-D `input` of `count` elements of type
// T split into n segments ([count*s/n, count*(s+1)/n)). On return the
// caller's `mine` (segment r, type T) holds the reduction over the group of
// segment r, divided by n for kMean. With `full` (the 1-D symmetric output of
// an all-reduce, which may alias `input`), partial sums are kept in it when
// T needs no widening; otherwise they are staged in bounded scratch.
//
// Partial sums travel in `Acc<T>` through `num_buffers` receive slots of at
// most `chunk_bytes` per lane on the receiver. Each segment's lane part is cut
// into P pieces (P such that a piece fits a slot); the loop runs piece-major
// so that piece p of a segment walks the whole ring while piece p+1 follows:
//   for each piece p, for k = 0..n-1, for each lane (direction d):
//     a) k > 0: wait for the partial of segment r-d*(1+k) that member r-d
//        sent in its step k-1 (receive slot m % B, DMA semaphore of that
//        slot), combine it with my input into the partial (k < n-1) or into
//        `mine` (k = n-1, the total), and hand the slot back by signalling
//        member r-d's REGULAR capacity semaphore;
//     b) k < n-1: wait for a free slot on member r+d (after B messages, one
//        capacity signal per message) and push my partial of segment
//        r-d*(1+k) into it (my input itself when k = 0).
// Finally wait for the last sends to be read and for the last B capacity
// signals, so that every semaphore ends at 0.
//
// With `gather` (all-reduce only, with `full`), each finished piece of
// segment r is pushed at once into member r+d's `full` as step 0 of the
// all-gather that follows.
template <typename T>
absl::Status RingReduceScatter(const Group& g, ReduceOp op,
                               const ArrayRef& input, const ArrayRef* full,
                               const ArrayRef& mine, int num_lanes,
                               int64_t chunk_bytes, int num_buffers,
                               AllGatherState* gather = nullptr);

// ---------------------------------------------------------------------------
// Implementation.

template <typename T>
absl::Status RingReduceScatter(const Group& g, ReduceOp op,
                               const ArrayRef& input, const ArrayRef* full,
                               const ArrayRef& mine, int num_lanes,
                               int64_t chunk_bytes, int num_buffers,
                               AllGatherState* gather) {
  using A = Acc<T>;
  const int n = g.size();
  const int r = g.rank;
  const int64_t count = input.num_elements();
  const int L = num_lanes;
  const int B = std::max(1, num_buffers);
  const int64_t chunk_elems =
      std::max<int64_t>(1, chunk_bytes / static_cast<int64_t>(sizeof(A)));
  const int64_t max_seg = (count + n - 1) / n;
  const int64_t max_lane = (max_seg + L - 1) / L;
  const int64_t P =
      std::max<int64_t>(1, (max_lane + chunk_elems - 1) / chunk_elems);
  const int64_t slot_elems = std::max<int64_t>(1, (max_lane + P - 1) / P);
  // Partials live in `full` when no widening is needed; else in staging.
  const bool stage = full == nullptr || !std::is_same_v<A, T>;
  const DType acc_dtype = kDTypeOf<A>;

  struct Lane {
    int dir = 1;
    ArrayRef recv;     // [B, slot_elems] of A, symmetric.
    ArrayRef staging;  // [B, slot_elems] of A, when `stage`.
    SemaphoreArray recv_sems, send_sems;
    Semaphore capacity;
    int64_t sent = 0, received = 0, credits_waited = 0;
    std::vector<std::optional<AsyncCopyDescriptor>> pending;
  };
  std::vector<Lane> lanes(L);
  for (int l = 0; l < L; ++l) {
    Lane& lane = lanes[l];
    lane.dir = l == 0 ? 1 : -1;
    MESHDMA_ASSIGN_OR_RETURN(lane.recv,
                             AllocateSymmetric(acc_dtype, {B, slot_elems}));
    if (stage) {
      MESHDMA_ASSIGN_OR_RETURN(lane.staging,
                               AllocateSymmetric(acc_dtype, {B, slot_elems}));
    }
    MESHDMA_ASSIGN_OR_RETURN(
        lane.recv_sems,
        AllocateSemaphoreArray(SemaphoreType::kDma, B, "reduce-scatter recv"));
    MESHDMA_ASSIGN_OR_RETURN(
        lane.send_sems,
        AllocateSemaphoreArray(SemaphoreType::kDma, B, "reduce-scatter send"));
    MESHDMA_ASSIGN_OR_RETURN(
        lane.capacity,
        AllocateSemaphore(SemaphoreType::kRegular, "reduce-scatter capacity"));
    lane.pending.resize(B);
  }
  auto slot_view = [&](const ArrayRef& slots, int64_t slot, int64_t len) {
    return *(*slots.At(slot)).Slice(0, 0, len);
  };
  // Element range of piece p of lane l of segment s.
  auto piece = [&](int s, int l, int64_t p, int64_t* begin, int64_t* len) {
    s = ((s % n) + n) % n;
    const int64_t sb = PartBegin(count, n, s);
    const int64_t sl = PartBegin(count, n, s + 1) - sb;
    const int64_t lb = sb + PartBegin(sl, L, l);
    const int64_t ll = sb + PartBegin(sl, L, l + 1) - lb;
    *begin = lb + PartBegin(ll, P, p);
    *len = lb + PartBegin(ll, P, p + 1) - *begin;
  };
  const int64_t mine_begin = PartBegin(count, n, r);
  const T* in = input.data_as<const T>();

  for (int64_t p = 0; p < P; ++p) {
    for (int k = 0; k < n; ++k) {
      for (int l = 0; l < L; ++l) {
        Lane& lane = lanes[l];
        const int d = lane.dir;
        const int to = g.Peer(d);
        const int from = g.Peer(-d);
        int64_t b, len;
        piece(r - d * (1 + k), l, p, &b, &len);
        if (len == 0) continue;
        // The partial of this piece that step b) sends, if any.
        const A* partial = nullptr;
        ArrayRef partial_ref;
        if (k < n - 1 && (k > 0 || stage)) {
          if (stage) {
            const int64_t slot = lane.sent % B;
            if (lane.pending[slot].has_value()) {
              MESHDMA_RETURN_IF_ERROR(lane.pending[slot]->wait_send());
              lane.pending[slot].reset();
            }
            partial_ref = slot_view(lane.staging, slot, len);
          } else {
            partial_ref = Range(*full, b, len);
          }
          partial = partial_ref.data_as<const A>();
        }
        // a) Receive and combine.
        if (k > 0) {
          const int64_t slot = lane.received % B;
          ArrayRef arrived = slot_view(lane.recv, slot, len);
          AsyncCopyDescriptor wait_only =
              RemoteCopy(arrived, arrived, lane.send_sems[slot],
                         lane.recv_sems[slot], from);
          MESHDMA_RETURN_IF_ERROR(wait_only.wait_recv());
          ++lane.received;
          const A* got = arrived.data_as<const A>();
          if (k == n - 1) {
            T* out = mine.data_as<T>() + (b - mine_begin);
            CombineArrays<A>(op, in + b, got, out, len, n);
            if (gather != nullptr) {
              // All-gather step 0 for this piece: straight into the
              // neighbour's output while it is hot in cache.
              AllGatherLane& ag = (*gather)[l];
              const ArrayRef piece_ref = Range(*full, b, len);
              ag.sends.push_back(RemoteCopy(piece_ref, piece_ref, ag.send_sem,
                                            ag.recv_sems[0], to));
              MESHDMA_RETURN_IF_ERROR(ag.sends.back().start());
            }
          } else {
            CombineArrays<A>(op, in + b, got, const_cast<A*>(partial), len, 1);
          }
          MESHDMA_RETURN_IF_ERROR(semaphore_signal(
              lane.capacity, 1, DeviceId(from), DeviceIdType::kLogical));
        } else if (stage) {
          ConvertArray(in + b, const_cast<A*>(partial), len);
        }
        // b) Send the partial on.
        if (k < n - 1) {
          if (lane.sent >= B) {
            MESHDMA_RETURN_IF_ERROR(semaphore_wait(lane.capacity, 1));
            ++lane.credits_waited;
          }
          const int64_t slot = lane.sent % B;
          if (lane.pending[slot].has_value()) {
            MESHDMA_RETURN_IF_ERROR(lane.pending[slot]->wait_send());
            lane.pending[slot].reset();
          }
          ArrayRef src =
              partial != nullptr ? partial_ref : Range(input, b, len);
          lane.pending[slot] =
              RemoteCopy(src, slot_view(lane.recv, slot, len),
                         lane.send_sems[slot], lane.recv_sems[slot], to);
          MESHDMA_RETURN_IF_ERROR(lane.pending[slot]->start());
          ++lane.sent;
        }
      }
    }
  }
  // Drain: every send read, every capacity signal consumed.
  for (Lane& lane : lanes) {
    for (auto& pending : lane.pending) {
      if (pending.has_value()) MESHDMA_RETURN_IF_ERROR(pending->wait_send());
    }
    const int64_t left = lane.sent - lane.credits_waited;
    if (left > 0) MESHDMA_RETURN_IF_ERROR(semaphore_wait(lane.capacity, left));
  }
  return absl::OkStatus();
}

}  // namespace meshdma::collectives_internal

#endif  // MESHDMA_COLLECTIVES_INTERNAL_RING_H_
