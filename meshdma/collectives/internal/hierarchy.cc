#include "meshdma/collectives/internal/hierarchy.h"

#include <algorithm>
#include <array>
#include <functional>

#include "absl/strings/str_cat.h"
#include "meshdma/base/logging.h"
#include "meshdma/dma/internal/device.h"
#include "meshdma/dma/internal/runtime_impl.h"

namespace meshdma::collectives_internal {

absl::StatusOr<HostLayout> HostLayoutOf(const Group& g) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * device,
                           dma_internal::RequireDevice("HostLayoutOf"));
  const Launch& launch = device->runtime()->launch();
  std::vector<int> host(g.size()), process(g.size());
  for (int p = 0; p < g.size(); ++p) {
    MESHDMA_ASSIGN_OR_RETURN(int global, g.mesh->GlobalDevice(g.members[p]));
    host[p] = launch.devices()[global].host_index;
    process[p] = launch.devices()[global].rank;
  }
  return HostLayoutFrom(g, host, process);
}

HostLayout HostLayoutFrom(const Group& g, std::span<const int> host,
                          std::span<const int> process) {
  HostLayout layout;
  // 1. Hosts in the order of their first member; members in group order.
  std::vector<int> host_ids;
  for (int p = 0; p < g.size(); ++p) {
    const auto it = std::find(host_ids.begin(), host_ids.end(), host[p]);
    const int h = static_cast<int>(it - host_ids.begin());
    if (it == host_ids.end()) {
      host_ids.push_back(host[p]);
      layout.positions.emplace_back();
    }
    if (p == g.index) {
      layout.host = h;
      layout.local = static_cast<int>(layout.positions[h].size());
    }
    layout.positions[h].push_back(p);
  }
  // 2. Even when every host holds as many members as the first.
  layout.num_hosts = static_cast<int>(host_ids.size());
  layout.per_host = static_cast<int>(layout.positions[0].size());
  layout.hosts_are_processes = true;
  for (const std::vector<int>& members : layout.positions) {
    if (static_cast<int>(members.size()) != layout.per_host) {
      layout.per_host = 0;
    }
    // 3. Whether each host's members are devices of one process.
    for (int p : members) {
      layout.hosts_are_processes &= process[p] == process[members[0]];
    }
  }
  return layout;
}

Group HostLayout::Host(const Group& g) const {
  Group sub = g;
  sub.members.clear();
  for (int p : positions[host]) sub.members.push_back(g.members[p]);
  sub.index = local;
  return sub;
}

Group HostLayout::Lane(const Group& g) const {
  Group sub = g;
  sub.members.clear();
  for (const std::vector<int>& members : positions) {
    sub.members.push_back(g.members[members[local]]);
  }
  sub.index = host;
  return sub;
}

absl::Status HierarchicalAllGather(const Group& g, const HostLayout& layout,
                                   const ArrayRef& own, const ArrayRef& output,
                                   bool host_direct) {
  const Group host = layout.Host(g);
  const Group lane = layout.Lane(g);
  const int m = host.size(), hosts = lane.size();
  const int64_t count = own.num_elements();
  // Every ring's state first, the same sequence on every member.
  MESHDMA_ASSIGN_OR_RETURN(AllGatherState lane_state,
                           AllocateAllGather(lane, 1));
  std::vector<AllGatherState> host_states(hosts);
  Semaphore shared;  // Step 3's `done` with host_direct.
  if (m > 1 && host_direct) {
    MESHDMA_ASSIGN_OR_RETURN(shared, AllocateDone());
  } else if (m > 1) {
    for (AllGatherState& state : host_states) {
      MESHDMA_ASSIGN_OR_RETURN(state, AllocateAllGather(host, 1));
    }
  }
  // Steps 1 and 2: the lane's ring copies my block into `output` (at
  // begins[my host] = g.index * count) while its first sends travel.
  std::vector<int64_t> begins(std::max(m, hosts)), lens(begins.size(), count);
  for (int k = 0; k < hosts; ++k) {
    begins[k] = layout.positions[k][layout.local] * count;
  }
  MESHDMA_RETURN_IF_ERROR(RingAllGather(
      lane, own, output, std::span<const int64_t>(begins.data(), hosts),
      std::span<const int64_t>(lens.data(), hosts), lane_state));
  // Step 3.
  if (m == 1) return absl::OkStatus();
  if (host_direct) {
    std::vector<std::pair<int64_t, int64_t>> mine(hosts);
    for (int k = 0; k < hosts; ++k) mine[k] = {begins[k], count};
    return DirectShareBlocks(host, output, mine, shared);
  }
  for (int k = 0; k < hosts; ++k) {
    for (int j = 0; j < m; ++j) begins[j] = layout.positions[k][j] * count;
    const ArrayRef block = Range(output, begins[layout.local], count);
    MESHDMA_RETURN_IF_ERROR(RingAllGather(
        host, block, output, std::span<const int64_t>(begins.data(), m),
        std::span<const int64_t>(lens.data(), m), host_states[k]));
  }
  return absl::OkStatus();
}

absl::Status HierarchicalAllToAll(const Group& g, const HostLayout& layout,
                                  const ArrayRef& input, const ArrayRef& output,
                                  int split_axis, int concat_axis) {
  const Group host = layout.Host(g);
  const Group lane = layout.Lane(g);
  const int n = g.size(), m = host.size(), hosts = lane.size();
  const int h = lane.index, i = host.index;
  const int64_t split_size = input.dim(split_axis);
  auto part = [&](int q) {
    return PartBegin(split_size, n, q + 1) - PartBegin(split_size, n, q);
  };
  int64_t largest = 0;
  for (int q = 0; q < n; ++q) largest = std::max(largest, part(q));
  const int64_t row_bytes =
      split_size == 0 ? 0 : input.size_bytes() / split_size;
  const int64_t slot = largest * row_bytes;  // Bytes of every slot.
  if (slot == 0) return absl::OkStatus();    // Every block is empty.
  // Equal blocks, and hosts holding consecutive group positions in order
  // (positions[k][j] == k m + j): then, split along dimension 0, the blocks
  // for local index j are every m-th block of the contiguous input, and
  // step 1 pushes them from there (no staging); concatenated along
  // dimension 0, the blocks from host k are m consecutive blocks of the
  // output, and step 2 pushes them into place (no `arrived`, no copy).
  bool regular = split_size % n == 0;
  for (int k = 0; k < hosts; ++k) {
    for (int j = 0; j < m; ++j) regular &= layout.positions[k][j] == k * m + j;
  }
  const bool from_input = regular && split_axis == 0 && input.is_contiguous();
  const bool into_output = regular && concat_axis == 0;
  // Row `x` of scratch with a row per host (or local index) but `self`'s.
  auto skip = [](int x, int self) { return x < self ? x : x - 1; };
  // Scratch, in slots: `gathered` [H, m], `arrived` [H-1, m] (rows of the
  // other hosts), `staging` [m-1, H] (rows of the other local indices).
  const int64_t gathered = 0;
  const int64_t arrived = gathered + int64_t{hosts} * m;
  const int64_t staging = arrived + (into_output ? 0 : int64_t{hosts - 1} * m);
  const int64_t slots = staging + (from_input ? 0 : int64_t{m - 1} * hosts);
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef scratch,
                           AllocateSymmetric(DType::kU8, {slots * slot}));
  MESHDMA_ASSIGN_OR_RETURN(
      SemaphoreArray sems,
      AllocateSemaphoreArray(SemaphoreType::kDma, 5, "all_to_all hierarchy"));
  const Semaphore copy_sem = sems[0], host_send = sems[1], host_recv = sems[2],
                  lane_send = sems[3], lane_recv = sems[4];
  // `count` slots from slot `first`, as bytes.
  auto slots_at = [&](int64_t first, int64_t count) {
    return Range(scratch, first * slot, count * slot);
  };
  // The scratch from slot `first` viewed as `input`'s dtype and `shape`.
  auto view_at = [&](int64_t first, std::span<const int64_t> shape) {
    return *ArrayRef::Symmetric(scratch.data() + first * slot,
                                scratch.heap_offset() + first * slot,
                                input.dtype(), shape);
  };
  // Slot `index` holding a block of `rows` rows of `split_axis`.
  std::array<int64_t, kMaxRank> shape;
  std::copy(input.shape().begin(), input.shape().end(), shape.begin());
  auto block_in_slot = [&](int64_t index, int64_t rows) {
    shape[split_axis] = rows;
    return view_at(index, std::span<const int64_t>(shape.data(), input.rank()));
  };
  // Block of my input bound for position q, and the place in my output of
  // the block from position q.
  const int64_t c = output.dim(concat_axis) / n;
  auto send_block = [&](int q) {
    return *input.Slice(split_axis, PartBegin(split_size, n, q), part(q));
  };
  auto recv_block = [&](int q) { return *output.Slice(concat_axis, q * c, c); };
  // Local copies (strided either side) on `copy_sem`; `wait_copies` waits
  // for all started so far.
  int64_t copied = 0;
  auto copy = [&](const ArrayRef& src, const ArrayRef& dst) -> absl::Status {
    if (src.num_elements() == 0) return absl::OkStatus();
    copied += src.size_bytes();
    return make_async_copy(src, dst, copy_sem).start();
  };
  auto wait_copies = [&]() -> absl::Status {
    if (copied == 0) return absl::OkStatus();
    const ArrayRef bytes = Range(scratch, 0, copied);
    copied = 0;
    return make_async_copy(bytes, bytes, copy_sem).wait();
  };
  // Step 1. My block for myself goes straight into my output.
  MESHDMA_RETURN_IF_ERROR(copy(send_block(g.index), recv_block(g.index)));
  // Column i of `gathered`: [H, 1, E] of the input's elements, or [H, slot]
  // bytes, with a stride of m slots; what I push to local index j, the
  // same shape.
  const int64_t elems = slot / DTypeSize(input.dtype());
  const int64_t by_lane[] = {hosts, m, elems};
  ArrayRef column;
  std::function<ArrayRef(int)> packed;
  if (from_input) {
    column = *view_at(gathered, by_lane).Slice(1, i, 1);
    const ArrayRef in = *input.Reshape(by_lane);
    packed = [in](int j) { return *in.Slice(1, j, 1); };
    MESHDMA_RETURN_IF_ERROR(copy(packed(i), column));
  } else {
    column = *slots_at(gathered, int64_t{hosts} * m)
                  .Reshape({hosts, m * slot})
                  ->Slice(1, i * slot, slot);
    packed = [&](int j) {
      return *slots_at(staging + int64_t{skip(j, i)} * hosts, hosts)
                  .Reshape({hosts, slot});
    };
    for (int j = 0; j < m; ++j) {
      for (int k = 0; k < hosts; ++k) {
        const int q = layout.positions[k][j];
        if (q == g.index) continue;
        const int64_t index = j == i
                                  ? gathered + int64_t{k} * m + i
                                  : staging + int64_t{skip(j, i)} * hosts + k;
        MESHDMA_RETURN_IF_ERROR(
            copy(send_block(q), block_in_slot(index, part(q))));
      }
    }
  }
  MESHDMA_RETURN_IF_ERROR(wait_copies());
  for (int step = 1; step < m; ++step) {
    const int j = (i + step) % m;
    MESHDMA_RETURN_IF_ERROR(
        RemoteCopy(packed(j), column, host_send, host_recv, host.members[j])
            .start());
  }
  // Step 2 (one wait for the m-1 pushes: the byte counts add up).
  const ArrayRef from_host = slots_at(0, int64_t{m - 1} * hosts);
  AsyncCopyDescriptor host_wait =
      RemoteCopy(from_host, from_host, host_send, host_recv, host.Peer(1));
  if (m > 1) MESHDMA_RETURN_IF_ERROR(host_wait.wait_recv());
  // Where my host's blocks go on member (k, i) with `into_output`: rows
  // [h m c, (h+1) m c) of its output.
  const ArrayRef my_hosts_blocks =
      into_output ? *output.Slice(0, int64_t{h} * m * c, m * c) : output;
  for (int step = 1; step < hosts; ++step) {
    const int k = (h + step) % hosts;
    const int64_t row = gathered + int64_t{k} * m;
    MESHDMA_RETURN_IF_ERROR(
        (into_output
             ? RemoteCopy(view_at(row, my_hosts_blocks.shape()),
                          my_hosts_blocks, lane_send, lane_recv,
                          lane.members[k])
             : RemoteCopy(slots_at(row, m),
                          slots_at(arrived + int64_t{skip(h, k)} * m, m),
                          lane_send, lane_recv, lane.members[k]))
            .start());
  }
  // Step 3: my host's blocks while the other hosts' travel, then theirs.
  const int64_t rows = part(g.index);
  for (int j = 0; j < m; ++j) {
    if (j == i) continue;
    MESHDMA_RETURN_IF_ERROR(
        copy(block_in_slot(gathered + int64_t{h} * m + j, rows),
             recv_block(layout.positions[h][j])));
  }
  const ArrayRef from_lane = slots_at(0, int64_t{hosts - 1} * m);
  AsyncCopyDescriptor lane_wait =
      RemoteCopy(from_lane, from_lane, lane_send, lane_recv, lane.Peer(1));
  MESHDMA_RETURN_IF_ERROR(lane_wait.wait_recv());
  for (int k = 0; k < hosts && !into_output; ++k) {
    if (k == h) continue;
    for (int j = 0; j < m; ++j) {
      MESHDMA_RETURN_IF_ERROR(
          copy(block_in_slot(arrived + int64_t{skip(k, h)} * m + j, rows),
               recv_block(layout.positions[k][j])));
    }
  }
  MESHDMA_RETURN_IF_ERROR(wait_copies());
  // My pushes have been read (before the kernel's scope frees the scratch).
  if (m > 1) MESHDMA_RETURN_IF_ERROR(host_wait.wait_send());
  return lane_wait.wait_send();
}

}  // namespace meshdma::collectives_internal
