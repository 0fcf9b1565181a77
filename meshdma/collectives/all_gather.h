// All-gather over mesh axes.
//
// Every device of a group passes an `input` of the same shape; `output`
// receives the inputs of all members in group order: stacked (`tiled` false,
// output shape [n, *input.shape], as `jax.lax.all_gather`) or tiled
// (concatenated along dimension 0, output shape [n * input.shape[0], ...]).
// `output` must be symmetric unless the group has one device: each member's
// input travels straight into its neighbours' outputs (no staging copy).
// `input` may be any contiguous memory, including this device's own block of
// `output` (in place). Any element type, u8 included.
//
// Algorithms: kRing (n-1 steps, each block passed along the ring),
// kBidirectionalRing (half of each block each way) and kHierarchical (groups
// spanning hosts with the same number of devices on each: all-gather among
// the hosts' devices of each local index, then inside each host), kDirect
// (every member addressable by loads and stores: each device stores its block
// into every member's output itself); kAuto is one exchange over the group's
// channel for small blocks, else kDirect where every member is addressable,
// else kHierarchical where it applies, else kRing.
#ifndef MESHDMA_COLLECTIVES_ALL_GATHER_H_
#define MESHDMA_COLLECTIVES_ALL_GATHER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "meshdma/collectives/options.h"
#include "meshdma/dma/array_ref.h"

namespace meshdma {

absl::Status all_gather(const ArrayRef& input, const ArrayRef& output,
                        const std::vector<std::string>& axes,
                        bool tiled = false,
                        const CollectiveOptions& options = {});

}  // namespace meshdma

#endif  // MESHDMA_COLLECTIVES_ALL_GATHER_H_
