#include "meshdma/collectives/internal/path_rules.h"

#include <algorithm>
#include <array>

namespace meshdma::collectives_internal {
namespace {

// "auto" is CollectiveAlgorithm::kAuto; "reachable" is every member
// addressable by peer views (one host, checked mode off); "rows fit" is
// within the group's channel row (kChannelMaxBlockBytes on one host; across
// hosts up to kChannelMaxBlockBytesAcrossHosts, less in a group whose slot
// set would pass kChannelSetBytesAcrossHosts or 1/64 of the heap, never
// under kChannelMinBlockBytesAcrossHosts) in a group of 2 to
// kChannelMaxMembers.
constexpr std::array<PathRuleRow, static_cast<int>(PathRule::kCount)> kTable = {
    {
        {PathRule::kReduceOneShotChannel, "psum, psum_scatter",
         "one_shot (auto: input <= one_shot_max_bytes) and rows fit",
         "channel"},
        {PathRule::kPsumByHosts, "psum",
         "auto, rule 1 or 3 holds, more than 2 devices spread evenly over "
         "hosts "
         "with several on each, and the rows fit each host's and each lane's "
         "channel",
         "each host's channel, then each lane's"},
        {PathRule::kReduceChannelAcrossHosts, "psum, psum_scatter",
         "auto, the group spans hosts, rows fit, and rows <= "
         "kChannelMinBlockBytesAcrossHosts or each device sends <= "
         "kChannelMaxBlockBytesAcrossHosts (psum: not where rule 6 holds with "
         "several devices on each host)",
         "channel"},
        {PathRule::kReduceOneShot, "psum, psum_scatter",
         "one_shot (auto: input <= one_shot_max_bytes)", "kernel one_shot"},
        {PathRule::kReduceDirect, "psum, psum_scatter",
         "direct, or auto above one_shot_max_bytes, and reachable "
         "(psum_scatter's private input between processes: "
         "<= kDirectPrivateScatterMaxBytes)",
         "kernel direct (threads of one process read the inputs where they "
         "are; else a private input is copied for the peers)"},
        {PathRule::kReduceHierarchical, "psum, psum_scatter",
         "hierarchical, or auto above one_shot_max_bytes, on hosts holding "
         "the same number of devices each (psum_scatter with auto: several "
         "each)",
         "kernel hierarchical (single-copy inside a host whose members are "
         "reachable; psum's private input read from its output up to "
         "kHostDirectPrivateMaxBytes)"},
        {PathRule::kReduceRing, "psum, psum_scatter", "otherwise",
         "kernel ring (2 devices, or ring requested) or bidirectional_ring"},
        {PathRule::kGatherChannel, "all_gather",
         "auto, rows fit, and on one host <= "
         "kChannelMaxMovedBlockBytesOnOneHost; or one_shot and rows fit",
         "channel"},
        {PathRule::kGatherDirect, "all_gather", "auto or direct, reachable",
         "kernel direct"},
        {PathRule::kGatherHierarchical, "all_gather",
         "auto or hierarchical, hosts holding the same number of devices each",
         "kernel hierarchical"},
        {PathRule::kGatherRing, "all_gather", "otherwise",
         "kernel ring (bidirectional_ring where requested)"},
        {PathRule::kAllToAllChannel, "all_to_all",
         "auto, split and concat axis 0, contiguous input, the largest block "
         "fits, and on one host <= kChannelMaxMovedBlockBytesOnOneHost",
         "channel"},
        {PathRule::kAllToAllHierarchical, "all_to_all",
         "hierarchical, hosts holding the same number (> 1) of devices each",
         "kernel hierarchical"},
        {PathRule::kAllToAllDirect, "all_to_all", "auto or direct, reachable",
         "kernel direct (stores through peer views)"},
        {PathRule::kAllToAllPushes, "all_to_all", "otherwise",
         "kernel of one DMA push per peer"},
        {PathRule::kPermuteChannel, "ppermute",
         "auto, rows fit, and on one host <= "
         "kChannelMaxMovedBlockBytesOnOneHost",
         "channel"},
        {PathRule::kPermutePushes, "ppermute", "otherwise",
         "kernel of one DMA push per pair"},
    }};

}  // namespace

int64_t ChannelPayloadBytes(int group_size, bool spans_hosts,
                            int64_t heap_bytes) {
  if (!spans_hosts) return kChannelMaxBlockBytes;
  const int64_t set_bytes =
      std::min(kChannelSetBytesAcrossHosts, heap_bytes / 64);
  // Whole cache lines, so that every row, and every element in it, stays
  // aligned.
  constexpr int64_t kLine = 64;
  return std::clamp(set_bytes / group_size / kLine * kLine,
                    kChannelMinBlockBytesAcrossHosts,
                    kChannelMaxBlockBytesAcrossHosts);
}

std::span<const PathRuleRow> PathRuleTable() { return kTable; }

const PathRuleRow& RowOf(PathRule rule) {
  return kTable[static_cast<int>(rule)];
}

}  // namespace meshdma::collectives_internal
