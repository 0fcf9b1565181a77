// The processes of one launch, as the layers that are not transports see
// them: who this process is, how many there are, and a few collective byte
// exchanges. The launch description, traces and `shard_map`'s host transfers
// use it; the MPI implementation lives in dma/transport/mpi/ so that nothing
// else depends on MPI. Every call except `rank` and `size` is collective:
// every process of the group must make it, in the same order.
#ifndef MESHDMA_TOPOLOGY_PROCESS_GROUP_H_
#define MESHDMA_TOPOLOGY_PROCESS_GROUP_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace meshdma {

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every process contributes `mine`; all receive every contribution,
  // indexed by rank.
  virtual absl::StatusOr<std::vector<std::string>> AllGather(
      absl::string_view mine) = 0;
  // Every process contributes `mine`; `root` receives every contribution
  // indexed by rank, the others an empty vector.
  virtual absl::StatusOr<std::vector<std::string>> Gather(
      absl::string_view mine, int root) = 0;
  // `root`'s `bytes` replace every other process's `bytes`.
  virtual absl::Status Broadcast(std::string& bytes, int root) = 0;
  // Returns once every process has called it; gives up with
  // DeadlineExceeded naming `what` and this rank after `timeout`.
  virtual absl::Status Barrier(absl::string_view what,
                               absl::Duration timeout) = 0;
  // `Barrier` that also exchanges a few words: every process passes the same
  // number (at most kMaxExchangeWords) and receives every process's words,
  // rank by rank ([rank * mine.size() + i]). Gives up like `Barrier`.
  static constexpr int kMaxExchangeWords = 7;
  virtual absl::StatusOr<std::vector<int64_t>> BarrierExchange(
      absl::string_view what, absl::Duration timeout,
      std::span<const int64_t> mine) = 0;
  // Not collective: a peer is dead or stuck (`reason` says which), so this
  // group can no longer finish together. Under MPI the process then exits
  // with status 1 at exit instead of finalising MPI, which would wait for
  // that peer. A no-op where nothing waits for peers at exit.
  virtual void MarkPeersLost(const std::string& reason) {}

  // OK when `root` is a rank of this group, else InvalidArgument naming
  // `call`, the root and the group's size. Every implementation of `Gather`
  // and `Broadcast` checks its root with it before any message (under MPI, a
  // bad root would be MPI's error, fatal to the whole job).
  absl::Status CheckRoot(absl::string_view call, int root) const;
};

// The group of this process alone: exchanges return its own bytes.
std::unique_ptr<ProcessGroup> MakeSingleProcessGroup();

}  // namespace meshdma

#endif  // MESHDMA_TOPOLOGY_PROCESS_GROUP_H_
