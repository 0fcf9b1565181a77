#include "meshdma/collectives/fused/peer_read.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "meshdma/base/config.h"
#include "meshdma/base/env.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/peer_view.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma {

absl::string_view FusedTransferName(FusedTransfer transfer) {
  switch (transfer) {
    case FusedTransfer::kAuto:
      return "auto";
    case FusedTransfer::kDma:
      return "dma";
    case FusedTransfer::kPeerRead:
      return "peer_read";
  }
  return "?";
}

absl::StatusOr<FusedTransfer> ResolveFusedTransfer(
    absl::string_view kernel, std::optional<FusedTransfer> option) {
  if (option.has_value()) {
    const int value = static_cast<int>(*option);
    if (value < 0 || value > static_cast<int>(FusedTransfer::kPeerRead)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kernel '", kernel, "': options.transfer (FusedTransfer) ", value,
          " is not one of kAuto (0), kDma (1), kPeerRead (2)"));
    }
    return *option;
  }
  MESHDMA_ASSIGN_OR_RETURN(std::optional<std::string> env,
                           base_internal::EnvChoice(config::kFusedTransfer));
  if (!env.has_value() || *env == "auto") return FusedTransfer::kAuto;
  return *env == "dma" ? FusedTransfer::kDma : FusedTransfer::kPeerRead;
}

namespace fused_internal {

using collectives_internal::Group;

absl::StatusOr<bool> ReadsInPlace(absl::string_view kernel, const Group& ring,
                                  std::optional<FusedTransfer> option,
                                  PeerMemory memory) {
  MESHDMA_ASSIGN_OR_RETURN(const FusedTransfer transfer,
                           ResolveFusedTransfer(kernel, option));
  if (transfer == FusedTransfer::kDma) return false;
  for (int j = 1; j < ring.size(); ++j) {
    const DeviceId peer(ring.Peer(j));
    MESHDMA_ASSIGN_OR_RETURN(const bool readable,
                             peer_view_reaches(peer, DeviceIdType::kLogical));
    if (readable) continue;
    if (transfer == FusedTransfer::kAuto) return false;
    return absl::FailedPreconditionError(absl::StrCat(
        "kernel '", kernel, "' on ", ring.Describe(),
        ": transfer peer_read, but member ", ring.Peer(j), " (logical) ",
        memory == PeerMemory::kInputs
            ? "is not on this host (or checked mode is on), where its inputs "
              "could be read"
            : "is not on this host (or checked mode is on)",
        "; use FusedTransfer::kDma or kAuto"));
  }
  return true;
}

namespace {

// Words of a member's board per input: its address in the member's
// process, its byte count, and its heap offset (-1: not symmetric).
constexpr int kBoardWords = 3;

// True when every member of `ring` is a thread of this process.
absl::StatusOr<bool> OneProcess(const Group& ring) {
  for (int j = 1; j < ring.size(); ++j) {
    MESHDMA_ASSIGN_OR_RETURN(const bool shares,
                             peer_shares_address_space(DeviceId(ring.Peer(j)),
                                                       DeviceIdType::kLogical));
    if (!shares) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<InputBoard> InputBoard::Publish(
    absl::string_view kernel, const Group& ring,
    std::span<const ArrayRef> inputs) {
  InputBoard board;
  board.num_inputs_ = static_cast<int>(inputs.size());
  MESHDMA_ASSIGN_OR_RETURN(const bool one_process, OneProcess(ring));
  // Step 1: the board (whole lines, so that no other data shares them) and
  // `done`, allocated at the same point on every member.
  const int64_t words = (kBoardWords * board.num_inputs_ + 7) / 8 * 8;
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef mine, AllocateSymmetric<int64_t>({words}));
  MESHDMA_ASSIGN_OR_RETURN(board.done_,
                           AllocateSemaphore(SemaphoreType::kRegular, "done"));
  // Step 2: where my inputs lie; the barrier publishes them (and orders
  // every member's writes of its inputs before any peer's reads).
  int64_t* line = mine.data_as<int64_t>();
  for (int i = 0; i < board.num_inputs_; ++i) {
    line[kBoardWords * i] = reinterpret_cast<int64_t>(inputs[i].data());
    line[kBoardWords * i + 1] = inputs[i].size_bytes();
    line[kBoardWords * i + 2] =
        inputs[i].is_symmetric() && inputs[i].is_contiguous()
            ? inputs[i].heap_offset()
            : -1;
  }
  MESHDMA_RETURN_IF_ERROR(device_barrier());
  // Step 3: every member's inputs, read from its board: at their address
  // where every member is a thread of this process, else through the
  // owner's heap mapping. Each member sees the same boards, so a mismatch,
  // and a private input, are found on every member alike.
  board.addresses_.resize(ring.size() * board.num_inputs_);
  std::byte* my_heap_base = mine.data() - mine.heap_offset();
  absl::Status mismatch;
  for (int p = 0; p < ring.size() && mismatch.ok(); ++p) {
    const DeviceId owner(ring.members[p]);
    ArrayRef theirs = mine;
    if (p != ring.index) {
      MESHDMA_ASSIGN_OR_RETURN(theirs,
                               peer_view(mine, owner, DeviceIdType::kLogical));
    }
    const int64_t* their_line = theirs.data_as<int64_t>();
    for (int i = 0; i < board.num_inputs_; ++i) {
      const int64_t bytes = their_line[kBoardWords * i + 1];
      const int64_t offset = their_line[kBoardWords * i + 2];
      if (bytes != inputs[i].size_bytes()) {
        mismatch = absl::InvalidArgumentError(absl::StrCat(
            "kernel '", kernel, "' on ", ring.Describe(), ": input ", i,
            " of member ", ring.members[p], " (logical) has ", bytes,
            " bytes where this device's ", inputs[i].ToString(), " has ",
            inputs[i].size_bytes(), ": every member passes the same shapes"));
        break;
      }
      const std::byte*& address = board.addresses_[p * board.num_inputs_ + i];
      if (one_process) {
        address =
            reinterpret_cast<const std::byte*>(their_line[kBoardWords * i]);
      } else if (offset >= 0) {
        const int64_t shape[] = {bytes};
        MESHDMA_ASSIGN_OR_RETURN(
            const ArrayRef here,
            ArrayRef::Symmetric(my_heap_base + offset, offset, DType::kU8,
                                shape));
        MESHDMA_ASSIGN_OR_RETURN(
            const ArrayRef there,
            peer_view(here, owner, DeviceIdType::kLogical));
        address = there.data();
      } else if (board.private_owner_ < 0) {
        board.private_owner_ = p;
        board.private_input_ = i;
      }
    }
  }
  // Step 4: on a mismatch the members leave together, so that no member's
  // kernel scope (its board) ends while a peer still reads the board.
  if (!mismatch.ok()) {
    MESHDMA_RETURN_IF_ERROR(device_barrier());
    return mismatch;
  }
  return board;
}

absl::Status InputBoard::Release(const Group& ring) const {
  const int n = ring.size();
  if (n == 1) return absl::OkStatus();
  for (int j = 1; j < n; ++j) {
    MESHDMA_RETURN_IF_ERROR(
        semaphore_signal(done_, 1, ring.Peer(j), DeviceIdType::kLogical));
  }
  return semaphore_wait(done_, n - 1);
}

namespace {

// The body of ReadInputsInPlaceOrPush where the members may read in place.
absl::Status ReadBoardInPlaceOrPush(
    absl::string_view kernel, const Group& ring,
    std::optional<FusedTransfer> option, std::span<const ArrayRef> inputs,
    absl::FunctionRef<absl::Status(const InputBoard&)> in_place,
    absl::FunctionRef<absl::Status()> push) {
  // Step 1: where every member's inputs lie (the board's barrier is the
  // kernel's entry barrier).
  MESHDMA_ASSIGN_OR_RETURN(const InputBoard board,
                           InputBoard::Publish(kernel, ring, inputs));
  // Step 2: read them in place, then wait until the peers are done with
  // mine.
  if (board.readable()) {
    MESHDMA_RETURN_IF_ERROR(in_place(board));
    return board.Release(ring);
  }
  // Step 3: some input is private to its process: every member leaves the
  // board together, then pushes the blocks (or refuses, for kPeerRead).
  MESHDMA_RETURN_IF_ERROR(device_barrier());
  MESHDMA_ASSIGN_OR_RETURN(const FusedTransfer transfer,
                           ResolveFusedTransfer(kernel, option));
  if (transfer == FusedTransfer::kPeerRead) {
    return absl::FailedPreconditionError(absl::StrCat(
        "on ", ring.Describe(), ": transfer peer_read, but member ",
        ring.members[board.private_owner()], " (logical) keeps its input ",
        board.private_input(),
        " outside the symmetric heap, where devices of other processes "
        "cannot read it; allocate it symmetric, or use FusedTransfer::kDma "
        "or kAuto"));
  }
  return push();
}

}  // namespace

absl::Status ReadInputsInPlaceOrPush(
    absl::string_view kernel, const Group& ring,
    std::optional<FusedTransfer> option, bool may_read,
    std::span<const ArrayRef> inputs,
    absl::FunctionRef<absl::Status(const InputBoard&)> in_place,
    absl::FunctionRef<absl::Status()> push) {
  return RunKernel({.name = std::string(kernel),
                    .entry_barrier = !may_read,
                    .collective_id = std::nullopt},
                   [&] {
                     if (!may_read) return push();
                     return ReadBoardInPlaceOrPush(kernel, ring, option, inputs,
                                                   in_place, push);
                   });
}

PulledBlock::PulledBlock(OverlapMode mode, const ArrayRef& like) : like_(like) {
  if (mode == OverlapMode::kSequential ||
      mode == OverlapMode::kCommunicationOnly) {
    copy_.resize(like.size_bytes());
  }
}

absl::StatusOr<ArrayRef> PulledBlock::From(const std::byte* peer_data) {
  const std::byte* data = peer_data;
  if (!copy_.empty()) {
    std::memcpy(copy_.data(), peer_data, copy_.size());
    data = copy_.data();
  }
  return ArrayRef::FromPointer(const_cast<std::byte*>(data), like_.dtype(),
                               like_.shape());
}

}  // namespace fused_internal
}  // namespace meshdma
