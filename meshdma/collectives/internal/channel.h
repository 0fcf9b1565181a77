// A channel: persistent state for one group of devices, for the rest of the
// current `Runtime::Run`, that lets consecutive small calls of any collective
// over that group move their data in one exchange with no entry barrier.
// It is written with the DMA layer's own verbs: persistent symmetric slots
// (`AllocatePersistent`), DMA semaphores that count the bytes arriving in a
// slot set, and REGULAR credit semaphores through which a receiver hands a
// slot back to its sender; on one host, flagged copies and counters stored
// through peer views (see "Protocols" and "Flow control" below).
//
// Layout on every member, allocated by the group's first small call of the
// Run in the same order everywhere: for each of `kSlotSets` slot sets, one
// row of `row_bytes()` per member position (row i is written only by member i)
// with a DMA semaphore `arrived[p][i]` counting its bytes; and for each of
// `kCreditGroups` groups of `kCreditBatch` consecutive slot sets, a REGULAR
// semaphore `credits[q]`.
//
// Call m of the channel uses slot set p = m % kSlotSets, in credit group
// q = (m / kCreditBatch) % kCreditGroups:
//   step 1: at the first call of group q, if this device pushed rows in q's
//           slot sets when it last used them (calls m - kSlotSets to
//           m - kSlotSets + kCreditBatch - 1), wait on credits[q] for one
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
//           credits[q]), so a credit round costs a call 1 / kCreditBatch of
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
// Protocols. When every member can store into every other member's memory
// (threads of a process, processes of one host; checked mode off), the
// channel is a channel of stores, and steps 2 and 3 use no DMA record, no
// byte-counting semaphore and no send completion:
//   - calls whose rows are all at most kFlaggedMaxPayloadBytes use flagged
//     copies (dma/flagged_copy.h, NCCL's LL) into the receiver's flagged
//     slot, one cache line: the header as 8-byte words of 4 bytes and the
//     call's flag, which the receiver polls, and the payload as their plain
//     tail, which the flagged stores publish;
//   - longer rows are stored at full density straight into the receiver's
//     slot row through a peer view (dma/peer_view.h), and then their header
//     as a flagged copy, which publishes them; the receiver reads them in
//     place.
// Otherwise (a group that spans hosts) rows travel as DMAs as above. Every
// member of a matching call decides the same way.
// MESHDMA_CHANNEL_PROTOCOL=dma forces DMAs.
//
// Flow control of a channel of stores. Such a channel replaces the credits
// of steps 1 and 5 by consumed counters (dma/peer_view.h, contract 5):
//   step 5': after `consume`, the device stores m + 1 into its counter on
//            each sender of call m (a release store through a peer view);
//   step 1': before pushing call m's row to a receiver, the device needs
//            the receiver to have consumed its previous row in slot set p.
//            It usually knows that already: a receiver's row of call k
//            tells that the receiver finished call k - 1. So where members
//            exchange with each other (all-reduce, all-gather, all-to-all)
//            no counter is read; otherwise (a ring shift) the device reads
//            its own counter, and waits on it (`counter_wait`) if it must.
// A counter line has one writer and is read rarely, so its stores stay in
// the writer's cache: no locked instruction, no line moving per call. At
// the end of the Run a device waits until every counter covers its last
// row to that member.
#ifndef MESHDMA_COLLECTIVES_INTERNAL_CHANNEL_H_
#define MESHDMA_COLLECTIVES_INTERNAL_CHANNEL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshdma/collectives/internal/common.h"
#include "meshdma/collectives/internal/path_rules.h"
#include "meshdma/collectives/options.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/flagged_copy.h"
#include "meshdma/dma/semaphore.h"

namespace meshdma::collectives_internal {

class Channel {
 public:
  static constexpr int kSlotSets = 4;
  // Credits go back once per kCreditBatch calls (see the steps above).
  static constexpr int kCreditBatch = 2;
  static constexpr int kCreditGroups = kSlotSets / kCreditBatch;
  // Each row: the header (signature, call number), then up to
  // `MaxPayloadBytes(g)` of payload (4 slot sets x n rows of symmetric
  // memory, touched only as far as rows are used).
  static constexpr int64_t kHeaderBytes = 64;
  // Flagged rows carry calls whose rows are all at most this long, so that
  // a row with its header is one cache line: the header in flagged words
  // (32 bytes), the payload as their plain tail (flagged_copy.h, contract
  // 5). Longer rows are stored: the payload into the receiver's slot, then
  // the header flagged, two lines or more (`MESHDMA_CHANNEL_PROTOCOL=auto|dma
  // mpirun -np 2 meshdma-bench --collective all_reduce -b 8 -e 4K -f 8`).
  static constexpr int64_t kFlaggedMaxPayloadBytes = 32;
  // A flagged row's head: the signature and call number. Every message
  // through the flagged rows has this head, so their tails never overlap a
  // word that is polled for a flag.
  static constexpr int64_t kFlaggedHeaderBytes = 16;
  // A DMA row moves only the end of the header: the credit word, then the
  // signature and call number (a message between hosts carries no padding).
  static constexpr int64_t kDmaHeaderBytes = 8 + kFlaggedHeaderBytes;
  static constexpr int64_t kDmaRowOffset = kHeaderBytes - kDmaHeaderBytes;
  // Whole cache lines, so that a short row is one line to move.
  static constexpr int64_t kFlaggedRowBytes =
      (8 * FlaggedWords(kFlaggedHeaderBytes) + kFlaggedMaxPayloadBytes + 63) /
      64 * 64;
  static_assert(kFlaggedRowBytes == 64);
  // One consumed counter per cache line: each line has one writer.
  static constexpr int64_t kCounterStrideBytes = 64;
  // Callers keep per-member lists on the stack.
  static constexpr int kMaxMembers = kChannelMaxMembers;

  // The longest payload a row of group `g`'s channel carries
  // (`ChannelPayloadBytes`, path_rules.h). Which calls take the channel is
  // the planner's choice (plan.h).
  static int64_t MaxPayloadBytes(const Group& g);

  // What this device pushes to the member at `position`.
  struct Outgoing {
    int position;
    const std::byte* payload;
    int64_t bytes;
  };
  // What this device expects from the member at `position`.
  struct Incoming {
    int position;
    int64_t bytes;
  };

  // The calling device's channel for group `g` (created on first use in this
  // Run; every member must reach it in the same order).
  static absl::StatusOr<Channel*> For(const Group& g);

  // Bytes from one member's row to the next: kHeaderBytes, then
  // MaxPayloadBytes of the group.
  int64_t row_bytes() const { return row_bytes_; }
  // The payload that the member at `position` sent, in the `rows` that
  // `consume` gets.
  const std::byte* Payload(const std::byte* rows, int position) const {
    return rows + position * row_bytes_ + kHeaderBytes;
  }

  // Steps 1-5 for one call. `consume(rows)` runs between steps 4 and 5;
  // `Payload(rows, position)` is what that member sent (valid only during
  // `consume`).
  absl::Status Exchange(absl::string_view collective, const Group& g,
                        int64_t signature, std::span<const Outgoing> out,
                        std::span<const Incoming> in,
                        absl::FunctionRef<void(const std::byte* rows)> consume);

  // `Exchange` with every peer: member j gets `part(j)` ({first byte, byte
  // count}) and sends this device `incoming_bytes`.
  template <typename Part>
  absl::Status ExchangeWithAll(
      absl::string_view collective, const Group& g, int64_t signature,
      Part part, int64_t incoming_bytes,
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
    return Exchange(collective, g, signature, {out, size_t(k)}, {in, size_t(k)},
                    consume);
  }

 private:
  Channel() = default;
  // At the end of a successful Run: give the credits this device owes, then
  // wait for those owed to it.
  absl::Status GiveOwedCredits();
  // Gives the credits owed for group `q` by remote signals.
  absl::Status GiveOwedCredits(int q);
  // At the end of a successful Run: wait until every row this device pushed
  // has been consumed (credits, or the consumed counters).
  absl::Status WaitRowsConsumed();
  // Step 1 of a channel of stores: the member at `position` has consumed
  // this device's rows of calls before `call`.
  absl::Status WaitConsumed(int position, int64_t call);
  // Steps 2-3 with DMAs, or with flagged copies; both leave member i's row
  // header at rows + i * row_bytes() + kHeaderBytes - 16 and payload at
  // + kHeaderBytes, and return `rows`.
  absl::StatusOr<const std::byte*> MoveRowsByDma(const Group& g, int p,
                                                 std::span<const Outgoing> out,
                                                 std::span<const Incoming> in);
  // Steps 2-3 in a channel of stores, for rows longer than flagged rows
  // take: payloads stored straight into the receivers' slot rows through
  // peer views, then the headers as flagged copies; a receiver reads the
  // payloads in place.
  absl::StatusOr<const std::byte*> MoveRowsStored(const Group& g, int p,
                                                  uint32_t flag,
                                                  std::span<const Outgoing> out,
                                                  std::span<const Incoming> in);
  absl::StatusOr<const std::byte*> MoveRowsFlagged(
      const Group& g, int p, uint32_t flag, std::span<const Outgoing> out,
      std::span<const Incoming> in);
  // Stages the header [signature | call] for the member at `position`, at
  // kHeaderBytes - 16 into its staging row. A `dma_row` (moved from staging)
  // also gets the payload after the header and, in word 0 of the staging
  // row, the deferred credits owed to that member; flagged and stored rows
  // send their payload from the caller's memory.
  std::byte* StageRow(const Outgoing& o, int64_t signature, int64_t call,
                      bool dma_row);

  absl::InlinedVector<int, 16> members_;  // The group's LOGICAL ids.
  const Mesh* mesh_ = nullptr;
  int64_t row_bytes_ = 0;
  ArrayRef slots_;                  // u8[kSlotSets, n, row_bytes_].
  SemaphoreArray arrived_;          // DMA, [kSlotSets * n]: per set and sender.
  Semaphore sent_;                  // DMA: this device's pushes being read.
  SemaphoreArray credits_;          // REGULAR, one per credit group.
  ArrayRef flat_slots_[kSlotSets];  // Each slot set as 1-D bytes.
  std::vector<std::byte> staging_;  // Outgoing rows, [n, row_bytes_].
  ArrayRef staging_view_;           // `staging_` as 1-D bytes.
  // A channel of DMA rows keeps the descriptors of its steps 2-3, made when
  // a slot set and member are first used and again when the call's row
  // length there changes: a repeated call (a decode loop) starts and waits
  // on the same descriptors instead of slicing views and making new ones
  // for every row (`MPIRUN_ARGS="-x MESHDMA_FORCE_INTERHOST=1"
  // bench/instructions_per_call.sh build/bench/meshdma-bench OP 8 2000`
  // counts the instructions).
  struct RowDescriptor {
    int64_t bytes = -1;
    std::optional<AsyncCopyDescriptor> copy;
  };
  // Per slot set p and member position: my push of a row to that member,
  // and the wait for that member's row; per set, the wait for my pushes.
  std::vector<RowDescriptor> push_[kSlotSets];
  std::vector<RowDescriptor> arrival_[kSlotSets];
  RowDescriptor pushes_read_[kSlotSets];
  bool flagged_ = false;  // Protocol (see the header).
  // Flagged set p is u8[n * kFlaggedRowBytes]; row i is written by member
  // i only. Made once (a call must not slice views): row i of mine, which
  // member i writes, and row `index` of member i's, which I write (empty
  // for my own position).
  std::vector<std::optional<FlaggedBuffer>> flagged_in_[kSlotSets];
  std::vector<std::optional<FlaggedBuffer>> flagged_out_[kSlotSets];
  std::vector<std::byte> received_;  // Unpacked flagged rows, [n, row_bytes_].
  int64_t calls_ = 0;
  // Rows pushed in each credit group's slot sets at its last use.
  int pushed_[kCreditGroups] = {};
  // Credits owed to the member at each position, per credit group.
  std::vector<int> owed_[kCreditGroups];
  // A channel of DMA rows defers the credits of a finished group by one
  // call: its rows carry them (step 5); -1 when none are deferred.
  int deferred_ = -1;
  // Flow control of a channel of stores (flagged_), in place of credits:
  // u8[n * kCounterStrideBytes]; the word at position i counts the calls
  // whose rows from this device member i has consumed (it stores it).
  ArrayRef consumed_;
  std::vector<ArrayRef> consumed_words_;     // Word i of `consumed_`.
  std::vector<uint64_t*> consumed_on_peer_;  // My word on member i.
  std::vector<std::byte*> slots_on_peer_;    // Member i's `slots_`.
  // Member i has consumed my rows of calls < known_consumed_[i].
  std::vector<int64_t> known_consumed_;
  // The call of my last row to member i in slot set p; -1 for none.
  std::vector<int64_t> last_row_[kSlotSets];
};

// What a call that splits its input computed on its first call, kept with it
// so that a repeat divides nothing: where member j's part of the input begins,
// in bytes (`part_begin[j]`, j = 0..n, `part_begin[n]` the input's size), and
// the bytes the heap is padded to past the output (`PadToLargestOutput`).
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

// A small call as the calling device resolved it: its group, that group's
// channel and the call's signature. Kept per device for the rest of the Run
// (forgotten with the channels), so that the same call again, the pattern of
// a decode loop, skips resolving its axes, validating its operands, choosing
// its algorithm and hashing its signature, which were about a third of an
// 8-byte psum on one host (`mpirun -np 2 meshdma-bench --collective OP -b 8
// -e 4K -f 8`).
//
// The key is everything those steps depend on: the collective and its `aux`
// (operation, tiling), the operands' element type and shapes, whether the
// input is symmetric, the output's address (the signature holds its heap
// offset), the axes, the options and (ppermute) the permutation. A call matches
// only when its input and output are contiguous and the output is symmetric, as
// the first call checked. What the call sends is still compared with its peers'
// calls.
struct ChannelCall {
  CollectiveKind kind;
  int aux;
  DType dtype;
  absl::InlinedVector<int64_t, 4> input_shape;
  absl::InlinedVector<int64_t, 4> output_shape;
  bool input_symmetric;
  const std::byte* output;
  std::vector<std::string> axes;
  CollectiveOptions options;
  std::vector<std::pair<int, int>> perm;  // ppermute's pairs; else empty.
  CallLayout layout;  // all_to_all and psum_scatter; else empty.
  // What it resolved to; `group.axes` views `axes`.
  Group group;
  Channel* channel;
  int64_t signature;
  // A call over two channels: `group` and `channel` are the first stage's,
  // this the second's (its `group.axes` views `axes` too).
  std::optional<ChannelStage> next;
};

// The calling device's remembered call matching the key, or null.
const ChannelCall* FindChannelCall(
    CollectiveKind kind, int aux, const ArrayRef& input, const ArrayRef& output,
    std::span<const std::string> axes, const CollectiveOptions& options,
    std::span<const std::pair<int, int>> perm = {});
// Remembers a call that succeeded, in place of the oldest of the few this
// device keeps.
void RememberChannelCall(CollectiveKind kind, int aux, const ArrayRef& input,
                         const ArrayRef& output, const Group& group,
                         Channel* channel, int64_t signature,
                         const CollectiveOptions& options,
                         std::span<const std::pair<int, int>> perm = {},
                         CallLayout layout = {},
                         std::optional<ChannelStage> next = std::nullopt);

}  // namespace meshdma::collectives_internal

#endif  // MESHDMA_COLLECTIVES_INTERNAL_CHANNEL_H_
