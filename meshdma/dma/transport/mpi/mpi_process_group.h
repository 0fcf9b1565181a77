// `ProcessGroup` over an MPI communicator: the host collectives that the
// launch description, traces and `shard_map` use under mpirun.
#ifndef MESHDMA_DMA_TRANSPORT_MPI_MPI_PROCESS_GROUP_H_
#define MESHDMA_DMA_TRANSPORT_MPI_MPI_PROCESS_GROUP_H_

#include <mpi.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "meshdma/base/deadline.h"
#include "meshdma/topology/process_group.h"

namespace meshdma::dma_internal {

// A barrier made of point-to-point messages on `comm` under `tag`: every
// rank sends its `epoch` to every other and receives theirs. Unlike
// MPI_Ibarrier it can name the ranks that have not arrived, barriers under
// different tags or communicators never match each other, and a late
// message of an earlier epoch is skipped. Each message may carry up to
// `ProcessGroup::kMaxExchangeWords` words of `payload` (the same count on
// every rank), read with `Words` once the barrier is complete. Poll with
// `Test`; dropping an unfinished barrier leaves its few bytes to MPI (the
// process is expected to exit).
class MpiBarrier {
 public:
  MpiBarrier(MPI_Comm comm, int tag, int64_t epoch,
             std::span<const int64_t> payload = {});
  ~MpiBarrier();
  MpiBarrier(const MpiBarrier&) = delete;
  MpiBarrier& operator=(const MpiBarrier&) = delete;

  // True once every rank has arrived; an error when a rank sent a later
  // epoch (the processes disagree on how many barriers they have passed).
  absl::StatusOr<bool> Test();
  // Ranks not yet heard from, as "1, 3".
  std::string Missing() const;
  // Every rank's payload, rank by rank (after `Test` returned true).
  std::vector<int64_t> Words() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Polls `barrier` until it completes or `timeout` (monotonic) passes; then
// DeadlineExceeded naming `what`, this rank and the ranks that never
// arrived, and MPI is marked unusable (`MarkMpiPeersLost`). Fails at once,
// with the loss's reason, once a process is lost (`MpiPeersLost`): the
// barrier cannot complete.
absl::Status WaitForBarrier(MpiBarrier& barrier, absl::string_view what,
                            int rank, absl::Duration timeout);

// After a barrier timed out a peer may be dead or stuck: MPI cannot be
// finalised (it would wait for that peer), so the process exits with status 1
// at exit instead, printing `reason`.
void MarkMpiPeersLost(const std::string& reason);
bool MpiPeersLost();
// The reason given first to MarkMpiPeersLost; "" while none is lost.
std::string MpiPeersLostReason();

class MpiProcessGroup : public ProcessGroup {
 public:
  // Takes ownership of `comm` (freed on destruction). MPI itself, when
  // meshdma initialised it, is finalised at exit, so that a runtime can be
  // created again in the same process. Contributions may exceed an MPI
  // count (lengths are 64-bit): bytes move in rounds of at most
  // `max_message_bytes` per rank (smaller in tests, to exercise the rounds).
  explicit MpiProcessGroup(MPI_Comm comm, int64_t max_message_bytes =
                                              std::numeric_limits<int>::max());
  ~MpiProcessGroup() override;

  MPI_Comm comm() const { return comm_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::StatusOr<std::vector<std::string>> AllGather(
      absl::string_view mine) override;
  absl::StatusOr<std::vector<std::string>> Gather(absl::string_view mine,
                                                  int root) override;
  absl::Status Broadcast(std::string& bytes, int root) override;
  absl::Status Barrier(absl::string_view what, absl::Duration timeout) override;
  absl::StatusOr<std::vector<int64_t>> BarrierExchange(
      absl::string_view what, absl::Duration timeout,
      std::span<const int64_t> mine) override;
  void MarkPeersLost(const std::string& reason) override {
    MarkMpiPeersLost(reason);
  }

 private:
  // Gather to `root`, or to everyone without one.
  absl::StatusOr<std::vector<std::string>> Exchange(absl::string_view mine,
                                                    std::optional<int> root);
  int64_t ChunkBytes() const;

  MPI_Comm comm_;
  int64_t max_message_bytes_;
  int64_t barrier_epoch_ = 0;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_TRANSPORT_MPI_MPI_PROCESS_GROUP_H_
