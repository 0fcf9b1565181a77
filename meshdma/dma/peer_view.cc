#include "meshdma/dma/peer_view.h"

#include "meshdma/base/status_macros.h"
#include "meshdma/dma/internal/device.h"

namespace meshdma {

absl::StatusOr<bool> peer_view_reaches(const DeviceId& peer,
                                       DeviceIdType type) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("peer_view_reaches"));
  MESHDMA_ASSIGN_OR_RETURN(int target,
                           d->ResolveTarget(peer, type, "peer_view_reaches"));
  return target == d->global_index() || d->FlaggedReaches(target);
}

absl::StatusOr<ArrayRef> peer_view(const ArrayRef& symmetric,
                                   const DeviceId& peer, DeviceIdType type) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("peer_view"));
  MESHDMA_ASSIGN_OR_RETURN(int target,
                           d->ResolveTarget(peer, type, "peer_view"));
  MESHDMA_ASSIGN_OR_RETURN(std::byte * data,
                           d->PeerAddress(symmetric, target, "peer_view"));
  return ArrayRef::FromPointer(data, symmetric.dtype(), symmetric.shape(),
                               symmetric.strides());
}

}  // namespace meshdma
