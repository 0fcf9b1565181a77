#include "meshdma/collectives/internal/hierarchy.h"

#include <algorithm>
#include <array>
#include <functional>
#include <optional>

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

namespace {

// One hierarchical all-to-all (HierarchicalAllToAll, hierarchy.h): its
// groups, its scratch in slots of the largest block, and the views of
// blocks, slots and scratch that its steps use.
class AllToAllHierarchy {
 public:
  AllToAllHierarchy(const Group& g, const HostLayout& layout,
                    const ArrayRef& input, const ArrayRef& output,
                    int split_axis, int concat_axis);
  // Bytes of every slot; 0 when every block is empty.
  int64_t slot() const { return slot_; }
  // The scratch and the stages' semaphores (the same on every member).
  absl::Status Allocate();
  // Step 1: my block for myself into my output; the blocks for each local
  // index packed (from the input where it is laid out so); then pushed to
  // my host's members.
  absl::Status PushToHost();
  // Step 2: once my host's pushes are in, row k of `gathered` to member
  // (k, i) of every other host.
  absl::Status PushToLanes();
  // Step 3: my host's blocks, then the other hosts', into my output; then
  // my pushes have been read.
  absl::Status Unpack();

 private:
  int64_t Part(int q) const {
    return PartBegin(split_size_, n_, q + 1) - PartBegin(split_size_, n_, q);
  }
  // Row `x` of scratch with a row per host (or local index) but `self`'s.
  static int Skip(int x, int self) { return x < self ? x : x - 1; }
  // `count` slots from slot `first`, as bytes.
  ArrayRef SlotsAt(int64_t first, int64_t count) const {
    return Range(scratch_, first * slot_, count * slot_);
  }
  // The scratch from slot `first` viewed as the input's dtype and `shape`.
  ArrayRef ViewAt(int64_t first, std::span<const int64_t> shape) const {
    return *ArrayRef::Symmetric(scratch_.data() + first * slot_,
                                scratch_.heap_offset() + first * slot_,
                                input_.dtype(), shape);
  }
  // Slot `index` holding a block of `rows` rows of the split axis.
  ArrayRef BlockInSlot(int64_t index, int64_t rows) const {
    std::array<int64_t, kMaxRank> shape;
    std::copy(input_.shape().begin(), input_.shape().end(), shape.begin());
    shape[split_axis_] = rows;
    return ViewAt(index, std::span<const int64_t>(shape.data(), input_.rank()));
  }
  // Block of my input bound for position q, and the place in my output of
  // the block from position q.
  ArrayRef SendBlock(int q) const {
    return *input_.Slice(split_axis_, PartBegin(split_size_, n_, q), Part(q));
  }
  ArrayRef RecvBlock(int q) const {
    return *output_.Slice(concat_axis_, q * c_, c_);
  }
  // What I push to local index j: [H, 1, E] of the input's elements, or
  // [H, slot] bytes of staging.
  ArrayRef Packed(int j) const;
  // Local copies (strided either side) on `copy_sem_`; `WaitCopies` waits
  // for all started so far.
  absl::Status Copy(const ArrayRef& src, const ArrayRef& dst);
  absl::Status WaitCopies();
  // Step 1's packing: column i of `gathered` and, for the other local
  // indices, staging (or nothing, `from_input_`).
  absl::Status Pack();

  const Group& g_;
  const HostLayout& layout_;
  const ArrayRef& input_;
  const ArrayRef& output_;
  const int split_axis_, concat_axis_;
  const Group host_, lane_;
  const int n_, m_, hosts_, h_, i_;
  const int64_t split_size_;
  int64_t slot_ = 0;
  int64_t c_ = 0;  // Output rows of the concatenation axis per source.
  // Equal blocks and hosts holding consecutive group positions in order
  // (positions[k][j] == k m + j): split along dimension 0, the blocks for
  // local index j are every m-th block of the contiguous input, and step 1
  // pushes them from there (no staging); concatenated along dimension 0,
  // the blocks from host k are m consecutive blocks of the output, and step
  // 2 pushes them into place (no `arrived`, no copy).
  bool from_input_ = false, into_output_ = false;
  // Scratch, in slots: `gathered` [H, m], `arrived` [H-1, m] (rows of the
  // other hosts), `staging` [m-1, H] (rows of the other local indices).
  int64_t gathered_ = 0, arrived_ = 0, staging_ = 0, slots_ = 0;
  ArrayRef scratch_;
  Semaphore copy_sem_, host_send_, host_recv_, lane_send_, lane_recv_;
  int64_t copied_ = 0;
  ArrayRef column_;   // Column i of `gathered`.
  ArrayRef by_lane_;  // The input as [H, m, E] (`from_input_`).
  std::optional<AsyncCopyDescriptor> host_wait_, lane_wait_;
};

AllToAllHierarchy::AllToAllHierarchy(const Group& g, const HostLayout& layout,
                                     const ArrayRef& input,
                                     const ArrayRef& output, int split_axis,
                                     int concat_axis)
    : g_(g),
      layout_(layout),
      input_(input),
      output_(output),
      split_axis_(split_axis),
      concat_axis_(concat_axis),
      host_(layout.Host(g)),
      lane_(layout.Lane(g)),
      n_(g.size()),
      m_(host_.size()),
      hosts_(lane_.size()),
      h_(lane_.index),
      i_(host_.index),
      split_size_(input.dim(split_axis)) {
  int64_t largest = 0;
  for (int q = 0; q < n_; ++q) largest = std::max(largest, Part(q));
  const int64_t row_bytes =
      split_size_ == 0 ? 0 : input.size_bytes() / split_size_;
  slot_ = largest * row_bytes;
  c_ = output.dim(concat_axis) / n_;
  bool regular = split_size_ % n_ == 0;
  for (int k = 0; k < hosts_; ++k) {
    for (int j = 0; j < m_; ++j) {
      regular &= layout.positions[k][j] == k * m_ + j;
    }
  }
  from_input_ = regular && split_axis == 0 && input.is_contiguous();
  into_output_ = regular && concat_axis == 0;
  arrived_ = gathered_ + int64_t{hosts_} * m_;
  staging_ = arrived_ + (into_output_ ? 0 : int64_t{hosts_ - 1} * m_);
  slots_ = staging_ + (from_input_ ? 0 : int64_t{m_ - 1} * hosts_);
}

absl::Status AllToAllHierarchy::Allocate() {
  MESHDMA_ASSIGN_OR_RETURN(scratch_,
                           AllocateSymmetric(DType::kU8, {slots_ * slot_}));
  MESHDMA_ASSIGN_OR_RETURN(
      SemaphoreArray sems,
      AllocateSemaphoreArray(SemaphoreType::kDma, 5, "all_to_all hierarchy"));
  copy_sem_ = sems[0];
  host_send_ = sems[1];
  host_recv_ = sems[2];
  lane_send_ = sems[3];
  lane_recv_ = sems[4];
  return absl::OkStatus();
}

absl::Status AllToAllHierarchy::Copy(const ArrayRef& src, const ArrayRef& dst) {
  if (src.num_elements() == 0) return absl::OkStatus();
  copied_ += src.size_bytes();
  return make_async_copy(src, dst, copy_sem_).start();
}

absl::Status AllToAllHierarchy::WaitCopies() {
  if (copied_ == 0) return absl::OkStatus();
  const ArrayRef bytes = Range(scratch_, 0, copied_);
  copied_ = 0;
  return make_async_copy(bytes, bytes, copy_sem_).wait();
}

ArrayRef AllToAllHierarchy::Packed(int j) const {
  if (from_input_) return *by_lane_.Slice(1, j, 1);
  return *SlotsAt(staging_ + int64_t{Skip(j, i_)} * hosts_, hosts_)
              .Reshape({hosts_, slot_});
}

absl::Status AllToAllHierarchy::Pack() {
  if (from_input_) {
    const int64_t elems =
        slot_ / static_cast<int64_t>(DTypeSize(input_.dtype()));
    const int64_t by_lane[] = {hosts_, m_, elems};
    column_ = *ViewAt(gathered_, by_lane).Slice(1, i_, 1);
    by_lane_ = *input_.Reshape(by_lane);
    return Copy(Packed(i_), column_);
  }
  column_ = *SlotsAt(gathered_, int64_t{hosts_} * m_)
                 .Reshape({hosts_, m_ * slot_})
                 ->Slice(1, i_ * slot_, slot_);
  for (int j = 0; j < m_; ++j) {
    for (int k = 0; k < hosts_; ++k) {
      const int q = layout_.positions[k][j];
      if (q == g_.index) continue;
      const int64_t index = j == i_
                                ? gathered_ + int64_t{k} * m_ + i_
                                : staging_ + int64_t{Skip(j, i_)} * hosts_ + k;
      MESHDMA_RETURN_IF_ERROR(Copy(SendBlock(q), BlockInSlot(index, Part(q))));
    }
  }
  return absl::OkStatus();
}

absl::Status AllToAllHierarchy::PushToHost() {
  MESHDMA_RETURN_IF_ERROR(Copy(SendBlock(g_.index), RecvBlock(g_.index)));
  MESHDMA_RETURN_IF_ERROR(Pack());
  MESHDMA_RETURN_IF_ERROR(WaitCopies());
  for (int step = 1; step < m_; ++step) {
    const int j = (i_ + step) % m_;
    MESHDMA_RETURN_IF_ERROR(
        RemoteCopy(Packed(j), column_, host_send_, host_recv_, host_.members[j])
            .start());
  }
  return absl::OkStatus();
}

absl::Status AllToAllHierarchy::PushToLanes() {
  // One wait for the m-1 pushes: the byte counts add up.
  const ArrayRef from_host = SlotsAt(0, int64_t{m_ - 1} * hosts_);
  host_wait_ =
      RemoteCopy(from_host, from_host, host_send_, host_recv_, host_.Peer(1));
  if (m_ > 1) MESHDMA_RETURN_IF_ERROR(host_wait_->wait_recv());
  // Where my host's blocks go on member (k, i) with `into_output_`: rows
  // [h m c, (h+1) m c) of its output.
  const ArrayRef my_hosts_blocks =
      into_output_ ? *output_.Slice(0, int64_t{h_} * m_ * c_, m_ * c_)
                   : output_;
  for (int step = 1; step < hosts_; ++step) {
    const int k = (h_ + step) % hosts_;
    const int64_t row = gathered_ + int64_t{k} * m_;
    MESHDMA_RETURN_IF_ERROR(
        (into_output_
             ? RemoteCopy(ViewAt(row, my_hosts_blocks.shape()), my_hosts_blocks,
                          lane_send_, lane_recv_, lane_.members[k])
             : RemoteCopy(SlotsAt(row, m_),
                          SlotsAt(arrived_ + int64_t{Skip(h_, k)} * m_, m_),
                          lane_send_, lane_recv_, lane_.members[k]))
            .start());
  }
  return absl::OkStatus();
}

absl::Status AllToAllHierarchy::Unpack() {
  const int64_t rows = Part(g_.index);
  for (int j = 0; j < m_; ++j) {
    if (j == i_) continue;
    MESHDMA_RETURN_IF_ERROR(
        Copy(BlockInSlot(gathered_ + int64_t{h_} * m_ + j, rows),
             RecvBlock(layout_.positions[h_][j])));
  }
  const ArrayRef from_lane = SlotsAt(0, int64_t{hosts_ - 1} * m_);
  lane_wait_ =
      RemoteCopy(from_lane, from_lane, lane_send_, lane_recv_, lane_.Peer(1));
  MESHDMA_RETURN_IF_ERROR(lane_wait_->wait_recv());
  for (int k = 0; k < hosts_ && !into_output_; ++k) {
    if (k == h_) continue;
    for (int j = 0; j < m_; ++j) {
      MESHDMA_RETURN_IF_ERROR(
          Copy(BlockInSlot(arrived_ + int64_t{Skip(k, h_)} * m_ + j, rows),
               RecvBlock(layout_.positions[k][j])));
    }
  }
  MESHDMA_RETURN_IF_ERROR(WaitCopies());
  // My pushes have been read (before the kernel's scope frees the scratch).
  if (m_ > 1) MESHDMA_RETURN_IF_ERROR(host_wait_->wait_send());
  return lane_wait_->wait_send();
}

}  // namespace

absl::Status HierarchicalAllToAll(const Group& g, const HostLayout& layout,
                                  const ArrayRef& input, const ArrayRef& output,
                                  int split_axis, int concat_axis) {
  AllToAllHierarchy a(g, layout, input, output, split_axis, concat_axis);
  if (a.slot() == 0) return absl::OkStatus();  // Every block is empty.
  MESHDMA_RETURN_IF_ERROR(a.Allocate());
  // Step 1: pack, and push to my host's members.
  MESHDMA_RETURN_IF_ERROR(a.PushToHost());
  // Step 2: my host's rows to the other hosts.
  MESHDMA_RETURN_IF_ERROR(a.PushToLanes());
  // Step 3: unpack into my output.
  return a.Unpack();
}

}  // namespace meshdma::collectives_internal
