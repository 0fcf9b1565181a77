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
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/internal/common.h"
#include "meshdma/collectives/internal/reduce.h"
#include "meshdma/collectives/options.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/check.h"
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
// The same with blocks anywhere in `output`: member i owns [begins[i],
// begins[i] + lens[i]) (disjoint ranges, in any order); `own` holds lens[r]
// elements, which both overloads copy into my block of `output` once step
// 0's sends are under way (unless `own` is that block).
absl::Status RingAllGather(const Group& g, const ArrayRef& own,
                           const ArrayRef& output,
                           std::span<const int64_t> begins,
                           std::span<const int64_t> lens, AllGatherState& state,
                           bool step0_sent = false);

// How a ring reduce-scatter cuts `count` elements: n segments
// ([count*s/n, count*(s+1)/n)), one part per lane in each, and each part into
// `pieces` pieces of at most `slot_elems` elements (one receive slot).
struct RingPieces {
  int64_t count = 0;
  int n = 1;
  int lanes = 1;
  int64_t pieces = 1;
  int64_t slot_elems = 1;
  // The fewest pieces per part such that a piece fits `chunk_elems` (>= 1).
  static RingPieces Plan(int64_t count, int n, int lanes, int64_t chunk_elems);
  // Piece `p` of lane `l`'s part of segment `s` (a ring position), as
  // [*begin, *begin + *len).
  void Piece(int s, int l, int64_t p, int64_t* begin, int64_t* len) const;
};

// One direction of a ring reduce-scatter, seen from one member, in the
// spirit of NCCL's ring primitives: partials go to `to` (the member `dir`
// steps on) and come from `from` (the member `dir` steps back), through
// `num_buffers` (B) receive slots on each receiver, used round robin.
// Semaphores, all back at 0 after `Drain`:
//   - slot i's DMA receive semaphore counts the bytes landed in slot i;
//   - slot i's DMA send semaphore counts the bytes read out of the sender's
//     source for slot i;
//   - the REGULAR `capacity` semaphore of the sender counts slots its
//     receiver has handed back (credits). The first B messages need none.
class ReduceScatterLane {
 public:
  // Allocates, in this order, the receive slots, the staging slots (with
  // `stage`: partials are built there before they are sent), and the
  // receive, send and capacity semaphores. Every member allocates its lanes
  // in the same order, so the slots and semaphores are symmetric.
  static absl::StatusOr<ReduceScatterLane> Allocate(const Group& g, int dir,
                                                    DType acc_dtype,
                                                    int num_buffers,
                                                    int64_t slot_elems,
                                                    bool stage);

  int dir() const { return dir_; }
  int to() const { return to_; }

  // The staging slot the next `Send` will read, `len` elements, once the
  // send that last read it has been read out (that slot's send semaphore).
  absl::StatusOr<ArrayRef> NextStagingSlot(int64_t len);
  // Waits until the next partial from `from` has landed (the receive
  // semaphore of its slot) and returns it; valid until `Release`.
  absl::StatusOr<ArrayRef> Receive(int64_t len);
  // Hands the slot `Receive` returned back to `from`: one signal on its
  // capacity semaphore.
  absl::Status Release();
  // Pushes `src` into `to`'s next slot: past the first B messages, first
  // waits for one credit (capacity), then for the send that last used the
  // slot to be read out (its send semaphore).
  absl::Status Send(const ArrayRef& src);
  // Waits until every send has been read out and every credit has arrived.
  absl::Status Drain();

 private:
  ArrayRef Slot(const ArrayRef& slots, int64_t slot, int64_t len) const;
  // Waits for the send that last used `slot`, if any.
  absl::Status WaitSlotSent(int64_t slot);

  int dir_ = 1;
  int to_ = 0;    // LOGICAL id.
  int from_ = 0;  // LOGICAL id.
  int num_buffers_ = 1;
  ArrayRef recv_;     // [B, slot_elems] of the accumulator, symmetric.
  ArrayRef staging_;  // [B, slot_elems] of the accumulator, with `stage`.
  SemaphoreArray recv_sems_, send_sems_;
  Semaphore capacity_;
  int64_t sent_ = 0, received_ = 0, credits_waited_ = 0;
  std::vector<std::optional<AsyncCopyDescriptor>> pending_;  // Per slot.
};

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
// signals, so that every semaphore ends at 0. Each lane is a
// `ReduceScatterLane`; the members are `n >= 2` (callers copy when n == 1).
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

// Ring all-reduce of the 1-D `input` into the 1-D symmetric `output` (which
// may alias it), n >= 2 members, `num_lanes` ring directions:
//   phase 1: `RingReduceScatter` leaves the total of segment r in `output`,
//            each finished piece already pushed on (step 0 of phase 2);
//   phase 2: `RingAllGather` of the totals straight into every `output`.
template <typename T>
absl::Status RingAllReduce(const Group& g, ReduceOp op, const ArrayRef& input,
                           const ArrayRef& output, int num_lanes,
                           int64_t chunk_bytes, int num_buffers);

// ---------------------------------------------------------------------------
// Implementation.

// Checked mode (dma/check.h): a receive-reduce step reads my input and the
// received piece and writes the partial through raw pointers.
inline void AnnotateCombine(const ArrayRef& input, const ArrayRef& received,
                            const ArrayRef& partial) {
  AnnotateRead(input, "ring reduction read of own input");
  AnnotateRead(received, "ring reduction read of a received piece");
  AnnotateWrite(partial, "ring reduction write of the partial");
}

// Step 3a of RingReduceScatter: elements [b, b + len) of my input start
// their walk on `lane` (converted into a staging slot when `stage`; that
// slot's send semaphore, then a capacity credit, order it after the slot's
// reuse).
template <typename T>
absl::Status RingSendSegment(ReduceScatterLane& lane, const ArrayRef& input,
                             int64_t b, int64_t len, bool stage, bool checked) {
  ArrayRef src = Range(input, b, len);
  if (stage) {
    MESHDMA_ASSIGN_OR_RETURN(src, lane.NextStagingSlot(len));
    if (checked) {
      AnnotateRead(Range(input, b, len), "ring staging read");
      AnnotateWrite(src, "ring staging write");
    }
    ConvertArray(input.data_as<const T>() + b, src.data_as<Acc<T>>(), len);
  }
  return lane.Send(src);
}

template <typename T>
absl::Status RingReduceScatter(const Group& g, ReduceOp op,
                               const ArrayRef& input, const ArrayRef* full,
                               const ArrayRef& mine, int num_lanes,
                               int64_t chunk_bytes, int num_buffers,
                               AllGatherState* gather) {
  using A = Acc<T>;
  const int n = g.size();
  const T* in = input.data_as<const T>();
  const int64_t mine_begin = PartBegin(input.num_elements(), n, g.index);
  // Partials live in `full` when no widening is needed; else in staging.
  const bool stage = full == nullptr || !std::is_same_v<A, T>;
  // Checked mode records the raw-pointer reads and writes of steps 3a-3c.
  const bool checked = RaceCheckingEnabled();

  // 1. Cut the input into pieces that fit a receive slot of `chunk_bytes`.
  const RingPieces cut = RingPieces::Plan(
      input.num_elements(), n, num_lanes,
      std::max<int64_t>(1, chunk_bytes / static_cast<int64_t>(sizeof(A))));

  // 2. One lane per direction: lane 0 sends to +1, lane 1 to -1.
  std::vector<ReduceScatterLane> lanes;
  for (int l = 0; l < num_lanes; ++l) {
    MESHDMA_ASSIGN_OR_RETURN(
        ReduceScatterLane lane,
        ReduceScatterLane::Allocate(g, l == 0 ? 1 : -1, kDTypeOf<A>,
                                    num_buffers, cut.slot_elems, stage));
    lanes.push_back(std::move(lane));
  }

  // 3. Piece-major walk: at step k each lane handles segment r - d*(1+k).
  for (int64_t p = 0; p < cut.pieces; ++p) {
    for (int k = 0; k < n; ++k) {
      for (int l = 0; l < num_lanes; ++l) {
        ReduceScatterLane& lane = lanes[l];
        int64_t b, len;
        cut.Piece(g.PositionAt(-lane.dir() * (1 + k)), l, p, &b, &len);
        if (len == 0) continue;
        if (k == 0) {
          // 3a. Send (RingSendSegment).
          MESHDMA_RETURN_IF_ERROR(
              RingSendSegment<T>(lane, input, b, len, stage, checked));
        } else if (k < n - 1) {
          // 3b. Receive-reduce-send: the partial `from` sent at its step k-1
          //     (receive semaphore of its slot) plus my input becomes my
          //     partial; the slot goes back to `from` (its capacity) before
          //     my partial moves on to `to`.
          ArrayRef partial;
          if (stage) {
            MESHDMA_ASSIGN_OR_RETURN(partial, lane.NextStagingSlot(len));
          } else {
            partial = Range(*full, b, len);
          }
          MESHDMA_ASSIGN_OR_RETURN(ArrayRef got, lane.Receive(len));
          if (checked) AnnotateCombine(Range(input, b, len), got, partial);
          CombineArrays<A>(op, in + b, got.data_as<const A>(),
                           partial.data_as<A>(), len, 1);
          MESHDMA_RETURN_IF_ERROR(lane.Release());
          MESHDMA_RETURN_IF_ERROR(lane.Send(partial));
        } else {
          // 3c. Receive-reduce (last step): the partial from `from` (receive
          //     semaphore) plus my input is the total of my segment, in
          //     `mine`. With `gather` it leaves at once as the all-gather's
          //     step 0 (that phase's step-0 receive semaphore), while it is
          //     hot in cache; then the slot goes back to `from` (capacity).
          MESHDMA_ASSIGN_OR_RETURN(ArrayRef got, lane.Receive(len));
          if (checked) {
            AnnotateCombine(Range(input, b, len), got,
                            Range(mine, b - mine_begin, len));
          }
          CombineArrays<A>(op, in + b, got.data_as<const A>(),
                           mine.data_as<T>() + (b - mine_begin), len, n);
          if (gather != nullptr) {
            AllGatherLane& ag = (*gather)[l];
            const ArrayRef total = Range(*full, b, len);
            ag.sends.push_back(RemoteCopy(total, total, ag.send_sem,
                                          ag.recv_sems[0], lane.to()));
            MESHDMA_RETURN_IF_ERROR(ag.sends.back().start());
          }
          MESHDMA_RETURN_IF_ERROR(lane.Release());
        }
      }
    }
  }

  // 4. Drain: every send read out (send semaphores), every credit consumed
  //    (capacity), so that every semaphore ends at 0.
  for (ReduceScatterLane& lane : lanes) {
    MESHDMA_RETURN_IF_ERROR(lane.Drain());
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status RingAllReduce(const Group& g, ReduceOp op, const ArrayRef& input,
                           const ArrayRef& output, int num_lanes,
                           int64_t chunk_bytes, int num_buffers) {
  const int n = g.size();
  const int64_t count = input.num_elements();
  std::vector<int64_t> segments(n + 1);
  for (int i = 0; i <= n; ++i) segments[i] = PartBegin(count, n, i);
  const ArrayRef mine = Range(output, segments[g.index],
                              segments[g.index + 1] - segments[g.index]);
  MESHDMA_ASSIGN_OR_RETURN(AllGatherState gather,
                           AllocateAllGather(g, num_lanes));
  MESHDMA_RETURN_IF_ERROR(RingReduceScatter<T>(g, op, input, &output, mine,
                                               num_lanes, chunk_bytes,
                                               num_buffers, &gather));
  return RingAllGather(g, mine, output, segments, gather,
                       /*step0_sent=*/true);
}

}  // namespace meshdma::collectives_internal

#endif  // MESHDMA_COLLECTIVES_INTERNAL_RING_H_
