// A channel: persistent state for one group of devices, for the rest of the
// current `Runtime::Run`, that lets consecutive small calls of any collective
// over that group move their data in one exchange with no entry barrier.
// It is written with the DMA layer's own verbs: persistent symmetric slots
// (`AllocatePersistent`), DMA semaphores that count the bytes arriving in a
// slot set, and REGULAR credit semaphores through which a receiver hands a
// slot back to its sender; on one host, flagged copies and counters stored
// through peer views (see "Protocols" below).
//
// Layout on every member, allocated by the group's first small call of the
// Run in the same order everywhere: for each of `kSlotSets` slot sets, one
// row of `row_bytes()` per member position (row i is written only by member i)
// with a DMA semaphore `arrived[p][i]` counting its bytes; and for each of
// `Credits::kGroups` groups of `Credits::kBatch` consecutive slot sets, a
// REGULAR semaphore `credits[q]`.
//
// Call m of the channel uses slot set p = m % kSlotSets, in credit group
// q = (m / kBatch) % kGroups:
//   step 1: at the first call of group q, if this device pushed rows in q's
//           slot sets when it last used them (calls m - kSlotSets to
//           m - kSlotSets + kBatch - 1), wait on credits[q] for one
//           credit per row pushed then: every receiver has consumed them, so
//           the rows may be overwritten;
//   step 2: push each outgoing row, [header | payload] staged in private
//           memory, into row `rank` of the receiver's slot set p: one DMA per
//           receiver, counted on the receiver's arrived[p][rank];
//   step 3: wait on arrived[p][i] for the row of every member i this device
//           expects, then for its own pushes to have been read;
//   step 4: check every received header against this call's signature and
//           call number (a peer making another call is an error at once),
//           and let the caller read the rows;
//   step 5: owe one credit to each sender; at the last call of group q, give
//           each sender the credits owed to it (one remote signal on its
//           credits[q]), so a credit round costs a call 1 / kBatch of
//           a signal per peer. A channel of DMA rows (one that spans hosts)
//           defers them by one call instead: the next call's row to a sender
//           carries its credits in the row header's credit word, and the
//           receiver of the row signals its own credits[q]; only credits for
//           members that call sends no row to are signalled at its end. Between
//           hosts a signal is a message of its own; the row goes anyway.
//           The credits are still there two calls before step 1 needs them.
// Two credit groups suffice for flow control because step 1 makes a sender
// wait for the consumer of the rows it is about to overwrite. Counting each
// sender's row on its own semaphore matters when senders run ahead: a member
// that does not wait for this device (a partial permutation) may push its
// row for a later call while this device still waits for another sender's
// row of the current call, and the two byte counts must not mix. When the Run
// ends, each device first gives the credits it still owes, then waits for
// the credits still owed to it, so every semaphore is back to 0 before the
// persistent memory is released. Every Run, failed or not, ends by
// forgetting its channels (`AtRunEnd`): after a failed Run the runtime's
// recovery zeroes the semaphores, and the next Run's first call allocates a
// fresh channel.
//
// Protocols (channel_protocol.h). Steps 2-3 move rows by one of three
// `RowProtocol`s and steps 1 and 5 follow one of two `FlowControl`s:
//   - a group that spans hosts, or a run in checked mode (whose clocks
//     travel with DMAs), or MESHDMA_CHANNEL_PROTOCOL=dma: `DmaRows` as
//     above, with `Credits` (channel_dma.h);
//   - a group whose members all reach each other by stores (threads of a
//     process, processes of one host): a channel of stores, with no DMA
//     record, no byte-counting semaphore and no send completion:
//     `FlaggedRows` for calls whose rows are all at most
//     kFlaggedMaxPayloadBytes (one cache line each, NCCL's LL),
//     `StoredRows` for longer ones, and `ConsumedCounters` in place of
//     credits (channel_stores.h).
// Every member of a matching call decides the same way.
#ifndef MESHDMA_COLLECTIVES_INTERNAL_CHANNEL_H_
#define MESHDMA_COLLECTIVES_INTERNAL_CHANNEL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshdma/collectives/internal/channel_protocol.h"
#include "meshdma/collectives/internal/common.h"
#include "meshdma/collectives/internal/path_rules.h"
#include "meshdma/dma/array_ref.h"

namespace meshdma::collectives_internal {

struct FlaggedSlots;  // channel_stores.h

class Channel {
 public:
  static constexpr int kSlotSets = ChannelRows::kSlotSets;
  static constexpr int64_t kHeaderBytes = ChannelRows::kHeaderBytes;
  static constexpr int64_t kFlaggedMaxPayloadBytes =
      ChannelRows::kFlaggedMaxPayloadBytes;
  // Callers keep per-member lists on the stack.
  static constexpr int kMaxMembers = kChannelMaxMembers;

  // The longest payload a row of group `g`'s channel carries
  // (`ChannelPayloadBytes`, path_rules.h). Which calls take the channel is
  // the planner's choice (plan.h).
  static int64_t MaxPayloadBytes(const Group& g);

  using Outgoing = ChannelOutgoing;
  using Incoming = ChannelIncoming;

  // The calling device's channel for group `g` (created on first use in this
  // Run; every member must reach it in the same order).
  static absl::StatusOr<Channel*> For(const Group& g);

  // Bytes from one member's row to the next: kHeaderBytes, then
  // MaxPayloadBytes of the group.
  int64_t row_bytes() const { return rows_.row_bytes; }
  // The payload that the member at `position` sent, in the `rows` that
  // `consume` gets.
  const std::byte* Payload(const std::byte* rows, int position) const {
    return rows + position * rows_.row_bytes + kHeaderBytes;
  }
  // Whether this channel moves rows by stores (FlaggedRows, StoredRows)
  // rather than DMAs.
  bool by_stores() const { return flagged_rows_ != nullptr; }

  // Steps 1-5 for one call. `consume(rows)` runs between steps 4 and 5;
  // `Payload(rows, position)` is what that member sent (valid only during
  // `consume`). `input`, when not null, is the caller's buffer that the
  // call reads: the payloads of `out` lie in it, and `consume` may read it
  // too. Checked mode sees all of it read when the call starts (before step
  // 1's wait), so a peer's write to it that the call has not yet been told
  // of is reported; and `output`, when not null, written when `consume`
  // runs (the buffer it fills).
  absl::Status Exchange(absl::string_view collective, const Group& g,
                        int64_t signature, const ArrayRef* input,
                        const ArrayRef* output, std::span<const Outgoing> out,
                        std::span<const Incoming> in,
                        absl::FunctionRef<void(const std::byte* rows)> consume);

  // `Exchange` with every peer: member j gets `part(j)` ({first byte, byte
  // count}, in `input` where that is not null) and sends this device
  // `incoming_bytes`.
  template <typename Part>
  absl::Status ExchangeWithAll(
      absl::string_view collective, const Group& g, int64_t signature,
      const ArrayRef* input, const ArrayRef* output, Part part,
      int64_t incoming_bytes,
      absl::FunctionRef<void(const std::byte* rows)> consume) {
    Outgoing out[kMaxMembers];
    Incoming in[kMaxMembers];
    int k = 0;
    for (int j = 0; j < g.size(); ++j) {
      if (j == g.index) continue;
      const auto [data, bytes] = part(j);
      out[k] = {j, data, bytes};
      in[k] = {j, incoming_bytes};
      ++k;
    }
    return Exchange(collective, g, signature, input, output, {out, size_t(k)},
                    {in, size_t(k)}, consume);
  }

  // At the end of a successful Run: give what this device owes, then wait
  // until every row it pushed has been consumed.
  absl::Status GiveOwed() { return flow_->GiveOwed(); }
  absl::Status WaitRowsConsumed() { return flow_->WaitRowsConsumed(); }

  ~Channel();

 private:
  Channel();
  // Allocates the slots and staging of `rows_` for `g`.
  absl::Status AllocateRows(const Group& g);
  // Chooses and makes the protocols (the same on every member).
  absl::Status MakeProtocols(const Group& g);
  // The protocol that moves a call's rows.
  RowProtocol& RowsFor(std::span<const Outgoing> out,
                       std::span<const Incoming> in);
  // Step 4: every sender of `in` made this call (`signature`, `call`).
  absl::Status CheckHeaders(absl::string_view collective, const Group& g,
                            int64_t signature, int64_t call,
                            const std::byte* rows,
                            std::span<const Incoming> in) const;

  const Mesh* mesh_ = nullptr;
  NotedGroup* noted_ = nullptr;  // The group's call notes.
  ChannelRows rows_;
  int64_t calls_ = 0;
  std::unique_ptr<FlowControl> flow_;
  std::unique_ptr<RowProtocol> dma_rows_;      // A channel of DMA rows.
  std::unique_ptr<RowProtocol> flagged_rows_;  // A channel of stores.
  std::unique_ptr<RowProtocol> stored_rows_;   // A channel of stores.
  std::unique_ptr<FlaggedSlots> flagged_slots_;
};

// What a call that splits its input computes on its first call, kept with
// its plan (plan_cache.h) so that a repeat divides nothing: where member j's
// part of the input begins, in bytes (`part_begin[j]`, j = 0..n,
// `part_begin[n]` the input's size), and the bytes the heap is padded to
// past the output (`PadToLargestOutput`).
struct CallLayout {
  absl::InlinedVector<int64_t, 9> part_begin;
  int64_t largest_output_bytes = 0;

  // {first byte, byte count} of member j's part of `input`.
  std::pair<const std::byte*, int64_t> Part(const std::byte* input,
                                            int j) const {
    return {input + part_begin[j], part_begin[j + 1] - part_begin[j]};
  }
  // The layout of `bytes_per_index` bytes per index of a split axis of
  // `size` indices cut into n parts at PartBegin.
  static CallLayout Split(int64_t size, int n, int64_t bytes_per_index,
                          int64_t largest_output_bytes);
};

// The second stage of a call that runs over two channels (an all-reduce of
// a group spread over hosts: its host's channel, then its lane's): the group
// it reaches and that group's channel.
struct ChannelStage {
  Group group;
  Channel* channel = nullptr;
};

}  // namespace meshdma::collectives_internal

#endif  // MESHDMA_COLLECTIVES_INTERNAL_CHANNEL_H_
