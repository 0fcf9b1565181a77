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
  const int r = g.rank;
  const int L = static_cast<int>(lanes.size());
  if (n == 1) return absl::OkStatus();
  // Lane l's part of block s, as [begin, begin + len) of `output`.
  auto part = [&](int s, int l, int64_t* begin, int64_t* len) {
    s = ((s % n) + n) % n;
    const int64_t bb = blocks[s];
    const int64_t bl = blocks[s + 1] - bb;
    *begin = bb + PartBegin(bl, L, l);
    *len = bb + PartBegin(bl, L, l + 1) - *begin;
  };
  for (int k = 0; k < n; ++k) {
    for (int l = 0; l < L; ++l) {
      AllGatherLane& lane = lanes[l];
      const int d = lane.dir;
      // Wait for the part that arrived in step k-1 (or, at k = n-1, the last).
      if (k > 0) {
        int64_t b, len;
        part(r - d * k, l, &b, &len);
        if (len > 0) {
          ArrayRef got = Range(output, b, len);
          MESHDMA_RETURN_IF_ERROR(RemoteCopy(got, got, lane.send_sem,
                                             lane.recv_sems[k - 1], g.Peer(-d))
                                      .wait_recv());
        }
      }
      if (k == n - 1 || (k == 0 && step0_sent)) continue;
      // Pass block r - d*k on to member r + d.
      int64_t b, len;
      part(r - d * k, l, &b, &len);
      if (len == 0) continue;
      const ArrayRef src =
          k == 0 ? Range(own, b - blocks[r], len) : Range(output, b, len);
      lane.sends.push_back(RemoteCopy(src, Range(output, b, len), lane.send_sem,
                                      lane.recv_sems[k], g.Peer(d)));
      MESHDMA_RETURN_IF_ERROR(lane.sends.back().start());
    }
  }
  for (AllGatherLane& lane : lanes) {
    for (AsyncCopyDescriptor& send : lane.sends) {
      MESHDMA_RETURN_IF_ERROR(send.wait_send());
    }
  }
  return absl::OkStatus();
}

}  // namespace meshdma::collectives_internal
