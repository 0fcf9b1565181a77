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
    MESHDMA_ASSIGN_OR_RETURN(
        const bool readable,
        memory == PeerMemory::kInputs
            ? peer_shares_address_space(peer, DeviceIdType::kLogical)
            : peer_view_reaches(peer, DeviceIdType::kLogical));
    if (readable) continue;
    if (transfer == FusedTransfer::kAuto) return false;
    return absl::FailedPreconditionError(absl::StrCat(
        "kernel '", kernel, "' on ", ring.Describe(),
        ": transfer peer_read, but member ", ring.Peer(j), " (logical) ",
        memory == PeerMemory::kInputs
            ? "is not a device of this process, whose inputs it could read"
            : "is not on this host (or checked mode is on)",
        "; use FusedTransfer::kDma or kAuto"));
  }
  return true;
}

absl::StatusOr<InputBoard> InputBoard::Publish(
    absl::string_view kernel, const Group& ring,
    std::span<const ArrayRef> inputs) {
  InputBoard board;
  board.num_inputs_ = static_cast<int>(inputs.size());
  // Step 1: the board (whole lines, so that no other data shares them: an
  // address and a byte count per input) and `done`, allocated at the same
  // point on every member.
  const int64_t words = (2 * board.num_inputs_ + 7) / 8 * 8;
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef mine, AllocateSymmetric<int64_t>({words}));
  MESHDMA_ASSIGN_OR_RETURN(board.done_,
                           AllocateSemaphore(SemaphoreType::kRegular, "done"));
  // Step 2: my inputs; the barrier publishes them (and orders every
  // member's writes of its inputs before any peer's reads).
  int64_t* line = mine.data_as<int64_t>();
  for (int i = 0; i < board.num_inputs_; ++i) {
    line[2 * i] = reinterpret_cast<int64_t>(inputs[i].data());
    line[2 * i + 1] = inputs[i].size_bytes();
  }
  MESHDMA_RETURN_IF_ERROR(device_barrier());
  // Step 3: every member's inputs, read from its board. Each member sees
  // the same boards, and a member whose inputs differ differs from some
  // member, so a mismatch is found on every member alike.
  board.addresses_.resize(ring.size() * board.num_inputs_);
  absl::Status mismatch;
  for (int p = 0; p < ring.size() && mismatch.ok(); ++p) {
    ArrayRef theirs = mine;
    if (p != ring.index) {
      MESHDMA_ASSIGN_OR_RETURN(
          theirs,
          peer_view(mine, DeviceId(ring.members[p]), DeviceIdType::kLogical));
    }
    const int64_t* their_line = theirs.data_as<int64_t>();
    for (int i = 0; i < board.num_inputs_; ++i) {
      if (their_line[2 * i + 1] != inputs[i].size_bytes()) {
        mismatch = absl::InvalidArgumentError(absl::StrCat(
            "kernel '", kernel, "' on ", ring.Describe(), ": input ", i,
            " of member ", ring.members[p], " (logical) has ",
            their_line[2 * i + 1], " bytes where this device's ",
            inputs[i].ToString(), " has ", inputs[i].size_bytes(),
            ": every member passes the same shapes"));
        break;
      }
      board.addresses_[p * board.num_inputs_ + i] =
          reinterpret_cast<const std::byte*>(their_line[2 * i]);
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
