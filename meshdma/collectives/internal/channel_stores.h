// A channel of stores (channel_protocol.h): every member reaches every other
// member's memory by stores (threads of a process, processes of one host;
// checked mode off), so rows move with no DMA record, no byte-counting
// semaphore, no send completion and no credit semaphore.
#ifndef MESHDMA_COLLECTIVES_INTERNAL_CHANNEL_STORES_H_
#define MESHDMA_COLLECTIVES_INTERNAL_CHANNEL_STORES_H_

#include <memory>
#include <optional>
#include <vector>

#include "meshdma/collectives/internal/channel_protocol.h"
#include "meshdma/dma/flagged_copy.h"

namespace meshdma::collectives_internal {

// The flagged slots of a channel of stores: per slot set, u8[n *
// kFlaggedRowBytes], row i written by member i only. Made once (a call must
// not slice views): row i of mine, which member i writes (`in`), and row
// `index` of member i's, which I write (`out`); empty at my own position.
struct FlaggedSlots {
  std::vector<std::optional<FlaggedBuffer>> in[ChannelRows::kSlotSets];
  std::vector<std::optional<FlaggedBuffer>> out[ChannelRows::kSlotSets];

  // Allocates them (persistent) for `rows`' group.
  static absl::StatusOr<std::unique_ptr<FlaggedSlots>> Create(
      const ChannelRows& rows);
};

// Flagged rows (NCCL's LL), for calls whose rows are all at most
// kFlaggedMaxPayloadBytes: each row is one cache line in the receiver's
// flagged slot, the header as 8-byte words that each hold 4 bytes and the
// call's flag, which the receiver polls, and the payload as their plain
// tail, which the flagged stores publish. The receiver unpacks the rows
// into a buffer of its own.
class FlaggedRows final : public RowProtocol {
 public:
  FlaggedRows(ChannelRows& rows, const FlaggedSlots& slots)
      : rows_(rows), slots_(slots), received_(rows.staging.size()) {}
  absl::StatusOr<const std::byte*> Move(const RowCall& call) override;

 private:
  ChannelRows& rows_;
  const FlaggedSlots& slots_;
  std::vector<std::byte> received_;  // Unpacked rows, [n, row_bytes].
};

// Stored rows, for longer rows: the payload stored at full density straight
// into the receiver's slot row through a peer view, then its header as a
// flagged copy, which publishes it; the receiver reads the payloads in
// place.
class StoredRows final : public RowProtocol {
 public:
  static absl::StatusOr<std::unique_ptr<StoredRows>> Create(
      ChannelRows& rows, const FlaggedSlots& slots);
  absl::StatusOr<const std::byte*> Move(const RowCall& call) override;

 private:
  StoredRows(ChannelRows& rows, const FlaggedSlots& slots)
      : rows_(rows), slots_(slots) {}
  ChannelRows& rows_;
  const FlaggedSlots& slots_;
  std::vector<std::byte*> slots_on_peer_;  // Member i's `rows.slots`.
};

// Consumed counters (dma/peer_view.h, contract 5), in place of credits:
//   step 5': after consuming call m, the device stores m + 1 into its
//            counter on each sender of call m (a release store through a
//            peer view);
//   step 1': before pushing call m's row to a receiver, the device needs
//            the receiver to have consumed its previous row in the slot
//            set. It usually knows that already: a receiver's row of call
//            k tells that the receiver finished call k - 1. So where
//            members exchange with each other (all-reduce, all-gather,
//            all-to-all) no counter is read; otherwise (a ring shift) the
//            device reads its own counter, and waits on it if it must.
// A counter line has one writer and is read rarely, so its stores stay in
// the writer's cache: no locked instruction, no line moving per call. At
// the end of the Run a device waits until every counter covers its last
// row to that member.
class ConsumedCounters final : public FlowControl {
 public:
  // One counter per cache line: each line has one writer.
  static constexpr int64_t kStrideBytes = 64;
  // Allocates the counters (persistent).
  static absl::StatusOr<std::unique_ptr<ConsumedCounters>> Create(
      const ChannelRows& rows);

  absl::Status BeforePush(int64_t call,
                          std::span<const ChannelOutgoing> out) override;
  absl::Status TakeCarried(absl::string_view, const Group&, const std::byte*,
                           std::span<const ChannelIncoming>) override {
    return absl::OkStatus();
  }
  absl::Status AfterConsume(int64_t call,
                            std::span<const ChannelIncoming> in) override;
  absl::Status GiveOwed() override { return absl::OkStatus(); }
  absl::Status WaitRowsConsumed() override;

 private:
  ConsumedCounters() = default;
  // The member at `position` has consumed my rows of calls before `call`.
  absl::Status WaitConsumed(int position, int64_t call);

  // u8[n * kStrideBytes]; the word at position i counts the calls whose
  // rows from this device member i has consumed (member i stores it).
  ArrayRef consumed_;
  std::vector<ArrayRef> consumed_words_;     // Word i of `consumed_`.
  std::vector<uint64_t*> consumed_on_peer_;  // My word on member i.
  // Member i has consumed my rows of calls < known_consumed_[i].
  std::vector<int64_t> known_consumed_;
  // The call of my last row to member i in each slot set; -1 for none.
  std::vector<int64_t> last_row_[ChannelRows::kSlotSets];
};

}  // namespace meshdma::collectives_internal

#endif  // MESHDMA_COLLECTIVES_INTERNAL_CHANNEL_STORES_H_
