// A launch without MPI: the processes find each other through a key-value
// store that every process reaches, the one its launcher made (torch's
// c10d TCPStore under torchrun, a FileStore under torch.multiprocessing;
// meshdma/torch adapts them). Nothing here serves the store: meshdma only
// reads and writes keys.
//
// Every exchange of the group is an all-gather through the store: exchange k
// writes this rank's bytes under "<prefix>/<k>/<rank>" and waits for every
// other rank's. A rank that has finished exchange k knows every rank has
// finished reading exchange k-1, so it deletes its own key of k-1: the store
// holds at most two exchanges' keys per rank.
#ifndef MESHDMA_TOPOLOGY_STORE_PROCESS_GROUP_H_
#define MESHDMA_TOPOLOGY_STORE_PROCESS_GROUP_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "meshdma/topology/process_group.h"

namespace meshdma {

// The store's contract, as a c10d::Store offers it. Thread-compatible: one
// process group calls it from one thread at a time.
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual absl::Status Set(const std::string& key,
                           const std::string& value) = 0;
  // `key`'s value once it is set; DeadlineExceeded after `timeout`.
  virtual absl::StatusOr<std::string> Get(const std::string& key,
                                          absl::Duration timeout) = 0;
  // Whether `key` is set now (no waiting).
  virtual absl::StatusOr<bool> Contains(const std::string& key) = 0;
  // Removes `key` where the store can; a no-op where it cannot.
  virtual absl::Status Delete(const std::string& key) = 0;
};

struct StoreProcessGroupOptions {
  int rank = 0;
  int size = 1;
  // Keys start with this (distinct launches on one store need distinct
  // prefixes).
  std::string prefix = "meshdma";
  // How long an exchange without a timeout of its own (AllGather, Gather,
  // Broadcast) waits for the slowest rank.
  absl::Duration exchange_timeout = absl::Seconds(300);
};

// InvalidArgument for a rank outside [0, size) or a size below 1.
absl::StatusOr<std::unique_ptr<ProcessGroup>> MakeStoreProcessGroup(
    std::shared_ptr<KeyValueStore> store, StoreProcessGroupOptions options);

}  // namespace meshdma

#endif  // MESHDMA_TOPOLOGY_STORE_PROCESS_GROUP_H_
