// The processes, hosts and devices of one launch, and their global order.
//
// A global device is (process rank, local index): a thread of that process. A
// process holds one or more devices. The global order is topology-aware: the
// devices of one host are contiguous (hosts ordered by their lowest rank),
// within a host processes follow their rank, and a process's devices follow
// the cores they are pinned to in hwloc order, so consecutive devices (ring
// neighbours) share an L3 / NUMA node wherever the machine allows.
#ifndef MESHDMA_TOPOLOGY_LAUNCH_H_
#define MESHDMA_TOPOLOGY_LAUNCH_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "meshdma/base/config.h"
#include "meshdma/topology/host_topology.h"
#include "meshdma/topology/process_group.h"

namespace meshdma {

// Environment variables read by the launch description.
// MESHDMA_DEVICES_PER_PROCESS: devices (threads) in each process.
inline constexpr const char* kDevicesPerProcessEnv =
    config::kDevicesPerProcess.name;
// MESHDMA_FORCE_INTERHOST=1: every process is its own host, so peers in other
// processes are reached through the inter-host (MPI) path even on one machine.
inline constexpr const char* kForceInterhostEnv = config::kForceInterhost.name;
// MESHDMA_HOSTS=N: group the processes into N simulated hosts, ranks in
// contiguous blocks (rank r on host r * N / processes): shared memory inside
// a simulated host, MPI between them, on one machine.
inline constexpr const char* kSimulatedHostsEnv = config::kSimulatedHosts.name;

// True when this process was started by mpirun/mpiexec (Open MPI, MPICH, or
// a PMI/PMIx launcher), judged from the launcher's environment variables.
bool LaunchedByMpi();

struct LaunchOptions {
  // Devices per process. Unset: `MESHDMA_DEVICES_PER_PROCESS`, else the cores
  // of this host divided among the processes on it (at least 1).
  std::optional<int> devices_per_process;
  // Unset: `MESHDMA_FORCE_INTERHOST`, else false. Takes precedence over
  // `simulated_hosts`.
  std::optional<bool> force_interhost;
  // Unset: `MESHDMA_HOSTS`, else the real hosts.
  std::optional<int> simulated_hosts;
};

// What one process contributes to the launch.
struct ProcessInfo {
  int rank = 0;
  std::string hostname;  // As the OS reports it.
  std::string host_key;  // Identifies the host; "hostname#rank" when forced.
  int num_devices = 1;
  // Logical core index (of that host's topology) each local device pins to,
  // in local-device order; -1 when unpinned.
  std::vector<int> device_cores;
};

struct GlobalDevice {
  int global_index = 0;  // Position in the global order.
  int rank = 0;          // The process that holds it.
  int local_index = 0;   // Its index among that process's devices.
  int host_index = 0;    // Index of its host among the launch's hosts.
  int core = -1;         // Logical core it pins to on its host, -1 if none.
};

class Launch {
 public:
  // Describes the current launch: gathers every process's `ProcessInfo`
  // over `processes` (collective; `MakeSingleProcessGroup()` describes this
  // process alone).
  static absl::StatusOr<Launch> Discover(const HostTopology& topology,
                                         const LaunchOptions& options,
                                         ProcessGroup& processes);
  // Builds the global order from explicit process descriptions, indexed by
  // rank (for tests and for `Discover`), as seen by process `this_rank`.
  // Errors name the offending rank.
  static absl::StatusOr<Launch> FromProcesses(std::vector<ProcessInfo> procs,
                                              int this_rank = 0);

  int rank() const { return rank_; }  // This process.
  int num_processes() const { return static_cast<int>(processes_.size()); }
  int num_hosts() const { return num_hosts_; }
  int num_devices() const { return static_cast<int>(devices_.size()); }
  const std::vector<ProcessInfo>& processes() const { return processes_; }
  // All devices in global order.
  const std::vector<GlobalDevice>& devices() const { return devices_; }
  // Global index of (rank, local_index).
  absl::StatusOr<int> GlobalIndex(int rank, int local_index) const;
  // Global indices of `rank`'s devices, in local order.
  std::vector<int> DevicesOfRank(int rank) const;
  bool SameHost(int rank_a, int rank_b) const;
  // One line per device: "device 3: rank 1 local 1 host node7 core 5".
  std::string Describe() const;

 private:
  int rank_ = 0;
  int num_hosts_ = 1;
  std::vector<ProcessInfo> processes_;
  std::vector<GlobalDevice> devices_;
  std::vector<int> host_of_rank_;
  std::vector<int> first_device_of_rank_;  // Global index of local device 0.
};

}  // namespace meshdma

#endif  // MESHDMA_TOPOLOGY_LAUNCH_H_
