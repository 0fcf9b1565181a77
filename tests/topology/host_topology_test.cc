#include "meshdma/topology/host_topology.h"

#include <sched.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshdma {
namespace {

using ::testing::HasSubstr;

TEST(HostTopologyTest, DiscoverIsConsistent) {
  absl::StatusOr<HostTopology> topo = HostTopology::Discover();
  ASSERT_TRUE(topo.ok()) << topo.status();
  ASSERT_GE(topo->num_cores(), 1);
  EXPECT_GE(topo->num_pus(), topo->num_cores());
  EXPECT_GE(topo->num_packages(), 1);
  EXPECT_GE(topo->num_numa_nodes(), 1);
  EXPECT_GE(topo->num_l3_domains(), 1);
  std::set<int> os_pus;
  int pus = 0;
  for (int i = 0; i < topo->num_cores(); ++i) {
    const CoreInfo& core = topo->cores()[i];
    EXPECT_EQ(core.index, i);
    EXPECT_GE(core.package, 0);
    EXPECT_LT(core.package, topo->num_packages());
    EXPECT_GE(core.numa_node, 0);
    EXPECT_LT(core.numa_node, topo->num_numa_nodes());
    EXPECT_GE(core.l3_domain, 0);
    EXPECT_LT(core.l3_domain, topo->num_l3_domains());
    EXPECT_FALSE(core.pu_os_indices.empty()) << "core " << i;
    for (int pu : core.pu_os_indices) os_pus.insert(pu);
    pus += static_cast<int>(core.pu_os_indices.size());
  }
  EXPECT_EQ(pus, topo->num_pus());
  EXPECT_EQ(static_cast<int>(os_pus.size()), pus) << "a PU in two cores";
  if (!topo->is_fallback()) {
    // Every CPU this process may run on (the OS's own affinity mask, an
    // independent source) is a PU hwloc reported.
    cpu_set_t mask;
    CPU_ZERO(&mask);
    ASSERT_EQ(sched_getaffinity(0, sizeof(mask), &mask), 0);
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &mask)) {
        EXPECT_TRUE(os_pus.count(cpu)) << "CPU " << cpu;
      }
    }
  }
  const std::string text = topo->Describe();
  EXPECT_THAT(text, HasSubstr("core 0: OS index"));
  EXPECT_THAT(text, HasSubstr("NUMA node 0"));
}

TEST(HostTopologyTest, PinToCoreZeroAndRejectOutOfRange) {
  absl::StatusOr<HostTopology> topo = HostTopology::Discover();
  ASSERT_TRUE(topo.ok()) << topo.status();
  // Pin a fresh thread so the test process keeps its own affinity.
  std::thread([&] {
    ASSERT_TRUE(topo->PinThreadToCore(0).ok());
    if (!topo->is_fallback()) {
      cpu_set_t mask;
      CPU_ZERO(&mask);
      ASSERT_EQ(sched_getaffinity(0, sizeof(mask), &mask), 0);
      const auto& pus = topo->cores()[0].pu_os_indices;
      EXPECT_EQ(CPU_COUNT(&mask), static_cast<int>(pus.size()));
      for (int pu : pus) EXPECT_TRUE(CPU_ISSET(pu, &mask)) << "PU " << pu;
      // The CPU this thread runs on is one of core 0's PUs.
      EXPECT_THAT(pus, ::testing::Contains(sched_getcpu()));
    }
    ASSERT_TRUE(topo->PinThreadToNuma(0).ok());
  }).join();

  const int n = topo->num_cores();
  absl::Status bad = topo->PinThreadToCore(n);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), HasSubstr(std::to_string(n)));
  EXPECT_THAT(std::string(bad.message()),
              HasSubstr(std::to_string(n) + " cores"));
  EXPECT_EQ(topo->PinThreadToCore(-1).code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status bad_numa = topo->PinThreadToNuma(topo->num_numa_nodes());
  EXPECT_EQ(bad_numa.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(bad_numa.message()),
      HasSubstr("NUMA node index " + std::to_string(topo->num_numa_nodes())));
}

TEST(HostTopologyTest, MoveKeepsTheTopology) {
  absl::StatusOr<HostTopology> topo = HostTopology::Discover();
  ASSERT_TRUE(topo.ok());
  const int n = topo->num_cores();
  HostTopology moved = *std::move(topo);
  EXPECT_EQ(moved.num_cores(), n);
  std::thread([&] { EXPECT_TRUE(moved.PinThreadToCore(n - 1).ok()); }).join();
}

TEST(HostTopologyTest, Flat) {
  HostTopology flat = HostTopology::Flat(4);
  EXPECT_TRUE(flat.is_fallback());
  EXPECT_EQ(flat.num_cores(), 4);
  EXPECT_EQ(flat.num_pus(), 4);
  EXPECT_EQ(flat.num_packages(), 1);
  EXPECT_EQ(flat.num_numa_nodes(), 1);
  EXPECT_EQ(flat.num_l3_domains(), 1);
  for (int i = 0; i < 4; ++i) {
    const CoreInfo& core = flat.cores()[i];
    EXPECT_EQ(core.index, i);
    EXPECT_EQ(core.os_index, i);
    EXPECT_EQ(core.package, 0);
    EXPECT_EQ(core.numa_node, 0);
    EXPECT_EQ(core.l3_domain, 0);
    EXPECT_THAT(core.pu_os_indices, ::testing::ElementsAre(i));
  }
  // Pinning is a no-op but still range-checked.
  EXPECT_TRUE(flat.PinThreadToCore(3).ok());
  EXPECT_TRUE(flat.PinThreadToNuma(0).ok());
  EXPECT_EQ(flat.PinThreadToCore(4).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(flat.PinThreadToNuma(1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HostTopology::Flat(0).num_cores(), 1);
  EXPECT_THAT(flat.Describe(), HasSubstr("4 cores"));
}

}  // namespace
}  // namespace meshdma
