#include "collectives/internal/ring.h"

namespace meshdma::internal {

absl::Status RingAllGather(const Group& g, const ArrayRef& own,
                           const ArrayRef& output,
                           const std::vector<int64_t>& blocks, int num_lanes) {
  const int n = g.size();
  const int r = g.rank;
  const int L = num_lanes;
  if (n == 1) return absl::OkStatus();
  struct Lane {
    int dir = 1;
    SemaphoreArray recv_sems;  // One per step.
    Semaphore send_sem;
    std::vector<AsyncCopyDescriptor> sends;
  };
  std::vector<Lane> lanes(L);
  for (int l = 0; l < L; ++l) {
    lanes[l].dir = l == 0 ? 1 : -1;
    MESHDMA_ASSIGN_OR_RETURN(
        lanes[l].recv_sems,
        AllocateSemaphoreArray(SemaphoreType::kDma, n - 1, "all-gather recv"));
    MESHDMA_ASSIGN_OR_RETURN(
        lanes[l].send_sem,
        AllocateSemaphore(SemaphoreType::kDma, "all-gather send"));
  }
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
      Lane& lane = lanes[l];
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
      if (k == n - 1) continue;
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
  for (Lane& lane : lanes) {
    for (AsyncCopyDescriptor& send : lane.sends) {
      MESHDMA_RETURN_IF_ERROR(send.wait_send());
    }
  }
  return absl::OkStatus();
}

}  // namespace meshdma::internal
