#include "meshdma/collectives/internal/plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "meshdma/base/logging.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/all_reduce.h"
#include "meshdma/collectives/internal/direct.h"

namespace meshdma::collectives_internal {

bool LiveTopology::SpansHosts(const Group& g) {
  return collectives_internal::SpansHosts(g);
}
int64_t LiveTopology::HeapBytes() { return collectives_internal::HeapBytes(); }
absl::StatusOr<bool> LiveTopology::Reaches(const Group& g) {
  return DirectReaches(g);
}
absl::StatusOr<bool> LiveTopology::SharesAddressSpace(const Group& g) {
  return collectives_internal::SharesAddressSpace(g);
}
absl::StatusOr<bool> LiveTopology::ReadsPeerMemory(const Group& g) {
  return collectives_internal::ReadsPeerMemory(g);
}
absl::StatusOr<HostLayout> LiveTopology::Layout(const Group& g) {
  return HostLayoutOf(g);
}

bool ChannelFits(Topology& topology, const Group& g, int64_t max_row_bytes) {
  if (g.size() < 2 || g.size() > kChannelMaxMembers) return false;
  // Short rows fit any channel without a look at where members sit.
  static_assert(kChannelMinBlockBytesAcrossHosts >= kChannelMaxBlockBytes);
  return max_row_bytes <= kChannelMaxBlockBytes ||
         max_row_bytes <= ChannelPayloadBytes(g.size(), topology.SpansHosts(g),
                                              topology.HeapBytes());
}

absl::string_view PathName(Path path) {
  switch (path) {
    case Path::kChannel:
      return "channel";
    case Path::kChannelByHosts:
      return "channel by hosts, then lanes";
    case Path::kKernel:
      return "kernel";
  }
  return "?";
}

namespace {

bool IsAuto(const CollectiveOptions& o) {
  return o.algorithm == CollectiveAlgorithm::kAuto;
}

// A data-moving call (ppermute, all_gather, all_to_all) with kAuto: when it
// fits the channel, and on one host only up to
// kChannelMaxMovedBlockBytesOnOneHost.
bool TakesMove(Topology& t, const Group& g, int64_t max_row_bytes) {
  return ChannelFits(t, g, max_row_bytes) &&
         (max_row_bytes <= kChannelMaxMovedBlockBytesOnOneHost ||
          t.SpansHosts(g));
}

// A reduction (rows up to `max_row_bytes`, `bytes_sent` in all from each
// member) given the algorithm `chosen` for it: kOneShot when it fits, and
// with kAuto a call that fits a group spanning hosts, above
// kChannelMinBlockBytesAcrossHosts only while `bytes_sent` stays within
// kChannelMaxBlockBytesAcrossHosts.
bool TakesReduction(Topology& t, const Group& g,
                    const CollectiveOptions& options,
                    CollectiveAlgorithm chosen, int64_t max_row_bytes,
                    int64_t bytes_sent) {
  if (chosen == CollectiveAlgorithm::kOneShot) {
    return ChannelFits(t, g, max_row_bytes);
  }
  return IsAuto(options) && ChannelFits(t, g, max_row_bytes) &&
         t.SpansHosts(g) &&
         (max_row_bytes <= kChannelMinBlockBytesAcrossHosts ||
          bytes_sent <= kChannelMaxBlockBytesAcrossHosts);
}

// Whether a hierarchical call runs its steps inside a host single-copy:
// hosts of several members each, every member of the caller's host
// reachable, and the input that host members read in place symmetric
// (`read_symmetric`) or any memory where each host is one process.
absl::StatusOr<bool> HostDirect(Topology& t, absl::string_view name,
                                const Group& g, const HostLayout& layout,
                                bool read_symmetric) {
  if (!layout.Applies() || layout.per_host < 2) return false;
  bool direct = false;
  if (read_symmetric || layout.hosts_are_processes) {
    MESHDMA_ASSIGN_OR_RETURN(direct, t.Reaches(layout.Host(g)));
  }
  MESHDMA_LOG_ONCE(
      kInfo, kLogCollectives,
      absl::StrCat(name, " hierarchical steps ", g.size(), " ", direct), name,
      " on ", g.size(),
      " devices, hierarchical: ", direct ? "single-copy" : "rings",
      " inside each host, then the lanes");
  return direct;
}

PathRule KernelRule(CollectiveAlgorithm a) {
  switch (a) {
    case CollectiveAlgorithm::kOneShot:
      return PathRule::kReduceOneShot;
    case CollectiveAlgorithm::kDirect:
      return PathRule::kReduceDirect;
    case CollectiveAlgorithm::kHierarchical:
      return PathRule::kReduceHierarchical;
    default:
      return PathRule::kReduceRing;
  }
}

// psum, psum_scatter:
//   step 1: the hosts and the peers' reach, asked only where kDirect or
//           kHierarchical may run (above `one_shot_max_bytes`, or asked for);
//   step 2: the kernel's algorithm and its single-copy choices;
//   step 3: the channel where it takes the call's rows;
//   step 4: psum: over each host's channel, then each lane's, where both
//           take the rows (kAuto, several devices on each host).
absl::StatusOr<Plan> PlanReduction(const CallShape& call, const Group& g,
                                   Topology& t) {
  const CollectiveOptions& o = call.options;
  const bool psum = call.kind == CollectiveKind::kAllReduce;
  const int n = g.size();
  const int64_t bytes = call.bytes;
  const bool above_one_shot = IsAuto(o) && bytes > o.one_shot_max_bytes;
  Plan plan;
  // Step 1.
  int even_hosts = 1;
  if ((o.algorithm == CollectiveAlgorithm::kHierarchical || above_one_shot) &&
      n >= 2) {
    MESHDMA_ASSIGN_OR_RETURN(plan.layout, t.Layout(g));
    even_hosts = plan.layout.EvenHosts();
  }
  bool direct = false;
  if ((o.algorithm == CollectiveAlgorithm::kDirect || above_one_shot) &&
      n >= 2) {
    MESHDMA_ASSIGN_OR_RETURN(direct, t.Reaches(g));
  }
  // psum_scatter: a private input takes kDirect where threads of one process
  // read it, else up to kDirectPrivateScatterMaxBytes.
  if (!psum && direct) {
    MESHDMA_ASSIGN_OR_RETURN(plan.boards, t.SharesAddressSpace(g));
    if (!plan.boards && !call.input_symmetric) {
      MESHDMA_ASSIGN_OR_RETURN(plan.boards, t.ReadsPeerMemory(g));
    }
    direct = call.input_symmetric || plan.boards ||
             bytes <= kDirectPrivateScatterMaxBytes;
  }
  // Step 2. psum_scatter with kAuto and one device per host: the flat ring.
  // kHierarchical would pack the whole input into scratch for the same ring
  // between hosts, and zero that scratch at its exit; between 2 hosts over
  // TCP the ring took 0.61x its time at 16 MiB and 0.80x at 4 MiB.
  const int hierarchy_hosts =
      !psum && IsAuto(o) && plan.layout.per_host == 1 ? 1 : even_hosts;
  plan.algorithm =
      ChooseAllReduceAlgorithm(bytes, n, o, call.name, hierarchy_hosts, direct);
  const bool hierarchical =
      plan.algorithm == CollectiveAlgorithm::kHierarchical;
  if (hierarchical) {
    // psum's private input is read from its output (symmetric) up to
    // kHostDirectPrivateMaxBytes.
    const bool read_symmetric =
        call.input_symmetric || (psum && (plan.layout.hosts_are_processes ||
                                          bytes <= kHostDirectPrivateMaxBytes));
    MESHDMA_ASSIGN_OR_RETURN(
        plan.host_direct,
        HostDirect(t, call.name, g, plan.layout, read_symmetric));
  }
  const bool single_copy =
      plan.algorithm == CollectiveAlgorithm::kDirect || plan.host_direct;
  if (plan.algorithm != CollectiveAlgorithm::kDirect) {
    plan.boards = plan.host_direct && plan.layout.hosts_are_processes;
  } else if (psum) {
    MESHDMA_ASSIGN_OR_RETURN(plan.boards, t.SharesAddressSpace(g));
    if (!plan.boards && !call.input_symmetric) {
      MESHDMA_ASSIGN_OR_RETURN(plan.boards, t.ReadsPeerMemory(g));
    }
  }
  plan.reads_peer_inputs = single_copy && !plan.boards;
  plan.private_input =
      !call.input_symmetric && !plan.boards &&
      (psum ? single_copy : plan.algorithm == CollectiveAlgorithm::kDirect);
  // Step 3. psum's kHierarchical with several devices on each host keeps
  // its kernel: each row of the flat channel would cross hosts, where the
  // kernel sends one part per lane (measured on 2 simulated hosts x 2
  // processes at 32-64 KiB).
  const int64_t bytes_sent =
      psum ? bytes * (n - 1) : bytes - call.max_row_bytes;
  const bool channel =
      TakesReduction(t, g, o, plan.algorithm, call.max_row_bytes, bytes_sent) &&
      !(psum && hierarchical && plan.layout.per_host > 1);
  if (!channel) {
    plan.rule = KernelRule(plan.algorithm);
    return plan;
  }
  plan.path = Path::kChannel;
  plan.rule = plan.algorithm == CollectiveAlgorithm::kOneShot
                  ? PathRule::kReduceOneShotChannel
                  : PathRule::kReduceChannelAcrossHosts;
  // Step 4.
  if (psum && IsAuto(o) && n > 2 && t.SpansHosts(g)) {
    MESHDMA_ASSIGN_OR_RETURN(plan.layout, t.Layout(g));
    const HostLayout& l = plan.layout;
    if (l.Applies() && l.per_host > 1 &&
        ChannelFits(t, l.Host(g), call.max_row_bytes) &&
        ChannelFits(t, l.Lane(g), call.max_row_bytes)) {
      plan.path = Path::kChannelByHosts;
      plan.rule = PathRule::kPsumByHosts;
      MESHDMA_LOG_ONCE(kInfo, kLogCollectives,
                       absl::StrCat(call.name, " by hosts ", n), call.name,
                       " on ", n, " devices over ", l.num_hosts,
                       " hosts: each host's channel, then each lane's (auto; ",
                       bytes, " bytes)");
    }
  }
  return plan;
}

void LogChannel(absl::string_view name, int n) {
  MESHDMA_LOG_ONCE(kInfo, kLogCollectives, absl::StrCat(name, " channel ", n),
                   name, " on ", n, " devices: channel (auto; one exchange)");
}

// all_gather: the channel (kAuto within TakesMove, or kOneShot where it
// fits); else kDirect where every member is addressable, kHierarchical on
// even hosts, the ring(s).
absl::StatusOr<Plan> PlanAllGather(const CallShape& call, const Group& g,
                                   Topology& t) {
  const CollectiveAlgorithm a = call.options.algorithm;
  const int n = g.size();
  Plan plan;
  if (a == CollectiveAlgorithm::kOneShot
          ? ChannelFits(t, g, call.bytes)
          : a == CollectiveAlgorithm::kAuto && TakesMove(t, g, call.bytes)) {
    LogChannel(call.name, n);
    plan.path = Path::kChannel;
    plan.rule = PathRule::kGatherChannel;
    return plan;
  }
  bool direct = false, hierarchical = false;
  if ((a == CollectiveAlgorithm::kAuto || a == CollectiveAlgorithm::kDirect) &&
      n > 1) {
    MESHDMA_ASSIGN_OR_RETURN(direct, t.Reaches(g));
  }
  if ((a == CollectiveAlgorithm::kAuto ||
       a == CollectiveAlgorithm::kHierarchical) &&
      n > 1 && !direct) {
    MESHDMA_ASSIGN_OR_RETURN(plan.layout, t.Layout(g));
    hierarchical = plan.layout.Applies();
  }
  if (hierarchical) {
    // The all-gather reads no input of its host members.
    MESHDMA_ASSIGN_OR_RETURN(plan.host_direct,
                             HostDirect(t, call.name, g, plan.layout,
                                        /*read_symmetric=*/true));
  }
  const bool two_lanes = a == CollectiveAlgorithm::kBidirectionalRing;
  plan.algorithm = direct         ? CollectiveAlgorithm::kDirect
                   : hierarchical ? CollectiveAlgorithm::kHierarchical
                   : two_lanes    ? CollectiveAlgorithm::kBidirectionalRing
                                  : CollectiveAlgorithm::kRing;
  plan.rule = direct         ? PathRule::kGatherDirect
              : hierarchical ? PathRule::kGatherHierarchical
                             : PathRule::kGatherRing;
  MESHDMA_LOG_ONCE(kInfo, kLogCollectives,
                   absl::StrCat(call.name, " ", n, " ", two_lanes ? 2 : 1, " ",
                                hierarchical, direct),
                   call.name, " on ", n,
                   " devices: ", CollectiveAlgorithmName(plan.algorithm),
                   ChosenBy(a));
  return plan;
}

// all_to_all: the channel (kAuto, blocks that are byte ranges, within
// TakesMove); else kHierarchical where requested on hosts of several
// members each, stores through peer views where every member is
// addressable (kAuto, kDirect), one DMA push per peer. kAuto does not
// choose kHierarchical: measured with meshdma-bench on 2 simulated hosts x
// 2 processes (MPI between hosts over shared memory, and over TCP), it did
// not beat the pushes above the channel's sizes (128 KiB to 8 MiB per
// device, speed relative to pushes: 0.4-1.1x over shared memory, 0.4-1.7x,
// median 0.75x, over TCP): its extra local copies outweigh the m - 1
// messages per peer host it saves.
absl::StatusOr<Plan> PlanAllToAll(const CallShape& call, const Group& g,
                                  Topology& t) {
  const CollectiveAlgorithm a = call.options.algorithm;
  const int n = g.size();
  Plan plan;
  if (a == CollectiveAlgorithm::kAuto && call.blocks_are_ranges &&
      TakesMove(t, g, call.max_row_bytes)) {
    LogChannel(call.name, n);
    plan.path = Path::kChannel;
    plan.rule = PathRule::kAllToAllChannel;
    return plan;
  }
  bool hierarchical = false, stores = false;
  if (a == CollectiveAlgorithm::kHierarchical && n > 1) {
    MESHDMA_ASSIGN_OR_RETURN(plan.layout, t.Layout(g));
    hierarchical = plan.layout.Applies() && plan.layout.per_host > 1;
  }
  if (!hierarchical && n > 1 &&
      (a == CollectiveAlgorithm::kAuto || a == CollectiveAlgorithm::kDirect)) {
    MESHDMA_ASSIGN_OR_RETURN(stores, t.Reaches(g));
  }
  plan.algorithm = hierarchical ? CollectiveAlgorithm::kHierarchical
                   : stores     ? CollectiveAlgorithm::kDirect
                                : CollectiveAlgorithm::kRing;
  plan.rule = hierarchical ? PathRule::kAllToAllHierarchical
              : stores     ? PathRule::kAllToAllDirect
                           : PathRule::kAllToAllPushes;
  const HostLayout& l = plan.layout;
  MESHDMA_LOG_ONCE(
      kInfo, kLogCollectives,
      absl::StrCat(call.name, " ", n, " ", hierarchical,
                   CollectiveAlgorithmName(a)),
      call.name, " on ", n, " devices: ",
      hierarchical
          ? absl::StrCat("hierarchical (", l.num_hosts, " hosts x ", l.per_host,
                         "; ", l.num_hosts - 1,
                         " DMA push(es) per device between hosts, direct: ",
                         l.per_host * (l.num_hosts - 1), ")")
      : stores ? std::string("direct (stores through peer views)")
               : absl::StrCat("direct (", n - 1, " DMA pushes per device)"),
      ChosenBy(a));
  return plan;
}

// ppermute: the channel (kAuto within TakesMove), else one DMA per pair.
absl::StatusOr<Plan> PlanPpermute(const CallShape& call, const Group& g,
                                  Topology& t) {
  const int n = g.size();
  Plan plan;
  plan.algorithm = CollectiveAlgorithm::kDirect;
  if (IsAuto(call.options) && TakesMove(t, g, call.bytes)) {
    LogChannel(call.name, n);
    plan.path = Path::kChannel;
    plan.rule = PathRule::kPermuteChannel;
    return plan;
  }
  plan.rule = PathRule::kPermutePushes;
  MESHDMA_LOG_ONCE(kInfo, kLogCollectives, absl::StrCat(call.name, " ", n),
                   call.name, " on ", n,
                   " devices: direct (one DMA push per pair)");
  return plan;
}

}  // namespace

absl::StatusOr<Plan> PlanPath(const CallShape& call, const Group& g,
                              Topology& topology) {
  switch (call.kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kReduceScatter:
      return PlanReduction(call, g, topology);
    case CollectiveKind::kAllGather:
      return PlanAllGather(call, g, topology);
    case CollectiveKind::kAllToAll:
      return PlanAllToAll(call, g, topology);
    case CollectiveKind::kPpermute:
      return PlanPpermute(call, g, topology);
  }
  return CollectiveError(call.name, g, "no plan for this collective");
}

std::string FormatPathRules() {
  const CollectiveOptions defaults;
  std::string text = absl::StrCat(
      "thresholds: one_shot_max_bytes (option) ", defaults.one_shot_max_bytes,
      ", kChannelMaxBlockBytes ", kChannelMaxBlockBytes,
      ", kChannelMaxMovedBlockBytesOnOneHost ",
      kChannelMaxMovedBlockBytesOnOneHost,
      ", kChannelMaxBlockBytesAcrossHosts ", kChannelMaxBlockBytesAcrossHosts,
      ", kChannelMinBlockBytesAcrossHosts ", kChannelMinBlockBytesAcrossHosts,
      ", kChannelSetBytesAcrossHosts ", kChannelSetBytesAcrossHosts,
      ", kChannelMaxMembers ", kChannelMaxMembers,
      ", kHostDirectPrivateMaxBytes ", kHostDirectPrivateMaxBytes,
      ", kDirectPrivateScatterMaxBytes ", kDirectPrivateScatterMaxBytes, "\n");
  for (const PathRuleRow& row : PathRuleTable()) {
    absl::StrAppend(&text, static_cast<int>(row.rule) + 1, ". ",
                    row.collectives, ": ", row.when, " -> ", row.path, "\n");
  }
  return text;
}

}  // namespace meshdma::collectives_internal

namespace meshdma {

CollectiveAlgorithm ChooseAllReduceAlgorithm(int64_t bytes, int group_size,
                                             const CollectiveOptions& options,
                                             absl::string_view collective,
                                             int even_hosts, bool direct) {
  const bool requested = options.algorithm != CollectiveAlgorithm::kAuto;
  const CollectiveAlgorithm flat_ring =
      group_size <= 2 ? CollectiveAlgorithm::kRing
                      : CollectiveAlgorithm::kBidirectionalRing;
  CollectiveAlgorithm chosen = options.algorithm;
  if (!requested) {
    chosen = CollectiveAlgorithm::kOneShot;
    if (bytes > options.one_shot_max_bytes) {
      chosen = direct           ? CollectiveAlgorithm::kDirect
               : even_hosts > 1 ? CollectiveAlgorithm::kHierarchical
                                : flat_ring;
    }
  } else if (chosen == CollectiveAlgorithm::kHierarchical && even_hosts <= 1) {
    chosen = flat_ring;  // One host, or hosts with different counts.
  } else if (chosen == CollectiveAlgorithm::kDirect && !direct) {
    chosen = flat_ring;  // Another host, checked mode, or a private input.
  }
  // MESHDMA_DEBUG=INFO: each choice once per process.
  MESHDMA_LOG_ONCE(
      kInfo, kLogCollectives,
      absl::StrCat(collective, " ", group_size, " ",
                   CollectiveAlgorithmName(chosen), requested, " ", even_hosts,
                   direct),
      collective, " on ", group_size, " devices",
      even_hosts > 1 ? absl::StrCat(" (hierarchical over ", even_hosts,
                                    " hosts", direct ? ", addressable)" : ")")
                     : std::string(direct ? " (addressable)" : ""),
      ": ", CollectiveAlgorithmName(chosen),
      requested ? absl::StrCat(" (", CollectiveAlgorithmName(options.algorithm),
                               " requested)")
                : absl::StrCat(" (auto; ", bytes, " bytes, one_shot up to ",
                               options.one_shot_max_bytes, ")"));
  return chosen;
}

std::string CollectivePathRules() {
  return collectives_internal::FormatPathRules();
}

}  // namespace meshdma
