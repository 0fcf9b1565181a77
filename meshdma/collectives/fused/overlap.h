// What the compute-communication overlap kernels in collectives/fused/ share:
// the execution mode used to measure overlap. (Their ring is the caller's
// collective group, a `RingPosition` (topology/mesh.h).)
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
#ifndef MESHDMA_COLLECTIVES_FUSED_OVERLAP_H_
#define MESHDMA_COLLECTIVES_FUSED_OVERLAP_H_

#include "absl/status/status.h"
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

inline bool Computes(OverlapMode mode) {
  return mode != OverlapMode::kCommunicationOnly;
}
inline bool Communicates(OverlapMode mode) {
  return mode != OverlapMode::kComputeOnly;
}

}  // namespace meshdma

#endif  // MESHDMA_COLLECTIVES_FUSED_OVERLAP_H_
