// The rule table of the collectives' paths: every size threshold by which a
// collective chooses its path, and the ordered rules that use them. The
// planner (plan.h) walks these rules; `meshdma-info` and the bench header
// print them (`CollectivePathRules`, options.h). The channel sizes its rows
// from the same thresholds (channel.h).
#ifndef MESHDMA_COLLECTIVES_INTERNAL_PATH_RULES_H_
#define MESHDMA_COLLECTIVES_INTERNAL_PATH_RULES_H_

#include <cstdint>
#include <span>

namespace meshdma::collectives_internal {

// A call whose largest block per peer is at most this many bytes fits any
// channel (on one host, this is the channel's row).
inline constexpr int64_t kChannelMaxBlockBytes = 16 << 10;
// On one host, ppermute, all_gather and all_to_all take the channel only for
// blocks up to this many bytes: there a kernel reaches each peer's output
// with one copy, where the channel copies each block twice (into the peer's
// row, then out of it into the output); past 4 KiB the second copy costs
// more than the kernel's entry barrier.
inline constexpr int64_t kChannelMaxMovedBlockBytesOnOneHost = 4 << 10;
// Across hosts a row is one message, while a kernel's entry barrier and steps
// each cost a network round trip: rows go up to this many bytes there, less
// in a large group, whose slot set (one row per member) stays within
// kChannelSetBytesAcrossHosts and 1/64 of the heap, with rows of no less
// than kChannelMinBlockBytesAcrossHosts. `psum` and `psum_scatter` take the
// channel beyond that floor only while each member sends at most
// kChannelMaxBlockBytesAcrossHosts in all.
inline constexpr int64_t kChannelMaxBlockBytesAcrossHosts = 256 << 10;
inline constexpr int64_t kChannelMinBlockBytesAcrossHosts = 32 << 10;
inline constexpr int64_t kChannelSetBytesAcrossHosts = 4 << 20;
// A channel serves groups of 2 to this many members.
inline constexpr int kChannelMaxMembers = 256;
// A psum's private input of more bytes than this takes the rings inside a
// host rather than being copied whole into its output first. Four
// alternating rounds of `mpirun -np 4 --oversubscribe -x MESHDMA_HOSTS=2
// meshdma-bench --collective all_reduce --input private`, rings against the
// copy (median us): 902 against 663 at 1 MiB, 3880 against 3782 at 4 MiB,
// 16735 against 18598 at 16 MiB.
inline constexpr int64_t kHostDirectPrivateMaxBytes = 4 << 20;
// Between processes, a psum_scatter's private input of more bytes than this
// takes the rings (threads of one process read it through boards): the
// scratch, zeroed again at the kernel's exit, then cost more than the rings'
// reuse of small slots. Alternating rounds of `mpirun -np 2 meshdma-bench
// --collective reduce_scatter --input private`, rings against the copy
// (median us of 3 rounds): 782 against 394 at 4 MiB; at 8 MiB 2065 against
// 1838 one day and 1169 against 1673 in the next three rounds; 4020 against
// 4802 at 16 MiB, 7317 against 10096 at 32 MiB.
inline constexpr int64_t kDirectPrivateScatterMaxBytes = 4 << 20;

// The longest payload a row of a channel of `group_size` members carries:
// kChannelMaxBlockBytes on one host; across hosts
// kChannelMaxBlockBytesAcrossHosts, or less in a group so large that a slot
// set would pass kChannelSetBytesAcrossHosts or 1/64 of the heap
// (`heap_bytes`), but no less than kChannelMinBlockBytesAcrossHosts; always
// whole cache lines.
int64_t ChannelPayloadBytes(int group_size, bool spans_hosts,
                            int64_t heap_bytes);

// The rules, in the order the planner tries them for each collective (the
// first that holds chooses the path). `Plan::rule` names the one that chose.
enum class PathRule : int {
  // psum, psum_scatter.
  kReduceOneShotChannel,
  kPsumByHosts,
  kReduceChannelAcrossHosts,
  kReduceOneShot,
  kReduceDirect,
  kReduceHierarchical,
  kReduceRing,
  // all_gather.
  kGatherChannel,
  kGatherDirect,
  kGatherHierarchical,
  kGatherRing,
  // all_to_all.
  kAllToAllChannel,
  kAllToAllHierarchical,
  kAllToAllDirect,
  kAllToAllPushes,
  // ppermute.
  kPermuteChannel,
  kPermutePushes,
  kCount,
};

// One row of the table, as printed.
struct PathRuleRow {
  PathRule rule;
  const char* collectives;
  const char* when;  // The condition, with its thresholds.
  const char* path;
};
std::span<const PathRuleRow> PathRuleTable();
const PathRuleRow& RowOf(PathRule rule);

}  // namespace meshdma::collectives_internal

#endif  // MESHDMA_COLLECTIVES_INTERNAL_PATH_RULES_H_
