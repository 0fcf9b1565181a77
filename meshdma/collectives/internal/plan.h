// The planner: the one place that chooses a collective's path. `PlanPath`
// turns a call (collective, op, sizes, options) and where its group's
// members sit into a `Plan`: the channel, the channel of each host then of
// each lane, or a kernel with its algorithm and single-copy choices. It
// walks the ordered rules of path_rules.h, whose thresholds it reads there;
// the entry points run the plan and the algorithm files hold algorithms
// only. Every member of a matching call plans the same path.
#ifndef MESHDMA_COLLECTIVES_INTERNAL_PLAN_H_
#define MESHDMA_COLLECTIVES_INTERNAL_PLAN_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshdma/collectives/internal/common.h"
#include "meshdma/collectives/internal/hierarchy.h"
#include "meshdma/collectives/internal/path_rules.h"
#include "meshdma/collectives/options.h"

namespace meshdma::collectives_internal {

// What the planner asks about where a group's members sit. `LiveTopology`
// asks the running launch; tests answer from a fixed layout. Each answer is
// the same on every member of the group.
class Topology {
 public:
  virtual ~Topology() = default;
  // Members on more than one host (`SpansHosts`).
  virtual bool SpansHosts(const Group& g) = 0;
  // The symmetric heap's bytes (`HeapBytes`).
  virtual int64_t HeapBytes() = 0;
  // Every member addressable by peer views (`DirectReaches`; false in
  // checked mode).
  virtual absl::StatusOr<bool> Reaches(const Group& g) = 0;
  // Every member a device of this process, checked mode off.
  virtual absl::StatusOr<bool> SharesAddressSpace(const Group& g) = 0;
  // Any memory of every member readable (`ReadsPeerMemory`).
  virtual absl::StatusOr<bool> ReadsPeerMemory(const Group& g) = 0;
  // The group's members by host (`HostLayoutOf`).
  virtual absl::StatusOr<HostLayout> Layout(const Group& g) = 0;
};

// The running launch's answers (the calling device's runtime).
class LiveTopology final : public Topology {
 public:
  bool SpansHosts(const Group& g) override;
  int64_t HeapBytes() override;
  absl::StatusOr<bool> Reaches(const Group& g) override;
  absl::StatusOr<bool> SharesAddressSpace(const Group& g) override;
  absl::StatusOr<bool> ReadsPeerMemory(const Group& g) override;
  absl::StatusOr<HostLayout> Layout(const Group& g) override;
};

// Whether a call of `g` whose largest row is `max_row_bytes` fits a channel.
bool ChannelFits(Topology& topology, const Group& g, int64_t max_row_bytes);

// What the planner reads of a call (its operands already checked).
struct CallShape {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  absl::string_view name;  // For MESHDMA_DEBUG lines.
  CollectiveOptions options;
  // The input's bytes on this device (the same on every member for the
  // reductions and all_gather).
  int64_t bytes = 0;
  // The largest block one member sends one peer: psum's whole input,
  // psum_scatter's largest segment, all_to_all's largest block.
  int64_t max_row_bytes = 0;
  bool input_symmetric = false;
  // all_to_all: split and concat axes 0 and a contiguous input, so that
  // blocks are byte ranges (the channel moves only such).
  bool blocks_are_ranges = true;
};

enum class Path {
  kChannel,         // One exchange over the group's channel.
  kChannelByHosts,  // psum: each host's channel, then each lane's.
  kKernel,          // A kernel running `Plan::algorithm`.
};
absl::string_view PathName(Path path);

struct Plan {
  Path path = Path::kKernel;
  PathRule rule = PathRule::kCount;  // The rule that chose it.
  // The kernel's algorithm. all_to_all's kDirect is stores through peer
  // views, its kRing one DMA push per peer; ppermute's is kDirect (one DMA
  // per pair). For the reductions' channel paths, the algorithm that kAuto
  // chose before the channel took the call (kOneShot, or another across
  // hosts).
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::kRing;
  // kHierarchical and kChannelByHosts: the group's members by host.
  HostLayout layout;
  // kHierarchical: the steps inside each host single-copy.
  bool host_direct = false;
  // The reductions' single-copy steps read the inputs where they are,
  // through boards (direct.h; RunReductionKernel's `publish_input`).
  bool boards = false;
  // A private input is copied for the peers (psum: into its output, which
  // then stands for the input; psum_scatter: into their scratch).
  bool private_input = false;
  // The reductions' kernel reads peers' inputs in place (its signature then
  // holds the input's heap offset; RunReductionKernel's
  // `reads_peer_inputs`).
  bool reads_peer_inputs = false;
};

// Walks the rules of `call.kind` (path_rules.h) for a call over `g`. Errors
// only where `topology` fails to answer. Logs the choice once per process
// under MESHDMA_DEBUG=INFO.
absl::StatusOr<Plan> PlanPath(const CallShape& call, const Group& g,
                              Topology& topology);

// The table (thresholds, then rules) as text, one row a line.
std::string FormatPathRules();

}  // namespace meshdma::collectives_internal

#endif  // MESHDMA_COLLECTIVES_INTERNAL_PLAN_H_
