// A channel's DMA rows and their credits (channel_protocol.h): the
// protocol of a group that spans hosts, of checked mode (whose clocks
// travel with DMAs) and of MESHDMA_CHANNEL_PROTOCOL=dma.
#ifndef MESHDMA_COLLECTIVES_INTERNAL_CHANNEL_DMA_H_
#define MESHDMA_COLLECTIVES_INTERNAL_CHANNEL_DMA_H_

#include <memory>
#include <optional>
#include <vector>

#include "meshdma/collectives/internal/channel_protocol.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/semaphore.h"

namespace meshdma::collectives_internal {

// Credits: a receiver hands a slot back to its sender by a REGULAR
// semaphore per credit group of kBatch consecutive slot sets.
//   step 1: at the first call of group q, if this device pushed rows in q's
//           slot sets when it last used them, wait on credits[q] for one
//           credit per row pushed then;
//   step 5: owe one credit to each sender; at the last call of group q,
//           defer the group's credits by one call: the next call's row to
//           a sender carries its credits in the row's credit word
//           (`TakeDeferred`), whose receiver signals its own credits[q]
//           (`TakeCarried`); credits for members that call sends no row to
//           are signalled at its end. A credit round costs a call 1 /
//           kBatch of a signal per peer, and between hosts a signal is a
//           message of its own while the row goes anyway.
// Two credit groups suffice: step 1 makes a sender wait for the consumer
// of the rows it is about to overwrite, and the credits are there two
// calls before it needs them.
class Credits final : public FlowControl {
 public:
  static constexpr int kBatch = 2;
  static constexpr int kGroups = ChannelRows::kSlotSets / kBatch;

  // Allocates the credit semaphores (persistent, the same on every member).
  static absl::StatusOr<std::unique_ptr<Credits>> Create(
      const ChannelRows& rows);

  absl::Status BeforePush(int64_t call,
                          std::span<const ChannelOutgoing> out) override;
  absl::Status TakeCarried(absl::string_view collective, const Group& g,
                           const std::byte* rows,
                           std::span<const ChannelIncoming> in) override;
  absl::Status AfterConsume(int64_t call,
                            std::span<const ChannelIncoming> in) override;
  absl::Status GiveOwed() override;
  absl::Status WaitRowsConsumed() override;

  // The credit word of the next row to the member at `position`: the
  // deferred group's credits owed to it, as (count << 8) | (group + 1), or
  // 0; what it returns is no longer owed.
  int64_t TakeDeferred(int position);

 private:
  explicit Credits(const ChannelRows& rows) : rows_(rows) {}
  static int GroupOf(int64_t call) {
    return static_cast<int>((call / kBatch) % kGroups);
  }
  // Gives the credits owed for group `q` by remote signals.
  absl::Status Give(int q);

  const ChannelRows& rows_;
  SemaphoreArray credits_;  // REGULAR, one per credit group.
  // Rows pushed in each credit group's slot sets at its last use.
  int pushed_[kGroups] = {};
  // Credits owed to the member at each position, per credit group.
  std::vector<int> owed_[kGroups];
  // The group whose credits the next call's rows carry; -1 for none.
  int deferred_ = -1;
};

// DMA rows: one DMA per receiver of [credit word | header | payload],
// staged in private memory, into row `index` of its slot set, counted on
// its `arrived[set][index]`; a receiver waits for each expected row on its
// own semaphore (senders that run ahead must not mix their byte counts),
// then for its own pushes to have been read.
class DmaRows final : public RowProtocol {
 public:
  // Allocates the arrival and send semaphores (persistent).
  static absl::StatusOr<std::unique_ptr<DmaRows>> Create(ChannelRows& rows,
                                                         Credits& credits);

  absl::StatusOr<const std::byte*> Move(const RowCall& call) override;

 private:
  DmaRows(ChannelRows& rows, Credits& credits)
      : rows_(rows), credits_(credits) {}
  // The credit word and payload of a row, after its staged header.
  void Stage(const ChannelOutgoing& o);

  // A descriptor of steps 2-3, made when a slot set and member are first
  // used and again when the call's row length there changes: a repeated
  // call (a decode loop) starts and waits on the same descriptors instead
  // of slicing views and making new ones for every row
  // (`MPIRUN_ARGS="-x MESHDMA_FORCE_INTERHOST=1"
  // bench/instructions_per_call.sh build/bench/meshdma-bench OP 8 2000`
  // counts the instructions).
  struct Described {
    int64_t bytes = -1;
    std::optional<AsyncCopyDescriptor> copy;
  };
  template <typename Make>
  static AsyncCopyDescriptor& Reuse(Described& d, int64_t bytes, Make make);

  ChannelRows& rows_;
  Credits& credits_;
  SemaphoreArray arrived_;  // DMA, [kSlotSets * n]: per set and sender.
  Semaphore sent_;          // DMA: this device's pushes being read.
  // Per slot set and member position: my push of a row to that member, and
  // the wait for that member's row; per set, the wait for my pushes.
  std::vector<Described> push_[ChannelRows::kSlotSets];
  std::vector<Described> arrival_[ChannelRows::kSlotSets];
  Described pushes_read_[ChannelRows::kSlotSets];
};

}  // namespace meshdma::collectives_internal

#endif  // MESHDMA_COLLECTIVES_INTERNAL_CHANNEL_DMA_H_
