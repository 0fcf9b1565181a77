// What the fused kernels share to read their ring's blocks in place
// (`FusedTransfer::kPeerRead`, overlap.h): the choice of the transfer, and a
// board on which every member publishes where its inputs lie.
#ifndef MESHDMA_COLLECTIVES_FUSED_PEER_READ_H_
#define MESHDMA_COLLECTIVES_FUSED_PEER_READ_H_

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshdma/collectives/fused/overlap.h"
#include "meshdma/collectives/internal/common.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/dma/semaphore.h"

namespace meshdma::fused_internal {

// What a kernel reads in place: its members' inputs, wherever the caller
// keeps them (readable where every member is a thread of this process), or
// symmetric buffers the kernel allocates (readable where every member's heap
// is mapped here: the same host).
enum class PeerMemory { kInputs, kSymmetric };

// True when `kernel` reads its peers' `memory` in place on `ring`: the
// transfer `option` resolves to (ResolveFusedTransfer) is kPeerRead, or
// kAuto where every member is readable (never in checked mode). An explicit
// kPeerRead where some member is not readable is FailedPrecondition naming
// the kernel and the member. The same answer on every member.
absl::StatusOr<bool> ReadsInPlace(absl::string_view kernel,
                                  const collectives_internal::Group& ring,
                                  std::optional<FusedTransfer> option,
                                  PeerMemory memory);

// The inputs of every member of a ring where they lie, for a kernel whose
// members are threads of one process (`PeerMemory::kInputs`). Made inside a
// kernel run without an entry barrier: `Publish` allocates a board (one
// symmetric line) and a REGULAR `done` semaphore, stores the addresses of
// `inputs` into the board, and runs the device barrier that publishes them
// (it also serves as the kernel's entry barrier: every member's inputs are
// written before any peer reads them). `Release` is the last step of the
// kernel: it signals `done` on every peer (this device has finished reading
// their inputs) and waits for the n - 1 signals of the peers, so that the
// caller may overwrite its inputs when the kernel returns.
class InputBoard {
 public:
  // InvalidArgument, naming `kernel` and the member, when a member's input
  // differs in size from this device's.
  static absl::StatusOr<InputBoard> Publish(
      absl::string_view kernel, const collectives_internal::Group& ring,
      std::span<const ArrayRef> inputs);

  // Input `i` of the member at ring position `position`.
  const std::byte* Input(int position, int i) const {
    return addresses_[position * num_inputs_ + i];
  }
  absl::Status Release(const collectives_internal::Group& ring) const;

 private:
  int num_inputs_ = 0;
  std::vector<const std::byte*> addresses_;  // [position][input]
  Semaphore done_;
};

// The block a step reads from a peer, as the mode wants it (overlap.h): in
// kOverlapped the peer's memory itself; in kSequential and
// kCommunicationOnly a private copy, pulled from the peer, of the bytes the
// compute would read in place.
class PulledBlock {
 public:
  // Blocks have the shape and dtype of `like` (contiguous).
  PulledBlock(OverlapMode mode, const ArrayRef& like);
  // The block whose owner keeps it at `peer_data`.
  absl::StatusOr<ArrayRef> From(const std::byte* peer_data);

 private:
  const ArrayRef like_;
  std::vector<std::byte> copy_;  // Empty in kOverlapped.
};

}  // namespace meshdma::fused_internal

#endif  // MESHDMA_COLLECTIVES_FUSED_PEER_READ_H_
