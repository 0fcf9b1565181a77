// ppermute: each listed source sends its input to its destination.
//
// `perm` holds (source, destination) pairs of positions in the group over
// `axes` (position = coordinate along the axes, row-major over several). Each
// position may appear at most once as a source and once as a destination;
// pairs may be partial and may send to self. Like `jax.lax.ppermute`, a device
// that is no pair's destination gets zeros. `input` and `output` have the same
// dtype and element count; `output` must be symmetric unless the group has
// one device, and must not be `input` (a peer may write it while this device
// still reads its input). Any element type. One DMA per pair.
#ifndef MESHDMA_COLLECTIVES_PPERMUTE_H_
#define MESHDMA_COLLECTIVES_PPERMUTE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "meshdma/collectives/options.h"
#include "meshdma/dma/array_ref.h"

namespace meshdma {

absl::Status ppermute(const ArrayRef& input, const ArrayRef& output,
                      const std::vector<std::string>& axes,
                      const std::vector<std::pair<int, int>>& perm,
                      const CollectiveOptions& options = {});

}  // namespace meshdma

#endif  // MESHDMA_COLLECTIVES_PPERMUTE_H_
