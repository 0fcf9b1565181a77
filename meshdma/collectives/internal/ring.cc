#include "meshdma/collectives/internal/ring.h"

namespace meshdma::collectives_internal {

absl::StatusOr<AllGatherState> AllocateAllGather(const Group& g,
                                                 int num_lanes) {
  AllGatherState lanes(num_lanes);
  const int n = g.size();
  for (int l = 0; l < num_lanes; ++l) {
    lanes[l].dir = l == 0 ? 1 : -1;
    MESHDMA_ASSIGN_OR_RETURN(
        lanes[l].recv_sems,
        AllocateSemaphoreArray(SemaphoreType::kDma, std::max(1, n - 1),
                               "all-gather recv"));
    MESHDMA_ASSIGN_OR_RETURN(
        lanes[l].send_sem,
        AllocateSemaphore(SemaphoreType::kDma, "all-gather send"));
  }
  return lanes;
}

absl::Status RingAllGather(const Group& g, const ArrayRef& own,
                           const ArrayRef& output,
                           const std::vector<int64_t>& blocks,
                           AllGatherState& lanes, bool step0_sent) {
  const int n = g.size();
  std::vector<int64_t> lens(n);
  for (int i = 0; i < n; ++i) lens[i] = blocks[i + 1] - blocks[i];
  return RingAllGather(g, own, output,
                       std::span<const int64_t>(blocks.data(), n), lens, lanes,
                       step0_sent);
}

absl::Status RingAllGather(const Group& g, const ArrayRef& own,
                           const ArrayRef& output,
                           std::span<const int64_t> begins,
                           std::span<const int64_t> lens, AllGatherState& lanes,
                           bool step0_sent) {
  const int n = g.size();
  const int r = g.index;
  const int L = static_cast<int>(lanes.size());
  // My own block into its place in `output` (nothing to do when `own` is
  // that block already): after step 0's sends have started, which read
  // `own`, so that the copy runs while they travel.
  auto copy_own = [&] {
    if (lens[r] > 0) LocalCopy(own, Range(output, begins[r], lens[r]));
  };
  if (n == 1) {
    copy_own();
    return absl::OkStatus();
  }
  // Lane l's part of block s (a ring position), as [begin, begin + len) of
  // `output`.
  auto part = [&](int s, int l, int64_t* begin, int64_t* len) {
    const int64_t bb = begins[s];
    const int64_t bl = lens[s];
    *begin = bb + PartBegin(bl, L, l);
    *len = bb + PartBegin(bl, L, l + 1) - *begin;
  };
  for (int k = 0; k < n; ++k) {
    for (int l = 0; l < L; ++l) {
      AllGatherLane& lane = lanes[l];
      const int d = lane.dir;
      // Step 1: wait for the part that arrived in step k-1 (or, at k = n-1,
      // the last).
      if (k > 0) {
        int64_t b, len;
        part(g.PositionAt(-d * k), l, &b, &len);
        if (len > 0) {
          ArrayRef got = Range(output, b, len);
          MESHDMA_RETURN_IF_ERROR(RemoteCopy(got, got, lane.send_sem,
                                             lane.recv_sems[k - 1], g.Peer(-d))
                                      .wait_recv());
        }
      }
      if (k == n - 1 || (k == 0 && step0_sent)) continue;
      // Step 2: pass block r - d*k on to member r + d.
      int64_t b, len;
      part(g.PositionAt(-d * k), l, &b, &len);
      if (len == 0) continue;
      const ArrayRef src =
          k == 0 ? Range(own, b - begins[r], len) : Range(output, b, len);
      lane.sends.push_back(RemoteCopy(src, Range(output, b, len), lane.send_sem,
                                      lane.recv_sems[k], g.Peer(d)));
      MESHDMA_RETURN_IF_ERROR(lane.sends.back().start());
    }
    // Step 3: my own block into place, while step 0's sends travel.
    if (k == 0) copy_own();
  }
  // Step 4: every send has left (its source may be reused).
  for (AllGatherLane& lane : lanes) {
    for (AsyncCopyDescriptor& send : lane.sends) {
      MESHDMA_RETURN_IF_ERROR(send.wait_send());
    }
  }
  return absl::OkStatus();
}

RingPieces RingPieces::Plan(int64_t count, int n, int lanes,
                            int64_t chunk_elems) {
  RingPieces cut;
  cut.count = count;
  cut.n = n;
  cut.lanes = lanes;
  const int64_t max_segment = (count + n - 1) / n;
  const int64_t max_part = (max_segment + lanes - 1) / lanes;
  cut.pieces = std::max<int64_t>(1, (max_part + chunk_elems - 1) / chunk_elems);
  cut.slot_elems =
      std::max<int64_t>(1, (max_part + cut.pieces - 1) / cut.pieces);
  return cut;
}

void RingPieces::Piece(int s, int l, int64_t p, int64_t* begin,
                       int64_t* len) const {
  const int64_t sb = PartBegin(count, n, s);
  const int64_t sl = PartBegin(count, n, s + 1) - sb;
  const int64_t lb = sb + PartBegin(sl, lanes, l);
  const int64_t ll = sb + PartBegin(sl, lanes, l + 1) - lb;
  *begin = lb + PartBegin(ll, pieces, p);
  *len = lb + PartBegin(ll, pieces, p + 1) - *begin;
}

absl::StatusOr<ReduceScatterLane> ReduceScatterLane::Allocate(
    const Group& g, int dir, DType acc_dtype, int num_buffers,
    int64_t slot_elems, bool stage) {
  ReduceScatterLane lane;
  lane.dir_ = dir;
  lane.to_ = g.Peer(dir);
  lane.from_ = g.Peer(-dir);
  const int b = std::max(1, num_buffers);
  lane.num_buffers_ = b;
  MESHDMA_ASSIGN_OR_RETURN(lane.recv_,
                           AllocateSymmetric(acc_dtype, {b, slot_elems}));
  if (stage) {
    MESHDMA_ASSIGN_OR_RETURN(lane.staging_,
                             AllocateSymmetric(acc_dtype, {b, slot_elems}));
  }
  MESHDMA_ASSIGN_OR_RETURN(
      lane.recv_sems_,
      AllocateSemaphoreArray(SemaphoreType::kDma, b, "reduce-scatter recv"));
  MESHDMA_ASSIGN_OR_RETURN(
      lane.send_sems_,
      AllocateSemaphoreArray(SemaphoreType::kDma, b, "reduce-scatter send"));
  MESHDMA_ASSIGN_OR_RETURN(
      lane.capacity_,
      AllocateSemaphore(SemaphoreType::kRegular, "reduce-scatter capacity"));
  lane.pending_.resize(b);
  return lane;
}

ArrayRef ReduceScatterLane::Slot(const ArrayRef& slots, int64_t slot,
                                 int64_t len) const {
  return *(*slots.At(slot)).Slice(0, 0, len);
}

absl::Status ReduceScatterLane::WaitSlotSent(int64_t slot) {
  if (pending_[slot].has_value()) {
    MESHDMA_RETURN_IF_ERROR(pending_[slot]->wait_send());
    pending_[slot].reset();
  }
  return absl::OkStatus();
}

absl::StatusOr<ArrayRef> ReduceScatterLane::NextStagingSlot(int64_t len) {
  const int64_t slot = sent_ % num_buffers_;
  MESHDMA_RETURN_IF_ERROR(WaitSlotSent(slot));
  return Slot(staging_, slot, len);
}

absl::StatusOr<ArrayRef> ReduceScatterLane::Receive(int64_t len) {
  const int64_t slot = received_ % num_buffers_;
  ArrayRef arrived = Slot(recv_, slot, len);
  MESHDMA_RETURN_IF_ERROR(
      RemoteCopy(arrived, arrived, send_sems_[slot], recv_sems_[slot], from_)
          .wait_recv());
  ++received_;
  return arrived;
}

absl::Status ReduceScatterLane::Release() {
  return semaphore_signal(capacity_, 1, DeviceId(from_),
                          DeviceIdType::kLogical);
}

absl::Status ReduceScatterLane::Send(const ArrayRef& src) {
  if (sent_ >= num_buffers_) {
    MESHDMA_RETURN_IF_ERROR(semaphore_wait(capacity_, 1));
    ++credits_waited_;
  }
  const int64_t slot = sent_ % num_buffers_;
  MESHDMA_RETURN_IF_ERROR(WaitSlotSent(slot));
  pending_[slot] = RemoteCopy(src, Slot(recv_, slot, src.num_elements()),
                              send_sems_[slot], recv_sems_[slot], to_);
  MESHDMA_RETURN_IF_ERROR(pending_[slot]->start());
  ++sent_;
  return absl::OkStatus();
}

absl::Status ReduceScatterLane::Drain() {
  for (auto& pending : pending_) {
    if (pending.has_value()) MESHDMA_RETURN_IF_ERROR(pending->wait_send());
  }
  const int64_t owed = sent_ - credits_waited_;
  if (owed > 0) MESHDMA_RETURN_IF_ERROR(semaphore_wait(capacity_, owed));
  return absl::OkStatus();
}

}  // namespace meshdma::collectives_internal
