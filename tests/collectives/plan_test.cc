// The planner (collectives/internal/plan.h) chooses every collective's path
// exactly as the entry points chose it before there was a planner: `Before*`
// below are those entry points' choices, transcribed from all_reduce.cc,
// reduce_scatter.cc, all_gather.cc, all_to_all.cc and ppermute.cc as they
// were (with Channel::Fits / TakesMove / TakesReduction, DirectApplies,
// EvenHostsFor and HostDirect), asked of the same fixed topology; the sweep
// covers sizes around every threshold, every algorithm, ops, symmetric and
// private inputs, and launches of threads, processes and hosts. A few rows
// pin the choice by hand as well.
#include "meshdma/collectives/internal/plan.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "meshdma/collectives/all_reduce.h"
#include "meshdma/collectives/internal/path_rules.h"

namespace meshdma::collectives_internal {
namespace {

// A launch as the planner sees it: each member's host and process, checked
// mode, the heap.
struct FakeLaunch {
  std::string name;
  std::vector<int> host;     // By LOGICAL id.
  std::vector<int> process;  // By LOGICAL id.
  bool checked = false;
  int64_t heap_bytes = int64_t{1} << 30;
};

class FakeTopology final : public Topology {
 public:
  explicit FakeTopology(const FakeLaunch& l) : l_(l) {}
  bool SpansHosts(const Group& g) override {
    for (int m : g.members) {
      if (l_.host[m] != l_.host[g.members[0]]) return true;
    }
    return false;
  }
  int64_t HeapBytes() override { return l_.heap_bytes; }
  absl::StatusOr<bool> Reaches(const Group& g) override {
    return Every(g, [&](int me, int peer) {
      return !l_.checked && l_.host[me] == l_.host[peer];
    });
  }
  absl::StatusOr<bool> SharesAddressSpace(const Group& g) override {
    return Every(g, [&](int me, int peer) {
      return !l_.checked && l_.process[me] == l_.process[peer];
    });
  }
  absl::StatusOr<bool> ReadsPeerMemory(const Group& g) override {
    return Every(g, [&](int me, int peer) {
      return !l_.checked && l_.process[me] == l_.process[peer];
    });
  }
  absl::StatusOr<HostLayout> Layout(const Group& g) override {
    std::vector<int> host, process;
    for (int m : g.members) {
      host.push_back(l_.host[m]);
      process.push_back(l_.process[m]);
    }
    return HostLayoutFrom(g, host, process);
  }

 private:
  template <typename F>
  bool Every(const Group& g, F holds) {
    for (int j = 1; j < g.size(); ++j) {
      if (!holds(g.members[g.index], g.Peer(j))) return false;
    }
    return true;
  }
  FakeLaunch l_;
};

// What a path choice decides, as the entry points used it.
struct Choice {
  Path path = Path::kKernel;
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::kRing;
  bool host_direct = false, boards = false, private_input = false,
       reads_peer_inputs = false;
  bool operator==(const Choice&) const = default;
  std::string ToString() const {
    return absl::StrCat(PathName(path), " ", CollectiveAlgorithmName(algorithm),
                        " host_direct ", host_direct, " boards ", boards,
                        " private ", private_input, " reads_peer ",
                        reads_peer_inputs);
  }
};

Choice Of(const Plan& p) {
  return {p.path,   p.algorithm,     p.host_direct,
          p.boards, p.private_input, p.reads_peer_inputs};
}

// --- The choices before the planner, transcribed.

bool OldFits(FakeTopology& t, const Group& g, int64_t b) {
  if (g.size() < 2 || g.size() > 256) return false;
  if (b <= (16 << 10)) return true;
  int64_t max_payload = 16 << 10;
  if (t.SpansHosts(g)) {
    const int64_t set = std::min<int64_t>(4 << 20, t.HeapBytes() / 64);
    max_payload =
        std::clamp<int64_t>(set / g.size() / 64 * 64, 32 << 10, 256 << 10);
  }
  return b <= max_payload;
}
bool OldTakesMove(FakeTopology& t, const Group& g, int64_t b) {
  return OldFits(t, g, b) && (b <= (4 << 10) || t.SpansHosts(g));
}
bool OldTakesReduction(FakeTopology& t, const Group& g,
                       const CollectiveOptions& o, CollectiveAlgorithm chosen,
                       int64_t row, int64_t sent) {
  if (chosen == CollectiveAlgorithm::kOneShot) return OldFits(t, g, row);
  return o.algorithm == CollectiveAlgorithm::kAuto && OldFits(t, g, row) &&
         t.SpansHosts(g) && (row <= (32 << 10) || sent <= (256 << 10));
}
int OldEvenHostsFor(FakeTopology& t, const Group& g, int64_t bytes,
                    const CollectiveOptions& o, HostLayout* layout) {
  const bool wanted = o.algorithm == CollectiveAlgorithm::kHierarchical ||
                      (o.algorithm == CollectiveAlgorithm::kAuto &&
                       bytes > o.one_shot_max_bytes);
  if (!wanted || g.size() < 2) return 1;
  *layout = *t.Layout(g);
  return layout->EvenHosts();
}
bool OldDirectApplies(FakeTopology& t, const Group& g, int64_t bytes,
                      const CollectiveOptions& o) {
  const bool asked = o.algorithm == CollectiveAlgorithm::kDirect ||
                     (o.algorithm == CollectiveAlgorithm::kAuto &&
                      bytes > o.one_shot_max_bytes);
  if (!asked || g.size() < 2) return false;
  return *t.Reaches(g);
}
bool OldHostDirect(FakeTopology& t, const Group& g, const HostLayout& layout,
                   const bool* read_input_symmetric) {
  if (!layout.Applies() || layout.per_host < 2) return false;
  if (read_input_symmetric == nullptr || *read_input_symmetric ||
      layout.hosts_are_processes) {
    return *t.Reaches(layout.Host(g));
  }
  return false;
}

Choice BeforePsum(FakeTopology& t, const Group& g, const CollectiveOptions& o,
                  int64_t bytes, bool in_sym) {
  HostLayout layout;
  const int even_hosts = OldEvenHostsFor(t, g, bytes, o, &layout);
  // `readable`: the input, or the (symmetric) output standing for it.
  const bool readable_sym =
      in_sym || layout.hosts_are_processes || bytes > (4 << 20) ? in_sym : true;
  const bool direct = OldDirectApplies(t, g, bytes, o);
  Choice c;
  c.algorithm =
      ChooseAllReduceAlgorithm(bytes, g.size(), o, "psum", even_hosts, direct);
  if (c.algorithm == CollectiveAlgorithm::kHierarchical) {
    c.host_direct = OldHostDirect(t, g, layout, &readable_sym);
  }
  bool boards = c.host_direct && layout.hosts_are_processes;
  if (c.algorithm == CollectiveAlgorithm::kDirect) {
    boards = *t.SharesAddressSpace(g);
    if (!boards && !in_sym) boards = *t.ReadsPeerMemory(g);
  }
  c.boards = boards;
  c.private_input =
      !in_sym && !boards &&
      (c.algorithm == CollectiveAlgorithm::kDirect || c.host_direct);
  c.reads_peer_inputs =
      (c.algorithm == CollectiveAlgorithm::kDirect || c.host_direct) && !boards;
  const bool channel =
      OldTakesReduction(t, g, o, c.algorithm, bytes, bytes * (g.size() - 1)) &&
      !(c.algorithm == CollectiveAlgorithm::kHierarchical &&
        layout.per_host > 1);
  if (channel) c.path = Path::kChannel;
  if (channel && o.algorithm == CollectiveAlgorithm::kAuto && g.size() > 2 &&
      t.SpansHosts(g)) {
    layout = *t.Layout(g);
    if (layout.Applies() && layout.per_host > 1 &&
        OldFits(t, layout.Host(g), bytes) &&
        OldFits(t, layout.Lane(g), bytes)) {
      c.path = Path::kChannelByHosts;
    }
  }
  return c;
}

Choice BeforePsumScatter(FakeTopology& t, const Group& g,
                         const CollectiveOptions& o, int64_t bytes,
                         int64_t largest_segment, bool in_sym) {
  const int n = g.size();
  HostLayout layout;
  const int even_hosts = OldEvenHostsFor(t, g, bytes, o, &layout);
  bool direct = OldDirectApplies(t, g, bytes, o);
  bool boards = false;
  if (direct) {
    boards = *t.SharesAddressSpace(g);
    if (!boards && !in_sym) boards = *t.ReadsPeerMemory(g);
  }
  direct = direct && (in_sym || boards || bytes <= (4 << 20));
  const int hierarchy_hosts =
      o.algorithm == CollectiveAlgorithm::kAuto && layout.per_host == 1
          ? 1
          : even_hosts;
  Choice c;
  c.algorithm = ChooseAllReduceAlgorithm(bytes, n, o, "psum_scatter",
                                         hierarchy_hosts, direct);
  if (c.algorithm == CollectiveAlgorithm::kHierarchical) {
    c.host_direct = OldHostDirect(t, g, layout, &in_sym);
  }
  const bool direct_boards = c.algorithm == CollectiveAlgorithm::kDirect
                                 ? boards
                                 : c.host_direct && layout.hosts_are_processes;
  c.boards = direct_boards;
  c.reads_peer_inputs =
      (c.algorithm == CollectiveAlgorithm::kDirect || c.host_direct) &&
      !direct_boards;
  c.private_input =
      c.algorithm == CollectiveAlgorithm::kDirect && !direct_boards && !in_sym;
  if (OldTakesReduction(t, g, o, c.algorithm, largest_segment,
                        bytes - largest_segment)) {
    c.path = Path::kChannel;
  }
  return c;
}

Choice BeforeAllGather(FakeTopology& t, const Group& g,
                       const CollectiveOptions& o, int64_t bytes) {
  const int n = g.size();
  Choice c;
  if (o.algorithm == CollectiveAlgorithm::kOneShot
          ? OldFits(t, g, bytes)
          : o.algorithm == CollectiveAlgorithm::kAuto &&
                OldTakesMove(t, g, bytes)) {
    c.path = Path::kChannel;
    return c;
  }
  const int lanes =
      o.algorithm == CollectiveAlgorithm::kBidirectionalRing ? 2 : 1;
  HostLayout layout;
  bool hierarchical = false, direct = false;
  if ((o.algorithm == CollectiveAlgorithm::kAuto ||
       o.algorithm == CollectiveAlgorithm::kDirect) &&
      n > 1) {
    direct = *t.Reaches(g);
  }
  if ((o.algorithm == CollectiveAlgorithm::kAuto ||
       o.algorithm == CollectiveAlgorithm::kHierarchical) &&
      n > 1 && !direct) {
    layout = *t.Layout(g);
    hierarchical = layout.Applies();
  }
  if (hierarchical) c.host_direct = OldHostDirect(t, g, layout, nullptr);
  c.algorithm = direct         ? CollectiveAlgorithm::kDirect
                : hierarchical ? CollectiveAlgorithm::kHierarchical
                : lanes == 2   ? CollectiveAlgorithm::kBidirectionalRing
                               : CollectiveAlgorithm::kRing;
  return c;
}

Choice BeforeAllToAll(FakeTopology& t, const Group& g,
                      const CollectiveOptions& o, int64_t largest_block,
                      bool ranges) {
  const int n = g.size();
  Choice c;
  if (o.algorithm == CollectiveAlgorithm::kAuto && ranges &&
      OldTakesMove(t, g, largest_block)) {
    c.path = Path::kChannel;
    return c;
  }
  bool hierarchical = false, stores = false;
  if (o.algorithm == CollectiveAlgorithm::kHierarchical && n > 1) {
    const HostLayout layout = *t.Layout(g);
    hierarchical = layout.Applies() && layout.per_host > 1;
  }
  if (!hierarchical && n > 1 &&
      (o.algorithm == CollectiveAlgorithm::kAuto ||
       o.algorithm == CollectiveAlgorithm::kDirect)) {
    stores = *t.Reaches(g);
  }
  c.algorithm = hierarchical ? CollectiveAlgorithm::kHierarchical
                : stores     ? CollectiveAlgorithm::kDirect
                             : CollectiveAlgorithm::kRing;
  return c;
}

Choice BeforePpermute(FakeTopology& t, const Group& g,
                      const CollectiveOptions& o, int64_t bytes) {
  Choice c;
  c.algorithm = CollectiveAlgorithm::kDirect;
  if (o.algorithm == CollectiveAlgorithm::kAuto && OldTakesMove(t, g, bytes)) {
    c.path = Path::kChannel;
  }
  return c;
}

// --- Launches.

// `hosts` hosts of `processes` processes of `devices` devices each.
FakeLaunch Launch(std::string name, int hosts, int processes, int devices) {
  FakeLaunch l;
  l.name = std::move(name);
  for (int h = 0; h < hosts; ++h) {
    for (int p = 0; p < processes; ++p) {
      for (int d = 0; d < devices; ++d) {
        l.host.push_back(h);
        l.process.push_back(h * processes + p);
      }
    }
  }
  return l;
}

std::vector<FakeLaunch> Launches() {
  std::vector<FakeLaunch> all = {
      Launch("1 thread", 1, 1, 1),
      Launch("2 threads", 1, 1, 2),
      Launch("4 threads", 1, 1, 4),
      Launch("2 processes x 2 devices", 1, 2, 2),
      Launch("3 processes", 1, 3, 1),
      Launch("4 hosts x 1", 4, 1, 1),
      Launch("2 hosts x 1 process x 2 devices", 2, 1, 2),
      Launch("2 hosts x 2 processes x 2 devices", 2, 2, 2),
      Launch("300 devices on 2 hosts", 2, 1, 150),
  };
  FakeLaunch uneven = Launch("hosts of 2 and 1", 1, 3, 1);
  uneven.host = {0, 0, 1};
  all.push_back(uneven);
  const size_t base = all.size();
  for (size_t i = 0; i < base; ++i) {
    FakeLaunch checked = all[i];
    checked.name += ", checked";
    checked.checked = true;
    all.push_back(checked);
    FakeLaunch small_heap = all[i];
    small_heap.name += ", 64 MiB heap";
    small_heap.heap_bytes = 64 << 20;
    all.push_back(small_heap);
  }
  return all;
}

Group GroupOf(const FakeLaunch& l, int index) {
  Group g;
  for (int i = 0; i < static_cast<int>(l.host.size()); ++i) {
    g.members.push_back(i);
  }
  g.index = index;
  return g;
}

constexpr CollectiveAlgorithm kAlgorithms[] = {
    CollectiveAlgorithm::kAuto,
    CollectiveAlgorithm::kRing,
    CollectiveAlgorithm::kBidirectionalRing,
    CollectiveAlgorithm::kOneShot,
    CollectiveAlgorithm::kHierarchical,
    CollectiveAlgorithm::kDirect};

// Sizes on both sides of every threshold.
constexpr int64_t kSizes[] = {0,
                              8,
                              4 << 10,
                              (4 << 10) + 4,
                              16 << 10,
                              (16 << 10) + 4,
                              32 << 10,
                              (32 << 10) + 4,
                              64 << 10,
                              96 << 10,
                              256 << 10,
                              (256 << 10) + 4,
                              1 << 20,
                              4 << 20,
                              (4 << 20) + 4,
                              16 << 20};

TEST(Plan, ChoosesThePathsTheEntryPointsChose) {
  int compared = 0;
  for (const FakeLaunch& l : Launches()) {
    FakeTopology t(l);
    const int n = static_cast<int>(l.host.size());
    for (int index : {0, n - 1}) {
      const Group g = GroupOf(l, index);
      for (CollectiveAlgorithm a : kAlgorithms) {
        for (int64_t one_shot_max : {int64_t{16} << 10, int64_t{1} << 20}) {
          CollectiveOptions o;
          o.algorithm = a;
          o.one_shot_max_bytes = one_shot_max;
          for (int64_t bytes : kSizes) {
            const std::string where = absl::StrCat(
                l.name, ", position ", index, ", ", CollectiveAlgorithmName(a),
                ", one_shot_max ", one_shot_max, ", ", bytes, " bytes");
            for (bool sym : {true, false}) {
              CallShape call{
                  CollectiveKind::kAllReduce, "psum", o, bytes, bytes, sym};
              ASSERT_EQ(Of(*PlanPath(call, g, t)).ToString(),
                        BeforePsum(t, g, o, bytes, sym).ToString())
                  << "psum, " << where << ", symmetric " << sym;
              const int64_t count = bytes / 4;
              const int64_t largest = (count + n - 1) / n * 4;
              call = {CollectiveKind::kReduceScatter,
                      "psum_scatter",
                      o,
                      bytes,
                      largest,
                      sym};
              ASSERT_EQ(
                  Of(*PlanPath(call, g, t)).ToString(),
                  BeforePsumScatter(t, g, o, bytes, largest, sym).ToString())
                  << "psum_scatter, " << where << ", symmetric " << sym;
              compared += 2;
            }
            CallShape call{CollectiveKind::kAllGather, "all_gather", o, bytes,
                           bytes};
            ASSERT_EQ(Of(*PlanPath(call, g, t)).ToString(),
                      BeforeAllGather(t, g, o, bytes).ToString())
                << "all_gather, " << where;
            for (bool ranges : {true, false}) {
              call = {CollectiveKind::kAllToAll,
                      "all_to_all",
                      o,
                      bytes * n,
                      bytes,
                      false,
                      ranges};
              ASSERT_EQ(Of(*PlanPath(call, g, t)).ToString(),
                        BeforeAllToAll(t, g, o, bytes, ranges).ToString())
                  << "all_to_all, " << where << ", ranges " << ranges;
            }
            call = {CollectiveKind::kPpermute, "ppermute", o, bytes, bytes};
            ASSERT_EQ(Of(*PlanPath(call, g, t)).ToString(),
                      BeforePpermute(t, g, o, bytes).ToString())
                << "ppermute, " << where;
            compared += 4;
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 50000);
}

// A few choices by hand, each naming the rule that made it.
TEST(Plan, PinnedChoices) {
  struct Case {
    FakeLaunch launch;
    CollectiveKind kind;
    int64_t bytes;
    bool symmetric;
    PathRule rule;
    CollectiveAlgorithm algorithm;
  };
  const FakeLaunch two = Launch("2 threads", 1, 1, 2);
  const FakeLaunch hosts = Launch("4 hosts", 4, 1, 1);
  const FakeLaunch even = Launch("2 hosts x 2 processes x 2", 2, 2, 2);
  const FakeLaunch procs = Launch("2 processes x 2", 1, 2, 2);
  constexpr auto kPsum = CollectiveKind::kAllReduce;
  constexpr auto kScatter = CollectiveKind::kReduceScatter;
  constexpr auto kGather = CollectiveKind::kAllGather;
  constexpr auto kPermute = CollectiveKind::kPpermute;
  using A = CollectiveAlgorithm;
  const Case cases[] = {
      {two, kPsum, 8, true, PathRule::kReduceOneShotChannel, A::kOneShot},
      {two, kPsum, 16 << 10, true, PathRule::kReduceOneShotChannel,
       A::kOneShot},
      {two, kPsum, (16 << 10) + 4, false, PathRule::kReduceDirect, A::kDirect},
      {hosts, kPsum, 8, true, PathRule::kReduceOneShotChannel, A::kOneShot},
      // One device per host is still an even spread: psum's kHierarchical
      // (its kernel above the channel's sizes).
      {hosts, kPsum, 32 << 10, true, PathRule::kReduceChannelAcrossHosts,
       A::kHierarchical},
      {hosts, kPsum, 1 << 20, true, PathRule::kReduceHierarchical,
       A::kHierarchical},
      // psum_scatter with one device per host takes the flat ring.
      {hosts, kScatter, 4 << 20, true, PathRule::kReduceRing,
       A::kBidirectionalRing},
      {even, kPsum, 8, true, PathRule::kPsumByHosts, A::kOneShot},
      {even, kPsum, 64 << 10, true, PathRule::kReduceHierarchical,
       A::kHierarchical},
      {procs, kScatter, 64 << 20, false, PathRule::kReduceRing,
       A::kBidirectionalRing},
      {procs, kScatter, 1 << 20, false, PathRule::kReduceDirect, A::kDirect},
      {two, kGather, 4 << 10, true, PathRule::kGatherChannel, A::kRing},
      {two, kGather, (4 << 10) + 4, true, PathRule::kGatherDirect, A::kDirect},
      {even, kGather, 1 << 20, true, PathRule::kGatherHierarchical,
       A::kHierarchical},
      {hosts, kPermute, 200 << 10, true, PathRule::kPermuteChannel, A::kDirect},
      {two, kPermute, 8 << 10, true, PathRule::kPermutePushes, A::kDirect},
  };
  for (const Case& c : cases) {
    FakeTopology t(c.launch);
    const Group g = GroupOf(c.launch, 0);
    CallShape call{c.kind, "call", {}, c.bytes, c.bytes, c.symmetric};
    if (c.kind == kScatter) call.max_row_bytes = c.bytes / g.size();
    absl::StatusOr<Plan> plan = PlanPath(call, g, t);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->rule, c.rule)
        << c.launch.name << ", " << c.bytes << " bytes: rule "
        << RowOf(plan->rule).collectives << ": " << RowOf(plan->rule).when;
    EXPECT_EQ(plan->algorithm, c.algorithm)
        << c.launch.name << ", " << c.bytes << " bytes";
  }
}

// The table lists every rule once, in order, with the thresholds.
TEST(Plan, TableListsEveryRule) {
  ASSERT_EQ(PathRuleTable().size(), static_cast<size_t>(PathRule::kCount));
  for (size_t i = 0; i < PathRuleTable().size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(PathRuleTable()[i].rule), i);
  }
  const std::string text = FormatPathRules();
  EXPECT_NE(text.find("kChannelMaxBlockBytes 16384"), std::string::npos)
      << text;
  EXPECT_NE(text.find("17. ppermute: otherwise"), std::string::npos) << text;
}

}  // namespace
}  // namespace meshdma::collectives_internal
