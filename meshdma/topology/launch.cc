#include "meshdma/topology/launch.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "meshdma/base/env.h"
#include "meshdma/base/status_macros.h"

namespace meshdma {
namespace {

constexpr int kMaxDevicesPerProcess = config::kDevicesPerProcess.max;

absl::StatusOr<std::string> Hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) {
    return absl::InternalError("gethostname failed");
  }
  return std::string(name);
}

absl::StatusOr<bool> ForceInterhost(const LaunchOptions& options) {
  MESHDMA_ASSIGN_OR_RETURN(std::optional<bool> env,
                           base_internal::EnvBool(config::kForceInterhost));
  return base_internal::Resolve(options.force_interhost, env, false);
}

// The number of simulated hosts, from the options or the environment, or
// nullopt when neither sets it; it must be in [1, processes].
absl::StatusOr<std::optional<int>> SimulatedHosts(const LaunchOptions& options,
                                                  int num_processes) {
  std::optional<int64_t> hosts;
  if (options.simulated_hosts.has_value()) {
    hosts = *options.simulated_hosts;
  } else {
    MESHDMA_ASSIGN_OR_RETURN(hosts,
                             base_internal::EnvInt(config::kSimulatedHosts));
  }
  if (!hosts.has_value()) return std::nullopt;
  if (*hosts < 1 || *hosts > num_processes) {
    return absl::InvalidArgumentError(
        absl::StrCat(kSimulatedHostsEnv, " = ", *hosts, " simulated hosts for ",
                     num_processes, " process(es): expected a count in [1, ",
                     num_processes, "]"));
  }
  return static_cast<int>(*hosts);
}

// Devices per process from the options or the environment, or nullopt when
// neither sets it.
absl::StatusOr<std::optional<int>> ExplicitDevicesPerProcess(
    const LaunchOptions& options) {
  if (options.devices_per_process.has_value()) {
    const int n = *options.devices_per_process;
    if (n < 1 || n > kMaxDevicesPerProcess) {
      return absl::InvalidArgumentError(
          absl::StrCat("devices_per_process = ", n, " is not in [1, ",
                       kMaxDevicesPerProcess, "]"));
    }
    return n;
  }
  MESHDMA_ASSIGN_OR_RETURN(std::optional<int64_t> env,
                           base_internal::EnvInt(config::kDevicesPerProcess));
  if (!env.has_value()) return std::nullopt;
  return static_cast<int>(*env);
}

// Every rank's `mine`, indexed by rank (collective).
absl::StatusOr<std::vector<std::vector<int>>> AllgatherInts(
    ProcessGroup& group, const std::vector<int>& mine) {
  MESHDMA_ASSIGN_OR_RETURN(std::vector<std::string> all,
                           group.AllGather(absl::string_view(
                               reinterpret_cast<const char*>(mine.data()),
                               mine.size() * sizeof(int))));
  std::vector<std::vector<int>> out(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    out[r].resize(all[r].size() / sizeof(int));
    std::memcpy(out[r].data(), all[r].data(), out[r].size() * sizeof(int));
  }
  return out;
}

}  // namespace

bool LaunchedByMpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK",
                          "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(var) != nullptr) return true;
  }
  return false;
}

absl::StatusOr<Launch> Launch::Discover(const HostTopology& topology,
                                        const LaunchOptions& options,
                                        ProcessGroup& processes) {
  // Step 1: who am I, and on which host.
  const int rank = processes.rank();
  const int size = processes.size();
  MESHDMA_ASSIGN_OR_RETURN(std::string hostname, Hostname());
  MESHDMA_ASSIGN_OR_RETURN(bool force_interhost, ForceInterhost(options));
  MESHDMA_ASSIGN_OR_RETURN(std::optional<int> explicit_devices,
                           ExplicitDevicesPerProcess(options));
  MESHDMA_ASSIGN_OR_RETURN(std::optional<int> simulated_hosts,
                           SimulatedHosts(options, size));
  // Hosts as the transports see them: the machine, or each process its own
  // host when forced apart, or contiguous blocks of ranks when simulated.
  std::string host_key = hostname;
  if (force_interhost) {
    host_key = absl::StrCat(hostname, "#", rank);
  } else if (simulated_hosts.has_value()) {
    host_key = absl::StrCat(hostname, "#host",
                            int64_t{rank} * *simulated_hosts / size);
  }

  // Step 2: every rank's hostname and host key.
  MESHDMA_ASSIGN_OR_RETURN(std::vector<std::string> hostnames,
                           processes.AllGather(hostname));
  MESHDMA_ASSIGN_OR_RETURN(std::vector<std::string> host_keys,
                           processes.AllGather(host_key));

  // Step 3: the processes sharing this machine's cores are those with the
  // same physical hostname (even when forced apart as hosts); `position` is
  // this process's place among them in rank order.
  int sharing = 0;
  int position = 0;
  for (int r = 0; r < size; ++r) {
    if (hostnames[r] != hostname) continue;
    if (r < rank) ++position;
    ++sharing;
  }
  const int num_cores = std::max(1, topology.num_cores());
  const int num_devices = explicit_devices.has_value()
                              ? *explicit_devices
                              : std::max(1, num_cores / sharing);

  // Step 4: the sharing processes get contiguous, balanced slices of the core
  // list in rank order (one shared core each when there are more processes
  // than cores); devices take consecutive cores of the slice, wrapping round
  // when there are more devices than cores in it.
  int slice_begin = 0;
  int slice_size = 1;
  if (num_cores >= sharing) {
    slice_begin = static_cast<int>(int64_t{position} * num_cores / sharing);
    const int slice_end =
        static_cast<int>(int64_t{position + 1} * num_cores / sharing);
    slice_size = slice_end - slice_begin;
  } else {
    slice_begin = position % num_cores;
  }
  std::vector<int> device_cores(num_devices);
  for (int i = 0; i < num_devices; ++i) {
    device_cores[i] =
        topology.num_cores() > 0 ? slice_begin + i % slice_size : -1;
  }

  // Step 5: every rank's devices, then the global order.
  MESHDMA_ASSIGN_OR_RETURN(std::vector<std::vector<int>> all_cores,
                           AllgatherInts(processes, device_cores));
  std::vector<ProcessInfo> procs(size);
  for (int r = 0; r < size; ++r) {
    procs[r].rank = r;
    procs[r].hostname = hostnames[r];
    procs[r].host_key = host_keys[r];
    procs[r].num_devices = static_cast<int>(all_cores[r].size());
    procs[r].device_cores = std::move(all_cores[r]);
  }
  return FromProcesses(std::move(procs), rank);
}

absl::StatusOr<Launch> Launch::FromProcesses(std::vector<ProcessInfo> procs,
                                             int this_rank) {
  const int n = static_cast<int>(procs.size());
  if (n == 0) return absl::InvalidArgumentError("a launch needs a process");
  if (this_rank < 0 || this_rank >= n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "this process's rank ", this_rank, " is not in [0, ", n, ")"));
  }
  // Step 1: check each process and give hosts indices by first appearance.
  Launch launch;
  std::vector<std::string> host_keys;
  launch.host_of_rank_.resize(n);
  for (int r = 0; r < n; ++r) {
    const ProcessInfo& p = procs[r];
    if (p.rank != r) {
      return absl::InvalidArgumentError(
          absl::StrCat("process at position ", r, " has rank ", p.rank,
                       "; processes must be given in rank order 0..", n - 1));
    }
    if (p.num_devices < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", r, " has ", p.num_devices, " devices (must be >= 1)"));
    }
    if (static_cast<int>(p.device_cores.size()) != p.num_devices) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", r, " has ", p.num_devices, " devices but ",
                       p.device_cores.size(), " device cores"));
    }
    if (p.host_key.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", r, " has an empty host key"));
    }
    auto it = std::find(host_keys.begin(), host_keys.end(), p.host_key);
    launch.host_of_rank_[r] = static_cast<int>(it - host_keys.begin());
    if (it == host_keys.end()) host_keys.push_back(p.host_key);
  }
  launch.num_hosts_ = static_cast<int>(host_keys.size());
  launch.rank_ = this_rank;

  // Step 2: the global order: hosts by lowest rank, within a host by rank,
  // within a process by local index.
  launch.first_device_of_rank_.assign(n, -1);
  for (int h = 0; h < launch.num_hosts_; ++h) {
    for (int r = 0; r < n; ++r) {
      if (launch.host_of_rank_[r] != h) continue;
      launch.first_device_of_rank_[r] =
          static_cast<int>(launch.devices_.size());
      for (int i = 0; i < procs[r].num_devices; ++i) {
        GlobalDevice d;
        d.global_index = static_cast<int>(launch.devices_.size());
        d.rank = r;
        d.local_index = i;
        d.host_index = h;
        d.core = procs[r].device_cores[i];
        launch.devices_.push_back(d);
      }
    }
  }
  launch.processes_ = std::move(procs);
  return launch;
}

absl::StatusOr<int> Launch::GlobalIndex(int rank, int local_index) const {
  if (rank < 0 || rank >= num_processes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is not in [0, ", num_processes(), ")"));
  }
  if (local_index < 0 || local_index >= processes_[rank].num_devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("local device ", local_index, " of rank ", rank,
                     " is not in [0, ", processes_[rank].num_devices, ")"));
  }
  return first_device_of_rank_[rank] + local_index;
}

std::vector<int> Launch::DevicesOfRank(int rank) const {
  std::vector<int> out;
  if (rank < 0 || rank >= num_processes()) return out;
  for (int i = 0; i < processes_[rank].num_devices; ++i) {
    out.push_back(first_device_of_rank_[rank] + i);
  }
  return out;
}

bool Launch::SameHost(int rank_a, int rank_b) const {
  if (rank_a < 0 || rank_a >= num_processes() || rank_b < 0 ||
      rank_b >= num_processes()) {
    return false;
  }
  return host_of_rank_[rank_a] == host_of_rank_[rank_b];
}

std::string Launch::Describe() const {
  std::string out = absl::StrCat(
      "launch: ", num_devices(), num_devices() == 1 ? " device" : " devices",
      " in ", num_processes(), num_processes() == 1 ? " process" : " processes",
      " on ", num_hosts_, num_hosts_ == 1 ? " host" : " hosts", "\n");
  for (const GlobalDevice& d : devices_) {
    absl::StrAppend(&out, "  device ", d.global_index, ": rank ", d.rank,
                    " local ", d.local_index, " host ",
                    processes_[d.rank].host_key, " core ");
    if (d.core >= 0) {
      absl::StrAppend(&out, d.core);
    } else {
      absl::StrAppend(&out, "none");
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

}  // namespace meshdma
