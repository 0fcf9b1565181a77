// The protocols of a channel (channel.h), as types over two interfaces that
// the channel calls in its steps: a `RowProtocol` moves one call's rows
// (steps 2-3) and a `FlowControl` says when a sender may overwrite a row
// (steps 1 and 5, and the drain at the end of a Run). The protocols sit
// below the channel: they include nothing of channel.h, and only channel.cc
// includes them.
//
//   rows                      flow control       where
//   DmaRows                   Credits            a group that spans hosts,
//                                                checked mode, or
//                                                MESHDMA_CHANNEL_PROTOCOL=dma
//   FlaggedRows (<= 32 B)     ConsumedCounters   every member reaches every
//   StoredRows  (longer)                         other by stores
//
// A channel of stores picks FlaggedRows or StoredRows per call, from the
// call's longest row; every member of a matching call picks alike.
#ifndef MESHDMA_COLLECTIVES_INTERNAL_CHANNEL_PROTOCOL_H_
#define MESHDMA_COLLECTIVES_INTERNAL_CHANNEL_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshdma/collectives/internal/common.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/dma/flagged_copy.h"

namespace meshdma::collectives_internal {

// The rows of a channel on this device, shared by its protocols: made once
// by `Channel::For`, the same layout on every member.
struct ChannelRows {
  static constexpr int kSlotSets = 4;
  // Each row: the header, then up to the group's payload bytes.
  static constexpr int64_t kHeaderBytes = 64;
  // The header's end: the signature and call number. Flagged rows carry
  // exactly this head, so that their tails never overlap a polled word.
  static constexpr int64_t kFlaggedHeaderBytes = 16;
  // Flagged rows carry calls whose rows are all at most this long, so that
  // a row with its header is one cache line (flagged_copy.h, contract 5).
  static constexpr int64_t kFlaggedMaxPayloadBytes = 32;
  static constexpr int64_t kFlaggedRowBytes =
      (8 * FlaggedWords(kFlaggedHeaderBytes) + kFlaggedMaxPayloadBytes + 63) /
      64 * 64;
  static_assert(kFlaggedRowBytes == 64);
  // A DMA row moves only the end of the header: the credit word, then the
  // signature and call number.
  static constexpr int64_t kDmaHeaderBytes = 8 + kFlaggedHeaderBytes;
  static constexpr int64_t kDmaRowOffset = kHeaderBytes - kDmaHeaderBytes;

  absl::InlinedVector<int, 16> members;  // LOGICAL ids, by position.
  int index = 0;                         // This device's position.
  int64_t row_bytes = 0;                 // kHeaderBytes + payload.
  ArrayRef slots;                        // u8[kSlotSets, n, row_bytes].
  ArrayRef flat_slots[kSlotSets];        // Each slot set as 1-D bytes.
  std::vector<std::byte> staging;        // Outgoing rows, [n, row_bytes].
  ArrayRef staging_view;                 // `staging` as 1-D bytes.

  int size() const { return static_cast<int>(members.size()); }
  // The header [signature | call] of the member at `position` in `rows`.
  const std::byte* Header(const std::byte* rows, int position) const {
    return rows + position * row_bytes + kHeaderBytes - kFlaggedHeaderBytes;
  }
  // The staged header of the row to the member at `position`.
  std::byte* StagedHeader(int position) {
    return staging.data() + position * row_bytes + kHeaderBytes -
           kFlaggedHeaderBytes;
  }
};

// What this device pushes to the member at `position`.
struct ChannelOutgoing {
  int position;
  const std::byte* payload;
  int64_t bytes;
};
// What this device expects from the member at `position`.
struct ChannelIncoming {
  int position;
  int64_t bytes;
};

// One call's rows: its number, slot set and flag (nonzero, different
// between consecutive uses of a slot set), what goes out and comes in.
struct RowCall {
  int64_t call;
  int set;
  uint32_t flag;
  std::span<const ChannelOutgoing> out;
  std::span<const ChannelIncoming> in;
};

// Steps 2-3 of a call: push each outgoing row (its header already staged
// at `ChannelRows::StagedHeader`) into row `index` of the receiver's slot
// set, and wait for every incoming row. Returns the rows, where member i's
// header is at `ChannelRows::Header(rows, i)` and its payload
// `kHeaderBytes` past its row's start; valid until the next call.
class RowProtocol {
 public:
  virtual ~RowProtocol() = default;
  virtual absl::StatusOr<const std::byte*> Move(const RowCall& call) = 0;
};

// When a sender may overwrite a row of a receiver's slot set.
class FlowControl {
 public:
  virtual ~FlowControl() = default;
  // Step 1: the receivers of `out` have consumed the rows this call
  // overwrites.
  virtual absl::Status BeforePush(int64_t call,
                                  std::span<const ChannelOutgoing> out) = 0;
  // After step 4, before the caller reads the rows: what flow control the
  // rows of `in` carried (a DMA row's credit word). Errors name
  // `collective` and `g`.
  virtual absl::Status TakeCarried(absl::string_view collective, const Group& g,
                                   const std::byte* rows,
                                   std::span<const ChannelIncoming> in) = 0;
  // Step 5: this device has consumed the rows of `in` of `call`.
  virtual absl::Status AfterConsume(int64_t call,
                                    std::span<const ChannelIncoming> in) = 0;
  // At the end of a successful Run: give what this device owes ...
  virtual absl::Status GiveOwed() = 0;
  // ... then wait until every row it pushed has been consumed.
  virtual absl::Status WaitRowsConsumed() = 0;
};

}  // namespace meshdma::collectives_internal

#endif  // MESHDMA_COLLECTIVES_INTERNAL_CHANNEL_PROTOCOL_H_
