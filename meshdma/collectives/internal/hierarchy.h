// Hierarchical collectives for groups that span hosts
// (`CollectiveAlgorithm::kHierarchical`). They work over two kinds of
// sub-groups of the call's group:
//   - the caller's host: the group's members on its host, in group order
//     (shared memory, or threads);
//   - the caller's lane: the members with the caller's local index on every
//     host (the inter-host transport), hosts in the order of their first
//     member in the group.
// The reductions and the all-gather are compositions of the ring phases of
// ring.h over them: each lane moves 1/m of the data across hosts (m members
// per host) and the m lanes of a host run in parallel. The all-to-all routes
// every block through the member of its sender's host that shares its
// receiver's local index, so that a device sends one message to each other
// host instead of m. All run inside the collective's kernel (after its entry
// barrier and neighbour check over the whole group).
#ifndef MESHDMA_COLLECTIVES_INTERNAL_HIERARCHY_H_
#define MESHDMA_COLLECTIVES_INTERNAL_HIERARCHY_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/internal/common.h"
#include "meshdma/collectives/internal/direct.h"
#include "meshdma/collectives/internal/one_shot.h"
#include "meshdma/collectives/internal/path_rules.h"
#include "meshdma/collectives/internal/reduce.h"
#include "meshdma/collectives/internal/ring.h"
#include "meshdma/collectives/options.h"
#include "meshdma/dma/check.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma::collectives_internal {

// Where a group's members sit, by host, as seen from one member.
struct HostLayout {
  int num_hosts = 1;  // Hosts holding members of the group.
  int per_host = 0;   // Members on each host; 0 when hosts hold different
                      // numbers.
  // positions[h][i]: the group position of local index i on host h.
  std::vector<std::vector<int>> positions;
  int host = 0;   // The caller's host, an index into `positions`.
  int local = 0;  // The caller's local index on it.
  // Every host's members are threads of one process, so that a single-copy
  // step inside a host may read the inputs where they are, through boards
  // (direct.h). The same on every member.
  bool hosts_are_processes = false;

  // Whether kHierarchical applies: several hosts, the same count on each.
  bool Applies() const { return num_hosts > 1 && per_host > 0; }
  // The hosts kHierarchical would span, or 1 where it does not apply.
  int EvenHosts() const { return Applies() ? num_hosts : 1; }
  // The caller's host (`per_host` members) and lane (`num_hosts` members)
  // as groups; only where `Applies()`.
  Group Host(const Group& g) const;
  Group Lane(const Group& g) const;
};

// The layout of `g` from the launch's host of each member.
absl::StatusOr<HostLayout> HostLayoutOf(const Group& g);
// The layout of `g` whose member at position p sits on host `host[p]` in
// process `process[p]` (any ids).
HostLayout HostLayoutFrom(const Group& g, std::span<const int> host,
                          std::span<const int> process);

// Ring directions for a sub-ring of `n` members (as kAuto's flat choice).
inline int LanesFor(int n) { return n <= 2 ? 1 : 2; }

// The ring piece of the all-reduce's step between hosts: the larger of
// `lane_chunk_bytes` and `chunk_bytes` (CollectiveOptions).
inline int64_t LaneChunkBytes(const CollectiveOptions& options) {
  return std::max(options.chunk_bytes, options.lane_chunk_bytes);
}

// x[i] /= n for a mean over n devices (in Acc<T>; integers truncate).
template <typename T>
void DivideArray(T* x, int64_t len, int n) {
  using A = Acc<T>;
  const A div = static_cast<A>(n);
  for (int64_t i = 0; i < len; ++i) {
    x[i] = Cast<T>(static_cast<A>(Cast<A>(x[i]) / div));
  }
}

// One-shot all-reduce of `part` into `out` (both 1-D, of one length; `out`
// may alias `part`) over `lane`, for step 2 of the all-reduce below:
//   step 1: push `part` into row r of every peer's scratch [n, len] (one DMA
//           per peer, all on one send and one receive semaphore);
//   step 2: wait until n-1 rows have arrived and my pushes have been read;
//   step 3: reduce the rows into `out` in lane order (`part` stands for row
//           r), so that every member gets the same bits.
// On two hosts this moves the ring's bytes in one round instead of two.
template <typename T>
absl::Status LaneOneShot(const Group& lane, ReduceOp op, const ArrayRef& part,
                         const ArrayRef& out) {
  const int n = lane.size();
  const int64_t len = part.num_elements();
  const int64_t row_bytes = len * static_cast<int64_t>(sizeof(T));
  if (len == 0) return absl::OkStatus();
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef scratch,
                           AllocateSymmetric(kDTypeOf<T>, {n * len}));
  MESHDMA_ASSIGN_OR_RETURN(
      SemaphoreArray sems,
      AllocateSemaphoreArray(SemaphoreType::kDma, 2, "lane one-shot"));
  const Semaphore send_sem = sems[0], recv_sem = sems[1];
  // Step 1.
  const ArrayRef my_row = Range(scratch, lane.index * len, len);
  for (int j = 1; j < n; ++j) {
    MESHDMA_RETURN_IF_ERROR(
        RemoteCopy(part, my_row, send_sem, recv_sem, lane.Peer(j)).start());
  }
  // Step 2: one wait for all rows, one for all sends (the counts add up).
  const ArrayRef rows = Range(scratch, 0, (n - 1) * len);
  AsyncCopyDescriptor all =
      RemoteCopy(rows, rows, send_sem, recv_sem, lane.Peer(1));
  MESHDMA_RETURN_IF_ERROR(all.wait_recv());
  MESHDMA_RETURN_IF_ERROR(all.wait_send());
  // Step 3.
  AnnotateReduceRows(
      lane, part, [&](int i) { return Range(scratch, i * len, len); }, out);
  ReduceRows<T>(op, lane, part.data_as<const T>(), scratch.data(), row_bytes, 0,
                out.data_as<T>(), len);
  return absl::OkStatus();
}

// Hierarchical all-reduce of the 1-D `input` into the 1-D symmetric
// `output` (which may alias it) over `g`; H hosts of m members each, caller
// at local index i, part i = [count*i/m, count*(i+1)/m):
//   step 1: reduce-scatter over my host: part i of `output` holds my host's
//           reduction of part i (skipped when m == 1); with `host_direct`,
//           single-copy (DirectReduceScatter: part i of every host member's
//           input read in place, through `board` where not null, reduced
//           into mine), else a ring;
//   step 2: all-reduce part i of `output` in place over my lane (when
//           m == 1, `input` into `output`, with no copy between them): every
//           host now holds the total of part i at its local index i (one-shot
//           for parts up to `one_shot_max_bytes`, and on two hosts for parts
//           up to the lane's piece, LaneChunkBytes; else a ring cutting
//           pieces of that size);
//   step 3: kMean: divide part i by n (steps 1 and 2 sum);
//   step 4: all-gather the parts over my host (with `host_direct`, stores of
//           my part into every host member's output, DirectAllGather; else a
//           ring).
// The host state of steps 1 and 4 (ring state, or step 4's `done`
// semaphore) is allocated before step 2's, whose sizes follow part i: the
// heap stays symmetric within each sub-group. 16-bit floats are rounded to
// T between the steps.
template <typename T>
absl::Status HierarchicalAllReduce(const Group& g, const HostLayout& layout,
                                   ReduceOp op, const ArrayRef& input,
                                   const ArrayRef& output,
                                   const CollectiveOptions& options,
                                   bool host_direct, const ArrayRef* board) {
  const Group host = layout.Host(g);
  const Group lane = layout.Lane(g);
  const int m = host.size();
  const int64_t count = input.num_elements();
  const ReduceOp combine = op == ReduceOp::kMean ? ReduceOp::kSum : op;
  std::vector<int64_t> parts(m + 1);
  for (int i = 0; i <= m; ++i) parts[i] = PartBegin(count, m, i);
  const int64_t begin = parts[host.index];
  const ArrayRef mine = Range(output, begin, parts[host.index + 1] - begin);
  // Step 1.
  AllGatherState gather;
  Semaphore gathered;  // Step 4's `done` with host_direct.
  if (m > 1 && host_direct) {
    MESHDMA_ASSIGN_OR_RETURN(gathered, AllocateDone());
    MESHDMA_RETURN_IF_ERROR(
        DirectReduceScatter<T>(host, combine, input, mine, board));
  } else if (m > 1) {
    MESHDMA_ASSIGN_OR_RETURN(gather, AllocateAllGather(host, LanesFor(m)));
    MESHDMA_RETURN_IF_ERROR(
        RingReduceScatter<T>(host, combine, input, &output, mine, LanesFor(m),
                             options.chunk_bytes, options.num_buffers));
  }
  // Step 2.
  const ArrayRef& lane_input = m > 1 ? mine : input;
  const int64_t lane_chunk = LaneChunkBytes(options);
  if (mine.size_bytes() <= options.one_shot_max_bytes ||
      (lane.size() == 2 && mine.size_bytes() <= lane_chunk)) {
    MESHDMA_RETURN_IF_ERROR(LaneOneShot<T>(lane, combine, lane_input, mine));
  } else {
    MESHDMA_RETURN_IF_ERROR(RingAllReduce<T>(lane, combine, lane_input, mine,
                                             LanesFor(lane.size()), lane_chunk,
                                             options.num_buffers));
  }
  // Step 3.
  if (op == ReduceOp::kMean) {
    if (RaceCheckingEnabled()) AnnotateWrite(mine, "mean division");
    DivideArray(mine.data_as<T>(), mine.num_elements(), g.size());
  }
  // Step 4.
  if (m == 1) return absl::OkStatus();
  if (host_direct) return DirectAllGather(host, mine, output, parts, gathered);
  return RingAllGather(host, mine, output, parts, gather);
}

// Steps 3 and 4 of HierarchicalReduceScatter (below): the lane's ring
// reduce-scatter of my row of H segments of `seg` elements, then my segment
// into `output` (for kMean divided by `group_size`, the whole group's).
template <typename T>
absl::Status LaneReduceScatter(const Group& lane, ReduceOp op, int group_size,
                               const ArrayRef& row, int64_t seg,
                               const ArrayRef& output,
                               const CollectiveOptions& options) {
  const ReduceOp combine = op == ReduceOp::kMean ? ReduceOp::kSum : op;
  const ArrayRef total = Range(row, lane.index * seg, seg);
  MESHDMA_RETURN_IF_ERROR(RingReduceScatter<T>(
      lane, combine, row, nullptr, total, LanesFor(lane.size()),
      options.chunk_bytes, options.num_buffers));
  LocalCopy(Range(total, 0, output.num_elements()), output);
  if (op == ReduceOp::kMean) {
    DivideArray(output.data_as<T>(), output.num_elements(), group_size);
  }
  return absl::OkStatus();
}

// Hierarchical reduce-scatter of the 1-D `input` (count elements) over `g`:
// group position p gets segment p = ScatterSegment(count, n, p) of the
// reduction in `output`. Segments are padded to S = ceil(count / n) so that
// both rings cut exactly at segment bounds; with the caller at (host h,
// local index i):
//   step 1: pack my input into symmetric scratch, local-index-major: block
//           (j, k) at (j*H + k)*S holds segment positions[k][j] (zero
//           padded);
//   step 2: reduce-scatter the scratch over my host: blocks (i, *) hold my
//           host's reduction (skipped when m == 1);
//   step 3: reduce-scatter blocks (i, *) over my lane: block (i, h), my
//           segment, holds the total;
//   step 4: copy my segment to `output` (divided by n for kMean).
// With `host_direct`, steps 1 and 2 are one single-copy step: block (i, k)
// of my scratch row is the sum of segment positions[k][i] read in place
// from every host member's input (`kDirect`'s reads; through `board` where
// not null), then a `done` round over the host (direct.h, step 3) before the
// lane.
template <typename T>
absl::Status HierarchicalReduceScatter(const Group& g, const HostLayout& layout,
                                       ReduceOp op, const ArrayRef& input,
                                       const ArrayRef& output,
                                       const CollectiveOptions& options,
                                       bool host_direct,
                                       const ArrayRef* board) {
  const Group host = layout.Host(g);
  const Group lane = layout.Lane(g);
  const int n = g.size(), m = host.size(), hosts = lane.size();
  const int64_t count = input.num_elements();
  const int64_t seg = (count + n - 1) / n;
  const ReduceOp combine = op == ReduceOp::kMean ? ReduceOp::kSum : op;
  if (host_direct && m > 1) {
    // Steps 1-2, single-copy; my row is scratch of H segments.
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef row,
                             AllocateSymmetric(kDTypeOf<T>, {hosts * seg}));
    MESHDMA_ASSIGN_OR_RETURN(std::vector<MemberInput> ins,
                             MemberInputs(host, input, input, board));
    MESHDMA_ASSIGN_OR_RETURN(Semaphore done, AllocateDone());
    for (int k = 0; k < hosts; ++k) {
      const int p = layout.positions[k][host.index];
      const int64_t b = PartBegin(count, n, p);
      const int64_t len = PartBegin(count, n, p + 1) - b;
      T* block = row.data_as<T>() + k * seg;
      MESHDMA_RETURN_IF_ERROR(ReduceMembers<T>(combine, ins, b, len, &block, 1,
                                               /*stream=*/false));
      std::fill(block + len, block + seg, T{});
    }
    MESHDMA_RETURN_IF_ERROR(DirectFinish(host, done));
    return LaneReduceScatter<T>(lane, op, n, row, seg, output, options);
  }
  // Step 1.
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef packed,
                           AllocateSymmetric(kDTypeOf<T>, {n * seg}));
  if (RaceCheckingEnabled()) {
    AnnotateRead(input, "hierarchical packing read");
    AnnotateWrite(packed, "hierarchical packing write");
  }
  const T* in = input.data_as<const T>();
  T* pk = packed.data_as<T>();
  for (int j = 0; j < m; ++j) {
    for (int k = 0; k < hosts; ++k) {
      const int64_t b = PartBegin(count, n, layout.positions[k][j]);
      const int64_t len = PartBegin(count, n, layout.positions[k][j] + 1) - b;
      T* block = pk + (int64_t{j} * hosts + k) * seg;
      std::memcpy(block, in + b, len * sizeof(T));
      std::fill(block + len, block + seg, T{});
    }
  }
  // Step 2.
  const ArrayRef row = Range(packed, host.index * hosts * seg, hosts * seg);
  if (m > 1) {
    MESHDMA_RETURN_IF_ERROR(
        RingReduceScatter<T>(host, combine, packed, nullptr, row, LanesFor(m),
                             options.chunk_bytes, options.num_buffers));
  }
  return LaneReduceScatter<T>(lane, op, n, row, seg, output, options);
}

// Hierarchical all-gather over `g` of `own` (count elements) into the 1-D
// symmetric `output`, where group position p's block is [p*count,
// (p+1)*count); with the caller at (host h, local index i):
//   step 1: copy my block into place, unless `own` already is it (the
//           lane's ring does, while its first sends travel);
//   step 2: all-gather over my lane: blocks positions[*][i] arrive;
//   step 3: for each host k, all-gather over my host the blocks
//           positions[k][*] (one ring per host, the same on every host);
//           with `host_direct`, my H blocks stored into every host member's
//           output (direct.h, `DirectShareBlocks`).
// Every ring's state (or step 3's `done`) is allocated before the first
// step.
absl::Status HierarchicalAllGather(const Group& g, const HostLayout& layout,
                                   const ArrayRef& own, const ArrayRef& output,
                                   bool host_direct);

// Hierarchical all-to-all (all_to_all.h) of `input` into the symmetric,
// contiguous `output` over `g`: block q of `input` along `split_axis` goes to
// group position q, which concatenates the blocks bound for it along
// `concat_axis` in source position order. Blocks travel in slots of the
// largest block's bytes (blocks differ by up to one row of `split_axis`),
// each block contiguous in its own shape. With H hosts of m members each and
// the caller at (host h, local index i):
//   step 1: for each other local index j, pack the H blocks of my input
//           bound for positions[k][j] (k = 0..H-1) into staging and push
//           them in one DMA into slots (k, i) of member j's `gathered`
//           [H, m]; mine go straight into my own `gathered`, except my block
//           for myself, which goes straight into my output. Row k of a
//           member's `gathered` then holds its host's m blocks for lane
//           member k;
//   step 2: once the m-1 pushes of my host are in, push row k of my
//           `gathered` in one DMA into the row for host h of the `arrived`
//           scratch of member (k, i), for each other host k: H-1 messages
//           between hosts per device, instead of m (H-1) for one DMA per
//           peer;
//   step 3: copy the blocks of my host (row h of `gathered`, while step 2
//           is under way) and then of every other host (`arrived`) into my
//           output, at the position of their source.
// With an even split and hosts holding consecutive group positions, step 1
// pushes straight from the input when it is split along dimension 0 (no
// staging), and step 2 straight into the receiver's output when it is
// concatenated along dimension 0 (no `arrived`, no copy for other hosts).
// Each stage has its own pair of DMA semaphores, so that a fast lane peer's
// push cannot count as one of my host's; every DMA is waited before return.
// Scratch: up to 3n - H - m slots of the largest block (`gathered`, and
// `arrived` and step 1's staging where they are needed).
absl::Status HierarchicalAllToAll(const Group& g, const HostLayout& layout,
                                  const ArrayRef& input, const ArrayRef& output,
                                  int split_axis, int concat_axis);

}  // namespace meshdma::collectives_internal

#endif  // MESHDMA_COLLECTIVES_INTERNAL_HIERARCHY_H_
