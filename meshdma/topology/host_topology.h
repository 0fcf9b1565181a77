// The host's hardware topology as hwloc reports it: packages, NUMA nodes, L3
// domains, cores and their processing units (PUs), with OS indices. Owns the
// hwloc topology (RAII, move-only). Where hwloc sees nothing useful (no cores,
// a failing load) `Discover` falls back to a flat topology of
// `std::thread::hardware_concurrency()` cores with a warning on stderr; it
// never fails because of the machine.
#ifndef MESHDMA_TOPOLOGY_HOST_TOPOLOGY_H_
#define MESHDMA_TOPOLOGY_HOST_TOPOLOGY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace meshdma {

struct CoreInfo {
  int index = 0;      // Logical index, 0..num_cores-1, in hwloc order.
  int os_index = 0;   // The OS's index for the core.
  int package = 0;    // Logical index of the package that holds it.
  int numa_node = 0;  // Logical index of its NUMA node.
  int l3_domain = 0;  // Logical index of the L3 cache it shares.
  std::vector<int> pu_os_indices;  // OS indices of its hardware threads.
};

class HostTopology {
 public:
  // Loads the topology of the machine this process runs on.
  static absl::StatusOr<HostTopology> Discover();
  // A topology of `num_cores` cores in one package, NUMA node and L3 domain,
  // with no hwloc handle (pinning is then a no-op). For tests and fallback.
  static HostTopology Flat(int num_cores);

  HostTopology(HostTopology&&) noexcept;
  HostTopology& operator=(HostTopology&&) noexcept;
  ~HostTopology();

  int num_packages() const { return num_packages_; }
  int num_numa_nodes() const { return num_numa_nodes_; }
  int num_l3_domains() const { return num_l3_domains_; }
  int num_cores() const { return static_cast<int>(cores_.size()); }
  int num_pus() const;
  // Cores in hwloc's logical order, which keeps cores that share a package,
  // NUMA node and L3 contiguous.
  const std::vector<CoreInfo>& cores() const { return cores_; }
  // True when hwloc could not be used and this is `Flat`.
  bool is_fallback() const { return is_fallback_; }

  // Binds the calling thread to core `core_index` (logical) or to all PUs of
  // NUMA node `numa_index`. Out-of-range indices are an InvalidArgument error
  // naming the index and the count; a refused binding is an error naming the
  // core. On a fallback topology both return OK and do nothing.
  absl::Status PinThreadToCore(int core_index) const;
  absl::Status PinThreadToNuma(int numa_index) const;

  // A multi-line human description ("2 cores in 1 package, 1 NUMA node, ...").
  std::string Describe() const;

 private:
  HostTopology() = default;
  struct HwlocHandle;
  std::unique_ptr<HwlocHandle> hwloc_;
  int num_packages_ = 1;
  int num_numa_nodes_ = 1;
  int num_l3_domains_ = 1;
  std::vector<CoreInfo> cores_;
  bool is_fallback_ = false;
};

}  // namespace meshdma

#endif  // MESHDMA_TOPOLOGY_HOST_TOPOLOGY_H_
