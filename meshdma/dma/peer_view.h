// Peer views: loads and stores into a peer's symmetric memory (what
// NVSHMEM's `nvshmem_ptr` and CUDA IPC handles give on one node).
//
// When a peer's heap is mapped into this process (a device of the same
// process, or of a process on the same host), a symmetric view has an
// address there too. A collective that reads its peers' inputs and writes
// their outputs through such views moves every byte once, with no staging
// slot and no copy worker: the single-copy all-reduce of
// `CollectiveAlgorithm::kDirect`.
//
// Contract:
//   1. `peer_view` needs a peer the calling device can address
//      (`peer_view_reaches`); elsewhere (another host) it is
//      FailedPrecondition, and callers keep a DMA path.
//   2. Loads and stores through a peer view are not DMAs: they signal no
//      semaphore, are not counted by a kernel's exit contract, and are
//      neither traced nor race-checked. Order them with semaphores: a
//      `semaphore_signal` after the stores publishes them to the device that
//      waits for it (the signal is a release, the wait an acquire).
//   3. Checked mode cannot see them, so `peer_view_reaches` is false while
//      checked mode is on: code with a DMA fallback stays checkable.
//   4. The view is valid until the end of the `Runtime::Run` call that made
//      it, and only while the peer has not freed or reused the bytes, which
//      is the caller's protocol to ensure (an entry barrier, then a signal
//      from the peer when it is done).
//   5. A counter is an 8-byte word of symmetric memory that only grows:
//      peers advance it with release stores through a peer view
//      (`__atomic_store_n(p, v, __ATOMIC_RELEASE)`), its owner waits with
//      `counter_wait`. A store into a line nobody reads stays in the
//      writer's cache, so a counter read only now and then costs almost
//      nothing (the small-message channel's flow control).
//   6. A device of the caller's own process (devices as threads) shares its
//      whole address space: any memory the caller can address, not only its
//      symmetric heap, is at the same address for that peer
//      (`peer_shares_address_space`). A pointer stored into symmetric memory
//      then lets the peer read ordinary memory in place (the single-copy
//      reductions read a private input so). Contracts 2-4 apply to such
//      accesses too: order them with semaphores, and keep the memory alive
//      until the peer has said it is done.
#ifndef MESHDMA_DMA_PEER_VIEW_H_
#define MESHDMA_DMA_PEER_VIEW_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/dma/semaphore.h"

namespace meshdma {

// True when the calling device can make a `peer_view` of `peer`'s memory
// (contract 1 and 3). The calling device itself is always reachable.
absl::StatusOr<bool> peer_view_reaches(const DeviceId& peer,
                                       DeviceIdType type = DeviceIdType::kMesh);

// True when `peer` is the calling device or a device of its process, checked
// mode off (contract 6 and 3).
absl::StatusOr<bool> peer_shares_address_space(
    const DeviceId& peer, DeviceIdType type = DeviceIdType::kMesh);

// `symmetric` (a view of the calling device's symmetric heap) as `peer` holds
// it: the same heap offset, dtype, shape and strides, at `peer`'s address in
// this process. The result is a view of ordinary memory (not symmetric): it
// may be read and written, and used as the local side of a DMA, but not
// given to a collective or a remote copy as a symmetric operand.
absl::StatusOr<ArrayRef> peer_view(const ArrayRef& symmetric,
                                   const DeviceId& peer,
                                   DeviceIdType type = DeviceIdType::kMesh);

// Waits until `counter` (an 8-byte, 8-byte-aligned view of the calling
// device's symmetric memory) holds at least `value`, an acquire that pairs
// with the release store that wrote it (contract 5). The runtime's wait
// timeout and abort apply; InvalidArgument for any other view.
absl::Status counter_wait(const ArrayRef& counter, uint64_t value);

}  // namespace meshdma

#endif  // MESHDMA_DMA_PEER_VIEW_H_
