// What the fused kernels share to read their ring's blocks in place
// (`FusedTransfer::kPeerRead`, overlap.h): the choice of the transfer, and a
// board on which every member publishes where its inputs lie.
#ifndef MESHDMA_COLLECTIVES_FUSED_PEER_READ_H_
#define MESHDMA_COLLECTIVES_FUSED_PEER_READ_H_

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshdma/collectives/fused/overlap.h"
#include "meshdma/collectives/internal/common.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/dma/semaphore.h"

namespace meshdma::fused_internal {

// What a kernel reads in place: its members' inputs, wherever the caller
// keeps them (readable where every member is a thread of this process, or,
// on one host, where every member's inputs lie in its symmetric heap), or
// symmetric buffers the kernel allocates (readable where every member's heap
// is mapped here: the same host).
enum class PeerMemory { kInputs, kSymmetric };

// True when `kernel` may read its peers' `memory` in place on `ring`: the
// transfer `option` resolves to (ResolveFusedTransfer) is kPeerRead, or
// kAuto, and every member's heap is mapped here (never in checked mode). For
// kInputs that is not yet the answer: only the board knows whether every
// member's inputs are readable (ReadInputsInPlaceOrPush). An explicit
// kPeerRead where some member is not reachable is FailedPrecondition naming
// the kernel and the member. The same answer on every member.
absl::StatusOr<bool> ReadsInPlace(absl::string_view kernel,
                                  const collectives_internal::Group& ring,
                                  std::optional<FusedTransfer> option,
                                  PeerMemory memory);

// The inputs of every member of a ring where they lie, for a kernel whose
// members' heaps are mapped here. Made inside a kernel run without an entry
// barrier: `Publish` allocates a board (one symmetric line) and a REGULAR
// `done` semaphore, stores where `inputs` lie into the board (address, byte
// count, heap offset), and runs the device barrier that publishes them (it
// also serves as the kernel's entry barrier: every member's inputs are
// written before any peer reads them). `readable()` is the same on every
// member: every member is a thread of this process, or every input of every
// member lies in its symmetric heap (read through the owner's mapping).
// `Release` is the last step of a kernel that read in place: it signals
// `done` on every peer (this device has finished reading their inputs) and
// waits for the n - 1 signals of the peers, so that the caller may overwrite
// its inputs when the kernel returns.
class InputBoard {
 public:
  // InvalidArgument, naming `kernel` and the member, when a member's input
  // differs in size from this device's.
  static absl::StatusOr<InputBoard> Publish(
      absl::string_view kernel, const collectives_internal::Group& ring,
      std::span<const ArrayRef> inputs);

  bool readable() const { return private_owner_ < 0; }
  // Where !readable(): the first member (ring position) with an input kept
  // outside its symmetric heap, and that input.
  int private_owner() const { return private_owner_; }
  int private_input() const { return private_input_; }
  // Input `i` of the member at ring position `position` (readable() only).
  const std::byte* Input(int position, int i) const {
    return addresses_[position * num_inputs_ + i];
  }
  absl::Status Release(const collectives_internal::Group& ring) const;

 private:
  int num_inputs_ = 0;
  std::vector<const std::byte*> addresses_;  // [position][input]
  int private_owner_ = -1, private_input_ = -1;
  Semaphore done_;
};

// The kernel run (RunKernel) of a fused kernel that reads its peers'
// `inputs` in place where it can. Where `may_read` (ReadsInPlace with
// kInputs, the same on every member) the kernel runs without entry barrier
// and publishes the board, whose barrier serves as one; where the board is
// readable, it runs `in_place(board)` then `board.Release`; else, after one
// more barrier (no member leaves while a peer reads its board), `push()`,
// the DMA ring, or FailedPrecondition naming the member whose input is
// private when the transfer asked for is kPeerRead. Where !may_read, it runs
// `push()` after the entry barrier.
absl::Status ReadInputsInPlaceOrPush(
    absl::string_view kernel, const collectives_internal::Group& ring,
    std::optional<FusedTransfer> option, bool may_read,
    std::span<const ArrayRef> inputs,
    absl::FunctionRef<absl::Status(const InputBoard&)> in_place,
    absl::FunctionRef<absl::Status()> push);

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
