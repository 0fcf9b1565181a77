#include "meshdma/topology/launch.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshdma/dma/transport/mpi/mpi_process_group.h"
#include "meshdma/topology/host_topology.h"
#include "meshdma/topology/process_group.h"

namespace meshdma {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

ProcessInfo Proc(int rank, const std::string& host, int num_devices) {
  ProcessInfo p;
  p.rank = rank;
  p.hostname = host;
  p.host_key = host;
  p.num_devices = num_devices;
  for (int i = 0; i < num_devices; ++i) p.device_cores.push_back(i);
  return p;
}

void ExpectError(const absl::StatusOr<Launch>& launch,
                 const std::vector<std::string>& parts) {
  ASSERT_FALSE(launch.ok());
  EXPECT_EQ(launch.status().code(), absl::StatusCode::kInvalidArgument);
  for (const std::string& part : parts) {
    EXPECT_THAT(std::string(launch.status().message()), HasSubstr(part));
  }
}

// Ranks 0 and 2 on hostA, 1 and 3 on hostB, with 2, 1, 3, 2 devices.
TEST(LaunchFromProcessesTest, InterleavedHostsGroupDevicesByHost) {
  auto launch =
      Launch::FromProcesses({Proc(0, "hostA", 2), Proc(1, "hostB", 1),
                             Proc(2, "hostA", 3), Proc(3, "hostB", 2)},
                            /*this_rank=*/2);
  ASSERT_TRUE(launch.ok()) << launch.status();
  EXPECT_EQ(launch->rank(), 2);
  EXPECT_EQ(launch->num_processes(), 4);
  EXPECT_EQ(launch->num_hosts(), 2);
  EXPECT_EQ(launch->num_devices(), 8);
  // Hand-computed order: hostA (rank 0, then rank 2), then hostB (1, then 3).
  struct Expected {
    int rank, local, host;
  };
  const std::vector<Expected> expected = {{0, 0, 0}, {0, 1, 0}, {2, 0, 0},
                                          {2, 1, 0}, {2, 2, 0}, {1, 0, 1},
                                          {3, 0, 1}, {3, 1, 1}};
  ASSERT_EQ(launch->devices().size(), expected.size());
  for (size_t g = 0; g < expected.size(); ++g) {
    const GlobalDevice& d = launch->devices()[g];
    EXPECT_EQ(d.global_index, static_cast<int>(g));
    EXPECT_EQ(d.rank, expected[g].rank) << "device " << g;
    EXPECT_EQ(d.local_index, expected[g].local) << "device " << g;
    EXPECT_EQ(d.host_index, expected[g].host) << "device " << g;
    EXPECT_EQ(d.core, expected[g].local);
    EXPECT_EQ(*launch->GlobalIndex(d.rank, d.local_index), static_cast<int>(g));
  }
  EXPECT_THAT(launch->DevicesOfRank(0), ElementsAre(0, 1));
  EXPECT_THAT(launch->DevicesOfRank(1), ElementsAre(5));
  EXPECT_THAT(launch->DevicesOfRank(2), ElementsAre(2, 3, 4));
  EXPECT_THAT(launch->DevicesOfRank(3), ElementsAre(6, 7));
  EXPECT_TRUE(launch->DevicesOfRank(4).empty());
  EXPECT_TRUE(launch->SameHost(0, 2));
  EXPECT_TRUE(launch->SameHost(1, 3));
  EXPECT_FALSE(launch->SameHost(0, 1));
  EXPECT_FALSE(launch->SameHost(0, 4));
  EXPECT_EQ(launch->GlobalIndex(1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(launch->GlobalIndex(1, 1).status().message()),
              HasSubstr("local device 1 of rank 1"));
  EXPECT_EQ(launch->GlobalIndex(4, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::string text = launch->Describe();
  EXPECT_THAT(text, HasSubstr("8 devices in 4 processes on 2 hosts"));
  EXPECT_THAT(text, HasSubstr("device 5: rank 1 local 0 host hostB core 0"));
}

TEST(LaunchFromProcessesTest, HostsOrderedByLowestRank) {
  // hostB appears first (rank 0), so it is host 0 even though "hostA" sorts
  // first by name.
  auto launch = Launch::FromProcesses(
      {Proc(0, "hostB", 1), Proc(1, "hostA", 1), Proc(2, "hostB", 1)});
  ASSERT_TRUE(launch.ok()) << launch.status();
  EXPECT_EQ(launch->rank(), 0);
  EXPECT_EQ(launch->num_hosts(), 2);
  EXPECT_THAT(launch->DevicesOfRank(0), ElementsAre(0));
  EXPECT_THAT(launch->DevicesOfRank(2), ElementsAre(1));
  EXPECT_THAT(launch->DevicesOfRank(1), ElementsAre(2));
  EXPECT_EQ(launch->devices()[2].host_index, 1);
}

TEST(LaunchFromProcessesTest, Errors) {
  ExpectError(Launch::FromProcesses({}), {"process"});
  ExpectError(Launch::FromProcesses({Proc(0, "a", 1), Proc(2, "a", 1)}),
              {"position 1", "rank 2"});
  ExpectError(Launch::FromProcesses({Proc(0, "a", 1), Proc(1, "a", 0)}),
              {"rank 1", "0 devices"});
  ProcessInfo mismatched = Proc(1, "a", 2);
  mismatched.device_cores.pop_back();
  ExpectError(Launch::FromProcesses({Proc(0, "a", 1), mismatched}),
              {"rank 1", "2 devices", "1 device cores"});
  ProcessInfo keyless = Proc(0, "a", 1);
  keyless.host_key.clear();
  ExpectError(Launch::FromProcesses({keyless}), {"rank 0", "host key"});
  ExpectError(Launch::FromProcesses({Proc(0, "a", 1)}, /*this_rank=*/1),
              {"rank 1"});
}

TEST(LaunchedByMpiTest, MatchesTheLauncherEnvironment) {
  const bool env = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr ||
                   std::getenv("PMI_SIZE") != nullptr ||
                   std::getenv("PMI_RANK") != nullptr ||
                   std::getenv("PMIX_RANK") != nullptr ||
                   std::getenv("MPI_LOCALNRANKS") != nullptr;
  EXPECT_EQ(LaunchedByMpi(), env);
  int initialized = 0;
  MPI_Initialized(&initialized);
  EXPECT_EQ(initialized != 0, env);  // The test main inits MPI under mpirun.
}

// Restores an environment variable on scope exit.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_.has_value()) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// MPI_COMM_WORLD as a process group (the test's main initialised MPI).
std::unique_ptr<ProcessGroup> WorldGroup() {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  return std::make_unique<dma_internal::MpiProcessGroup>(comm);
}

TEST(LaunchDiscoverTest, SingleProcessWithoutMpi) {
  HostTopology topo = HostTopology::Flat(4);
  ScopedEnv dpp(kDevicesPerProcessEnv, nullptr);
  ScopedEnv force(kForceInterhostEnv, nullptr);
  ScopedEnv hosts(kSimulatedHostsEnv, nullptr);
  auto launch = Launch::Discover(topo, {}, *MakeSingleProcessGroup());
  ASSERT_TRUE(launch.ok()) << launch.status();
  EXPECT_EQ(launch->num_processes(), 1);
  EXPECT_EQ(launch->num_hosts(), 1);
  // All cores of the host go to the one process, one device per core.
  ASSERT_EQ(launch->num_devices(), 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(launch->devices()[i].core, i);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  EXPECT_EQ(launch->processes()[0].hostname, host);
  EXPECT_EQ(launch->processes()[0].host_key, host);

  // More devices than cores wrap round the cores.
  LaunchOptions six;
  six.devices_per_process = 6;
  six.force_interhost = true;
  launch = Launch::Discover(topo, six, *MakeSingleProcessGroup());
  ASSERT_TRUE(launch.ok()) << launch.status();
  std::vector<int> cores;
  for (const GlobalDevice& d : launch->devices()) cores.push_back(d.core);
  EXPECT_THAT(cores, ElementsAre(0, 1, 2, 3, 0, 1));
  EXPECT_EQ(launch->processes()[0].host_key, std::string(host) + "#0");
}

TEST(LaunchDiscoverTest, EnvironmentVariables) {
  HostTopology topo = HostTopology::Flat(2);
  ScopedEnv hosts(kSimulatedHostsEnv, nullptr);
  {
    ScopedEnv dpp(kDevicesPerProcessEnv, "3");
    ScopedEnv force(kForceInterhostEnv, "yes");
    auto launch = Launch::Discover(topo, {}, *MakeSingleProcessGroup());
    ASSERT_TRUE(launch.ok()) << launch.status();
    EXPECT_EQ(launch->num_devices(), 3);
    EXPECT_THAT(launch->processes()[0].host_key, HasSubstr("#0"));
    // Options take precedence over the environment.
    LaunchOptions options;
    options.devices_per_process = 1;
    options.force_interhost = false;
    launch = Launch::Discover(topo, options, *MakeSingleProcessGroup());
    ASSERT_TRUE(launch.ok()) << launch.status();
    EXPECT_EQ(launch->num_devices(), 1);
    EXPECT_THAT(launch->processes()[0].host_key,
                ::testing::Not(HasSubstr("#")));
  }
  for (const char* bad : {"abc", "0", "-1", "1025", "2x"}) {
    ScopedEnv dpp(kDevicesPerProcessEnv, bad);
    ExpectError(Launch::Discover(topo, {}, *MakeSingleProcessGroup()),
                {kDevicesPerProcessEnv, std::string("'") + bad + "'"});
  }
  {
    ScopedEnv force(kForceInterhostEnv, "maybe");
    ExpectError(Launch::Discover(topo, {}, *MakeSingleProcessGroup()),
                {kForceInterhostEnv, "'maybe'"});
  }
  LaunchOptions zero;
  zero.devices_per_process = 0;
  ExpectError(Launch::Discover(topo, zero, *MakeSingleProcessGroup()),
              {"devices_per_process = 0"});
}

TEST(LaunchDiscoverTest, SimulatedHostsOutOfRangeAreErrors) {
  HostTopology topo = HostTopology::Flat(2);
  ScopedEnv force(kForceInterhostEnv, nullptr);
  LaunchOptions one;
  one.simulated_hosts = 1;
  auto launch = Launch::Discover(topo, one, *MakeSingleProcessGroup());
  ASSERT_TRUE(launch.ok()) << launch.status();
  EXPECT_EQ(launch->num_hosts(), 1);
  for (const char* bad : {"2", "0", "x"}) {
    ScopedEnv hosts(kSimulatedHostsEnv, bad);
    ExpectError(Launch::Discover(topo, {}, *MakeSingleProcessGroup()),
                {kSimulatedHostsEnv});
  }
}

// Under mpirun: N simulated hosts hold contiguous blocks of ranks, and the
// global order keeps each host's devices together.
TEST(LaunchMpiSimulatedHostsTest, ContiguousBlocksOfRanks) {
  if (!LaunchedByMpi()) GTEST_SKIP() << "not under mpirun";
  if (std::getenv(kForceInterhostEnv) != nullptr) {
    GTEST_SKIP() << kForceInterhostEnv << " takes precedence";
  }
  int np = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  HostTopology topo = HostTopology::Flat(8);
  for (int hosts = 1; hosts <= np; ++hosts) {
    LaunchOptions options;
    options.simulated_hosts = hosts;
    options.devices_per_process = 2;
    auto launch = Launch::Discover(topo, options, *WorldGroup());
    ASSERT_TRUE(launch.ok()) << launch.status();
    EXPECT_EQ(launch->num_hosts(), hosts);
    for (int a = 0; a < np; ++a) {
      for (int b = 0; b < np; ++b) {
        EXPECT_EQ(launch->SameHost(a, b), a * hosts / np == b * hosts / np)
            << "ranks " << a << ", " << b << " with " << hosts << " hosts";
      }
    }
    for (int g = 1; g < launch->num_devices(); ++g) {
      EXPECT_LE(launch->devices()[g - 1].host_index,
                launch->devices()[g].host_index);
    }
  }
}

// Under mpirun: discovery over MPI_COMM_WORLD against an independent gather
// of (rank, hostname).
class LaunchMpiTest : public ::testing::TestWithParam<int> {};

TEST_P(LaunchMpiTest, DiscoverMatchesAllgather) {
  if (!LaunchedByMpi()) GTEST_SKIP() << "not under mpirun";
  const int dpp = GetParam();
  int rank = 0, np = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &np);

  // Reference: every rank's hostname, by a plain fixed-size MPI_Allgather.
  constexpr int kLen = 256;
  char mine[kLen] = {};
  gethostname(mine, kLen - 1);
  std::vector<char> all(kLen * np);
  MPI_Allgather(mine, kLen, MPI_CHAR, all.data(), kLen, MPI_CHAR,
                MPI_COMM_WORLD);
  const char* force_env = std::getenv(kForceInterhostEnv);
  const std::string force_value = force_env != nullptr ? force_env : "";
  const bool forced =
      force_value == "1" || force_value == "true" || force_value == "yes";
  std::vector<std::string> hostnames, keys;
  for (int r = 0; r < np; ++r) {
    hostnames.emplace_back(&all[r * kLen]);
    const char* hosts_env = std::getenv(kSimulatedHostsEnv);
    const int hosts = hosts_env != nullptr ? std::atoi(hosts_env) : 0;
    if (!forced && hosts > 0) {
      keys.push_back(hostnames[r] + "#host" + std::to_string(r * hosts / np));
      continue;
    }
    keys.push_back(forced ? hostnames[r] + "#" + std::to_string(r)
                          : hostnames[r]);
  }
  const std::set<std::string> distinct(keys.begin(), keys.end());

  absl::StatusOr<HostTopology> topo = HostTopology::Discover();
  ASSERT_TRUE(topo.ok()) << topo.status();
  LaunchOptions options;
  options.devices_per_process = dpp;
  auto launch = Launch::Discover(*topo, options, *WorldGroup());
  ASSERT_TRUE(launch.ok()) << launch.status();

  EXPECT_EQ(launch->rank(), rank);
  EXPECT_EQ(launch->num_processes(), np);
  EXPECT_EQ(launch->num_devices(), np * dpp);
  EXPECT_EQ(launch->num_hosts(), static_cast<int>(distinct.size()));
  if (forced) {
    EXPECT_EQ(launch->num_hosts(), np);
  }
  for (int r = 0; r < np; ++r) {
    EXPECT_EQ(launch->processes()[r].hostname, hostnames[r]);
    EXPECT_EQ(launch->processes()[r].host_key, keys[r]);
    for (int s = 0; s < np; ++s) {
      EXPECT_EQ(launch->SameHost(r, s), keys[r] == keys[s]);
    }
    const std::vector<int> globals = launch->DevicesOfRank(r);
    ASSERT_EQ(static_cast<int>(globals.size()), dpp);
    for (int i = 0; i < dpp; ++i) {
      EXPECT_EQ(*launch->GlobalIndex(r, i), globals[i]);
      const GlobalDevice& d = launch->devices()[globals[i]];
      EXPECT_EQ(d.rank, r);
      EXPECT_EQ(d.local_index, i);
      EXPECT_GE(d.core, 0);
      EXPECT_LT(d.core, topo->num_cores());
    }
  }
  // The devices of one host are contiguous, hosts in order of lowest rank,
  // and each global index appears once.
  std::map<std::string, int> lowest_rank;
  for (int r = np - 1; r >= 0; --r) lowest_rank[keys[r]] = r;
  int last_host = -1;
  int last_lowest = -1;
  for (int g = 0; g < launch->num_devices(); ++g) {
    const GlobalDevice& d = launch->devices()[g];
    EXPECT_EQ(d.global_index, g);
    if (d.host_index != last_host) {
      EXPECT_GT(lowest_rank[keys[d.rank]], last_lowest) << "device " << g;
      EXPECT_EQ(d.host_index, last_host + 1) << "device " << g;
      last_lowest = lowest_rank[keys[d.rank]];
      last_host = d.host_index;
    }
  }
  // Processes sharing a machine get disjoint cores while there are enough.
  std::map<std::string, int> sharing;
  for (const std::string& h : hostnames) ++sharing[h];
  if (sharing[mine] * dpp <= topo->num_cores()) {
    std::set<int> used;
    for (int r = 0; r < np; ++r) {
      if (hostnames[r] != mine) continue;
      for (int g : launch->DevicesOfRank(r)) {
        EXPECT_TRUE(used.insert(launch->devices()[g].core).second)
            << "core " << launch->devices()[g].core << " used twice";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DevicesPerProcess, LaunchMpiTest,
                         ::testing::Values(1, 3));

TEST(LaunchMpiDefaultTest, DefaultDevicesDivideTheCores) {
  if (!LaunchedByMpi()) GTEST_SKIP() << "not under mpirun";
  if (std::getenv(kDevicesPerProcessEnv) != nullptr) {
    GTEST_SKIP() << kDevicesPerProcessEnv << " is set";
  }
  int np = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  // Every rank must take part in the collective discovery, so all use the
  // same flat topology.
  HostTopology topo = HostTopology::Flat(8);
  auto launch = Launch::Discover(topo, {}, *WorldGroup());
  ASSERT_TRUE(launch.ok()) << launch.status();
  std::map<std::string, int> sharing;
  for (const ProcessInfo& p : launch->processes()) ++sharing[p.hostname];
  for (const ProcessInfo& p : launch->processes()) {
    EXPECT_EQ(p.num_devices, std::max(1, 8 / sharing[p.hostname]))
        << "rank " << p.rank;
  }
}

}  // namespace
}  // namespace meshdma
