// What the compute-communication overlap kernels in collectives/fused/ share:
// the execution mode used to measure overlap, and who moves the blocks their
// ring passes on. (Their ring is the caller's collective group, a
// `RingPosition` (topology/mesh.h).)
//
// Every overlap kernel runs the same schedule in four modes so that a
// benchmark can report compute-only, communication-only and overlapped times
// of one and the same algorithm:
//   - kOverlapped: the DMA of the next block is started before the compute on
//     the current one and waited after it (the kernel's normal mode);
//   - kSequential: the same DMAs, each waited right after it starts, before
//     the compute (no overlap; the baseline overlap must beat);
//   - kComputeOnly: the same compute with the same shapes and masks on local
//     data, no DMA (results are NOT the kernel's result);
//   - kCommunicationOnly: the same DMAs and handshakes, no compute (results
//     are NOT the kernel's result).
//
// Who moves the bytes (`FusedTransfer`). A CPU has no copy engine: a DMA's
// bytes are copied by a thread, which takes a core from the compute it was
// meant to overlap wherever the devices keep every core busy. Where every
// member of the ring can load the others' memory, the consumer's compute
// can read a block where it lies instead: its loads are the communication,
// no byte is copied, and nothing competes with the compute for a core. In
// that transfer the modes keep their meaning with the peer's block in place
// of the DMA: kCommunicationOnly copies each block the compute would read
// from its owner into a private buffer (the bytes moved alone), kSequential
// copies it so and then computes on the copy, kOverlapped computes on the
// peer's memory, and kComputeOnly computes on local data of the same shape.
#ifndef MESHDMA_COLLECTIVES_FUSED_OVERLAP_H_
#define MESHDMA_COLLECTIVES_FUSED_OVERLAP_H_

#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace meshdma {

enum class OverlapMode {
  kOverlapped,
  kSequential,
  kComputeOnly,
  kCommunicationOnly,
};

inline absl::string_view OverlapModeName(OverlapMode mode) {
  switch (mode) {
    case OverlapMode::kOverlapped:
      return "overlapped";
    case OverlapMode::kSequential:
      return "sequential";
    case OverlapMode::kComputeOnly:
      return "compute-only";
    case OverlapMode::kCommunicationOnly:
      return "communication-only";
  }
  return "?";
}

// OK when `mode` is one of the enumerators (not an integer cast to the
// enum), else InvalidArgument naming `kernel` and the value. Every fused
// kernel checks its mode with it at entry.
inline absl::Status CheckOverlapMode(absl::string_view kernel,
                                     OverlapMode mode) {
  if (static_cast<int>(mode) >= 0 &&
      static_cast<int>(mode) <=
          static_cast<int>(OverlapMode::kCommunicationOnly)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "kernel '", kernel, "': options.mode (OverlapMode) ",
      static_cast<int>(mode),
      " is not one of overlapped (0), sequential (1), compute-only (2), "
      "communication-only (3)"));
}

// Who moves the blocks of a fused kernel's ring.
enum class FusedTransfer {
  // kPeerRead where every member of the ring can read the others' memory
  // (the kernel says which memory: its inputs need devices that are threads
  // of one process, its own symmetric buffers a peer on the same host),
  // checked mode off; else kDma. The same answer on every member.
  kAuto,
  // The owner of a block pushes it into its neighbour's slot with a remote
  // DMA (copy workers, or a waiting device, copy the bytes).
  kDma,
  // The consumer's compute reads the block in its owner's memory through a
  // peer view (dma/peer_view.h): no copy. FailedPrecondition, naming the
  // member, where a member's memory cannot be read.
  kPeerRead,
};

absl::string_view FusedTransferName(FusedTransfer transfer);

// The transfer a fused kernel runs: `option` when set (InvalidArgument naming
// `kernel` when it is not an enumerator), else MESHDMA_FUSED_TRANSFER, else
// kAuto.
absl::StatusOr<FusedTransfer> ResolveFusedTransfer(
    absl::string_view kernel, std::optional<FusedTransfer> option);

inline bool Computes(OverlapMode mode) {
  return mode != OverlapMode::kCommunicationOnly;
}
inline bool Communicates(OverlapMode mode) {
  return mode != OverlapMode::kComputeOnly;
}

}  // namespace meshdma

#endif  // MESHDMA_COLLECTIVES_FUSED_OVERLAP_H_
