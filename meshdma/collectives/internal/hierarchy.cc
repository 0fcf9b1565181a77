#include "meshdma/collectives/internal/hierarchy.h"

#include <algorithm>

#include "meshdma/dma/internal/device.h"
#include "meshdma/dma/internal/runtime_impl.h"

namespace meshdma::collectives_internal {

absl::StatusOr<HostLayout> HostLayoutOf(const Group& g) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * device,
                           dma_internal::RequireDevice("HostLayoutOf"));
  const Launch& launch = device->runtime()->launch();
  HostLayout layout;
  // 1. Hosts in the order of their first member; members in group order.
  std::vector<int> host_ids;
  for (int p = 0; p < g.size(); ++p) {
    MESHDMA_ASSIGN_OR_RETURN(int global, g.mesh->GlobalDevice(g.members[p]));
    const int id = launch.devices()[global].host_index;
    const auto it = std::find(host_ids.begin(), host_ids.end(), id);
    const int h = static_cast<int>(it - host_ids.begin());
    if (it == host_ids.end()) {
      host_ids.push_back(id);
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
  for (const std::vector<int>& members : layout.positions) {
    if (static_cast<int>(members.size()) != layout.per_host) {
      layout.per_host = 0;
    }
  }
  return layout;
}

absl::StatusOr<int> EvenHostsFor(const Group& g, int64_t bytes,
                                 const CollectiveOptions& options,
                                 HostLayout* layout) {
  const bool wanted = options.algorithm == CollectiveAlgorithm::kHierarchical ||
                      (options.algorithm == CollectiveAlgorithm::kAuto &&
                       bytes > options.one_shot_max_bytes);
  if (!wanted || g.size() < 2) return 1;
  MESHDMA_ASSIGN_OR_RETURN(*layout, HostLayoutOf(g));
  return layout->EvenHosts();
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
                                   const ArrayRef& own,
                                   const ArrayRef& output) {
  const Group host = layout.Host(g);
  const Group lane = layout.Lane(g);
  const int m = host.size(), hosts = lane.size();
  const int64_t count = own.num_elements();
  // Every ring's state first, the same sequence on every member.
  MESHDMA_ASSIGN_OR_RETURN(AllGatherState lane_state,
                           AllocateAllGather(lane, 1));
  std::vector<AllGatherState> host_states(hosts);
  if (m > 1) {
    for (AllGatherState& state : host_states) {
      MESHDMA_ASSIGN_OR_RETURN(state, AllocateAllGather(host, 1));
    }
  }
  // Step 1.
  const ArrayRef mine = Range(output, g.index * count, count);
  if (count > 0) {
    LocalCopy(own, mine);
  }
  // Step 2.
  std::vector<int64_t> begins(std::max(m, hosts)), lens(begins.size(), count);
  for (int k = 0; k < hosts; ++k) {
    begins[k] = layout.positions[k][layout.local] * count;
  }
  MESHDMA_RETURN_IF_ERROR(RingAllGather(
      lane, mine, output, std::span<const int64_t>(begins.data(), hosts),
      std::span<const int64_t>(lens.data(), hosts), lane_state));
  // Step 3.
  if (m == 1) return absl::OkStatus();
  for (int k = 0; k < hosts; ++k) {
    for (int j = 0; j < m; ++j) begins[j] = layout.positions[k][j] * count;
    const ArrayRef block = Range(output, begins[layout.local], count);
    MESHDMA_RETURN_IF_ERROR(RingAllGather(
        host, block, output, std::span<const int64_t>(begins.data(), m),
        std::span<const int64_t>(lens.data(), m), host_states[k]));
  }
  return absl::OkStatus();
}

}  // namespace meshdma::collectives_internal
