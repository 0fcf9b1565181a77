#include "meshdma/dma/peer_view.h"

#include "absl/strings/str_cat.h"
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

absl::StatusOr<bool> peer_shares_address_space(const DeviceId& peer,
                                               DeviceIdType type) {
  MESHDMA_ASSIGN_OR_RETURN(
      dma_internal::Device * d,
      dma_internal::RequireDevice("peer_shares_address_space"));
  MESHDMA_ASSIGN_OR_RETURN(
      int target, d->ResolveTarget(peer, type, "peer_shares_address_space"));
  return target == d->global_index() || d->SharesAddressSpace(target);
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

absl::Status counter_wait(const ArrayRef& counter, uint64_t value) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("counter_wait"));
  if (!counter.is_symmetric() || !counter.is_contiguous() ||
      counter.size_bytes() != sizeof(uint64_t) ||
      counter.heap_offset() % sizeof(uint64_t) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "counter_wait on ", d->Name(), ": counter ", counter.ToString(),
        " is not one 8-byte-aligned word of the symmetric heap"));
  }
  MESHDMA_ASSIGN_OR_RETURN(
      std::byte * mine,
      d->PeerAddress(counter, d->global_index(), "counter_wait"));
  return d->WaitCounter(reinterpret_cast<const uint64_t*>(mine), value,
                        counter);
}

}  // namespace meshdma
