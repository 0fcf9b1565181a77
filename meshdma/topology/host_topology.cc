#include "meshdma/topology/host_topology.h"

#include <hwloc.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace meshdma {

// Owns the hwloc topology and the objects `HostTopology` refers to. The
// object pointers stay valid for the topology's lifetime.
struct HostTopology::HwlocHandle {
  hwloc_topology_t topology = nullptr;
  std::vector<hwloc_obj_t> cores;       // Indexed by logical core index.
  std::vector<hwloc_obj_t> numa_nodes;  // Indexed by logical NUMA index.
  std::vector<uint64_t> numa_memory;    // Local memory of each NUMA node.
  std::vector<uint64_t> l3_sizes;       // Size of each L3 cache in bytes.

  HwlocHandle() = default;
  HwlocHandle(const HwlocHandle&) = delete;
  HwlocHandle& operator=(const HwlocHandle&) = delete;
  ~HwlocHandle() {
    if (topology != nullptr) hwloc_topology_destroy(topology);
  }
};

namespace {

// Logical index of `obj`'s ancestor of `type`, or 0 when there is none.
int AncestorIndex(hwloc_topology_t topology, hwloc_obj_type_t type,
                  hwloc_obj_t obj) {
  hwloc_obj_t ancestor = hwloc_get_ancestor_obj_by_type(topology, type, obj);
  return ancestor != nullptr ? static_cast<int>(ancestor->logical_index) : 0;
}

// "0-3", "0,2,5": a compact list of ascending integers.
std::string Ranges(const std::vector<int>& values) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < values.size();) {
    size_t j = i;
    while (j + 1 < values.size() && values[j + 1] == values[j] + 1) ++j;
    parts.push_back(j == i ? absl::StrCat(values[i])
                           : absl::StrCat(values[i], "-", values[j]));
    i = j + 1;
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, ",");
}

std::string Bytes(uint64_t bytes) {
  if (bytes >= (uint64_t{1} << 30)) {
    return absl::StrFormat("%.1f GiB", bytes / double{1 << 30});
  }
  if (bytes >= (uint64_t{1} << 20)) {
    return absl::StrFormat("%.1f MiB", bytes / double{1 << 20});
  }
  return absl::StrFormat("%d KiB", bytes >> 10);
}

std::string Plural(int n, const char* one, const char* many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

}  // namespace

HostTopology::HostTopology(HostTopology&&) noexcept = default;
HostTopology& HostTopology::operator=(HostTopology&&) noexcept = default;
HostTopology::~HostTopology() = default;

HostTopology HostTopology::Flat(int num_cores) {
  if (num_cores < 1) num_cores = 1;
  HostTopology topo;
  topo.is_fallback_ = true;
  topo.cores_.resize(num_cores);
  for (int i = 0; i < num_cores; ++i) {
    CoreInfo& core = topo.cores_[i];
    core.index = i;
    core.os_index = i;
    core.pu_os_indices = {i};
  }
  return topo;
}

absl::StatusOr<HostTopology> HostTopology::Discover() {
  auto fallback = [](const std::string& why) {
    const int n = static_cast<int>(std::thread::hardware_concurrency());
    std::fprintf(stderr,
                 "meshdma: warning: %s; using a flat topology of %d cores\n",
                 why.c_str(), n < 1 ? 1 : n);
    return Flat(n);
  };

  // Step 1: load hwloc's view of this machine (only the PUs this process may
  // use, which is hwloc 2's default).
  auto handle = std::make_unique<HwlocHandle>();
  if (hwloc_topology_init(&handle->topology) != 0) {
    handle->topology = nullptr;
    return fallback(
        absl::StrCat("hwloc_topology_init failed: ", std::strerror(errno)));
  }
  if (hwloc_topology_load(handle->topology) != 0) {
    return fallback(
        absl::StrCat("hwloc_topology_load failed: ", std::strerror(errno)));
  }
  hwloc_topology_t t = handle->topology;
  const int num_cores = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
  if (num_cores <= 0) return fallback("hwloc reports no cores");

  // Step 2: NUMA nodes and L3 caches (hwloc 2: NUMA nodes are memory children,
  // so a core's NUMA node is the one whose cpuset covers it).
  HostTopology topo;
  const int num_numa = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < num_numa; ++i) {
    hwloc_obj_t numa = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, i);
    handle->numa_nodes.push_back(numa);
    handle->numa_memory.push_back(numa->attr->numanode.local_memory);
  }
  const int num_l3 = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_L3CACHE);
  for (int i = 0; i < num_l3; ++i) {
    hwloc_obj_t l3 = hwloc_get_obj_by_type(t, HWLOC_OBJ_L3CACHE, i);
    handle->l3_sizes.push_back(l3->attr->cache.size);
  }
  topo.num_packages_ =
      std::max(1, hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE));
  topo.num_numa_nodes_ = std::max(1, num_numa);
  topo.num_l3_domains_ = std::max(1, num_l3);

  // Step 3: cores in logical order, each with its package, NUMA node, L3 and
  // PUs.
  for (int i = 0; i < num_cores; ++i) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(t, HWLOC_OBJ_CORE, i);
    CoreInfo core;
    core.index = i;
    core.os_index = static_cast<int>(obj->os_index);
    core.package = AncestorIndex(t, HWLOC_OBJ_PACKAGE, obj);
    core.l3_domain = AncestorIndex(t, HWLOC_OBJ_L3CACHE, obj);
    for (size_t n = 0; n < handle->numa_nodes.size(); ++n) {
      if (hwloc_bitmap_intersects(handle->numa_nodes[n]->cpuset, obj->cpuset)) {
        core.numa_node = static_cast<int>(n);
        break;
      }
    }
    for (hwloc_obj_t pu = hwloc_get_next_obj_inside_cpuset_by_type(
             t, obj->cpuset, HWLOC_OBJ_PU, nullptr);
         pu != nullptr; pu = hwloc_get_next_obj_inside_cpuset_by_type(
                            t, obj->cpuset, HWLOC_OBJ_PU, pu)) {
      core.pu_os_indices.push_back(static_cast<int>(pu->os_index));
    }
    handle->cores.push_back(obj);
    topo.cores_.push_back(std::move(core));
  }
  topo.hwloc_ = std::move(handle);
  return topo;
}

int HostTopology::num_pus() const {
  int n = 0;
  for (const CoreInfo& core : cores_) {
    n += static_cast<int>(core.pu_os_indices.size());
  }
  return n;
}

absl::Status HostTopology::PinThreadToCore(int core_index) const {
  if (core_index < 0 || core_index >= num_cores()) {
    return absl::InvalidArgumentError(
        absl::StrCat("core index ", core_index, " out of range: this host has ",
                     num_cores(), " cores"));
  }
  if (hwloc_ == nullptr) return absl::OkStatus();
  if (hwloc_set_cpubind(hwloc_->topology, hwloc_->cores[core_index]->cpuset,
                        HWLOC_CPUBIND_THREAD) != 0) {
    return absl::InternalError(absl::StrCat(
        "binding the thread to core ", core_index, " (OS index ",
        cores_[core_index].os_index, ") failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status HostTopology::PinThreadToNuma(int numa_index) const {
  if (numa_index < 0 || numa_index >= num_numa_nodes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NUMA node index ", numa_index, " out of range: this host has ",
        num_numa_nodes(), " NUMA nodes"));
  }
  if (hwloc_ == nullptr) return absl::OkStatus();
  if (hwloc_->numa_nodes.empty()) {
    // hwloc reported no NUMA node: the whole machine is node 0.
    if (hwloc_set_cpubind(hwloc_->topology,
                          hwloc_topology_get_topology_cpuset(hwloc_->topology),
                          HWLOC_CPUBIND_THREAD) != 0) {
      return absl::InternalError(absl::StrCat(
          "binding the thread to NUMA node 0 failed: ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }
  if (hwloc_set_cpubind(hwloc_->topology,
                        hwloc_->numa_nodes[numa_index]->cpuset,
                        HWLOC_CPUBIND_THREAD) != 0) {
    return absl::InternalError(absl::StrCat("binding the thread to NUMA node ",
                                            numa_index,
                                            " failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

std::string HostTopology::Describe() const {
  std::string out = absl::StrCat(
      "host topology", is_fallback_ ? " (flat fallback, no hwloc)" : " (hwloc)",
      ": ", Plural(num_cores(), "core", "cores"), ", ",
      Plural(num_pus(), "PU", "PUs"), " in ",
      Plural(num_packages_, "package", "packages"), ", ",
      Plural(num_numa_nodes_, "NUMA node", "NUMA nodes"), ", ",
      Plural(num_l3_domains_, "L3 domain", "L3 domains"), "\n");
  auto cores_where = [&](auto pred) {
    std::vector<int> ids;
    for (const CoreInfo& core : cores_) {
      if (pred(core)) ids.push_back(core.index);
    }
    return Ranges(ids);
  };
  for (int p = 0; p < num_packages_; ++p) {
    absl::StrAppend(
        &out, "  package ", p, ": cores ",
        cores_where([p](const CoreInfo& c) { return c.package == p; }), "\n");
  }
  for (int n = 0; n < num_numa_nodes_; ++n) {
    absl::StrAppend(
        &out, "  NUMA node ", n, ": cores ",
        cores_where([n](const CoreInfo& c) { return c.numa_node == n; }));
    if (hwloc_ != nullptr && n < static_cast<int>(hwloc_->numa_memory.size())) {
      absl::StrAppend(&out, ", memory ", Bytes(hwloc_->numa_memory[n]));
    }
    absl::StrAppend(&out, "\n");
  }
  for (int l = 0; l < num_l3_domains_; ++l) {
    absl::StrAppend(
        &out, "  L3 ", l, ": cores ",
        cores_where([l](const CoreInfo& c) { return c.l3_domain == l; }));
    if (hwloc_ != nullptr && l < static_cast<int>(hwloc_->l3_sizes.size())) {
      absl::StrAppend(&out, ", ", Bytes(hwloc_->l3_sizes[l]));
    }
    absl::StrAppend(&out, "\n");
  }
  for (const CoreInfo& core : cores_) {
    absl::StrAppend(&out, "  core ", core.index, ": OS index ", core.os_index,
                    ", package ", core.package, ", NUMA ", core.numa_node,
                    ", L3 ", core.l3_domain, ", PUs ",
                    Ranges(core.pu_os_indices), "\n");
  }
  return out;
}

}  // namespace meshdma
