#include "meshdma/collectives/fused/overlap.h"

#include "meshdma/base/status_macros.h"
#include "meshdma/dma/runtime.h"

namespace meshdma {

absl::StatusOr<RingPosition> CurrentRingPosition(const std::string& axis) {
  RingPosition ring;
  MESHDMA_ASSIGN_OR_RETURN(ring.index, axis_index(axis));
  MESHDMA_ASSIGN_OR_RETURN(ring.size, axis_size(axis));
  MESHDMA_ASSIGN_OR_RETURN(const Mesh* mesh, current_mesh());
  MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
  const std::string axes[] = {axis};
  MESHDMA_ASSIGN_OR_RETURN(ring.right, mesh->RingNeighbor(me, axes, 1));
  MESHDMA_ASSIGN_OR_RETURN(ring.left, mesh->RingNeighbor(me, axes, -1));
  return ring;
}

}  // namespace meshdma
