// The plan cache: the plans a device made in the current Run, keyed by the
// call shape they were made for, so that the same call again (a decode
// loop's small collectives) runs its plan at once: no resolving its axes,
// checking its operands again, planning or hashing its signature, which
// were about a third of an 8-byte psum on one host (`mpirun -np 2
// meshdma-bench --collective OP -b 8 -e 4K -f 8`). The channel paths keep
// their plans here; a kernel pays its entry barrier, which costs more than
// planning. Forgotten at the end of every Run with the channels the plans
// name.
#ifndef MESHDMA_COLLECTIVES_INTERNAL_PLAN_CACHE_H_
#define MESHDMA_COLLECTIVES_INTERNAL_PLAN_CACHE_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "meshdma/collectives/internal/channel.h"
#include "meshdma/collectives/internal/common.h"
#include "meshdma/collectives/internal/plan.h"
#include "meshdma/collectives/options.h"
#include "meshdma/dma/array_ref.h"

namespace meshdma::collectives_internal {

// Everything a call's plan and signature depend on, as the caller passed it
// (views, valid during the call): the collective and its `aux` (the
// reduction's operation, all_gather's tiling, all_to_all's axes), the
// operands' element type and shapes, whether the input is symmetric, the
// output's address (the signature holds its heap offset), the axes, the
// options and ppermute's permutation (a new one is validated again).
struct CallKey {
  CollectiveKind kind;
  int aux;
  const ArrayRef& input;
  const ArrayRef& output;
  std::span<const std::string> axes;
  const CollectiveOptions& options;
  std::span<const std::pair<int, int>> perm = {};
};

// A call as planned the first time, with what running its path needs.
struct PlannedCall {
  PlannedCall(Plan plan, Group group, int64_t signature = 0,
              Channel* channel = nullptr)
      : plan(std::move(plan)),
        group(std::move(group)),
        signature(signature),
        channel(channel) {}
  PlannedCall(Plan plan, Group group, int64_t signature, Channel* channel,
              CallLayout layout)
      : PlannedCall(std::move(plan), std::move(group), signature, channel) {
    this->layout = std::move(layout);
  }

  Plan plan;
  Group group;  // Views the cache's copy of the axes.
  int64_t signature = 0;
  // Path::kChannel: the group's channel; kChannelByHosts: the host's, and
  // `next` the lane's stage.
  Channel* channel = nullptr;
  std::optional<ChannelStage> next;
  CallLayout layout;  // all_to_all and psum_scatter; else empty.
};

// The calling device's planned call for `key`, or null. A call matches only
// when its operands are contiguous and its output symmetric, as the first
// call checked; what it sends is still compared with its peers' calls.
const PlannedCall* FindPlannedCall(const CallKey& key);
// Keeps `call` for `key` (after it ran), in place of the oldest of the few
// plans this device keeps.
void CachePlannedCall(const CallKey& key, PlannedCall call);

}  // namespace meshdma::collectives_internal

#endif  // MESHDMA_COLLECTIVES_INTERNAL_PLAN_CACHE_H_
