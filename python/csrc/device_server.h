// The device of a torch process: one meshdma runtime per process, launched
// through the torch launcher's store, whose single device runs one long
// `Runtime::Run` that serves calls from torch's threads (the Python thread,
// autograd's, DDP's reducer) in the order they were submitted.
//
// Why a served queue: meshdma's verbs act only on a device thread, and the
// collectives keep per-device state in that thread (their channels), so
// every call must run on the same thread. A call costs the hand-off both
// ways: the device spins for `idle_spin` after each call before it sleeps,
// and a caller that waits spins (yielding its core) before it sleeps, so
// back-to-back small calls cost a cache line's round trip each way
// (docs/torch.md, "The thread model"; bench/torch_collectives.py measures it).
//
// Point-to-point messages (send / recv, and the collectives of groups smaller
// than the launch) go through the device's mailbox; an idle device keeps
// moving its queued sends instead of sleeping.
//
// Failure: a call that fails ends the Run on every process (meshdma aborts
// the peers' waits). The server then refuses every later call with the
// first failure's message: the process group must be destroyed and a new one
// initialised, as after any collective failure in torch.
#ifndef MESHDMA_PYTHON_CSRC_DEVICE_SERVER_H_
#define MESHDMA_PYTHON_CSRC_DEVICE_SERVER_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/topology/store_process_group.h"
#include "python/csrc/peer_mail.h"
#include "python/csrc/tensor_arena.h"

namespace meshdma::torch_backend {

// What a submitted call reports when it has run (or was refused).
class Completion {
 public:
  void Finish(absl::Status status);
  bool done() const { return done_.load(std::memory_order_acquire) != 0; }
  // Waits for `Finish`: spins a while, yielding, then sleeps.
  const absl::Status& Wait();
  const absl::Status& status() const { return status_; }
  // Runs `fn` once finished (at once when already finished).
  void Then(std::function<void(const absl::Status&)> fn);

 private:
  std::atomic<int> done_{0};
  absl::Status status_;
  std::mutex mu_;
  std::vector<std::function<void(const absl::Status&)>> then_;
};

class DeviceServer {
 public:
  struct Options {
    int rank = 0;
    int size = 1;
    // The wait timeout of the runtime (the torch group's timeout unless
    // MESHDMA_WAIT_TIMEOUT_S says otherwise).
    absl::Duration timeout = absl::Seconds(120);
    // The symmetric heap per process: MESHDMA_HEAP_BYTES, else 1 GiB
    // (reserved lazily: untouched pages cost nothing). Half of it holds the
    // heap tensors (tensor_arena.h), a quarter stages calls' outputs, the
    // rest is the collectives' scratch.
    std::optional<int64_t> heap_bytes;
  };
  // Collective over the launch: creates the runtime on `store`, starts the
  // serving Run, and returns once it serves.
  static absl::StatusOr<std::shared_ptr<DeviceServer>> Start(
      std::shared_ptr<KeyValueStore> store, Options options);
  // A server of this process alone (no launch, no store, no peers): the
  // device of kernels called outside any meshdma process group.
  static absl::StatusOr<std::shared_ptr<DeviceServer>> StartAlone(
      Options options);
  // Ends the Run and shuts the runtime down (collective).
  ~DeviceServer();

  // Queues `fn` to run on the device, inside its own allocation scope
  // (`run_scoped`); the returned completion reports its status.
  std::shared_ptr<Completion> Submit(std::function<absl::Status()> fn);
  // Submit, then wait. Called on the device itself (from inside a call:
  // a kernel called by a callback of a fused kernel), runs `fn` at once in
  // a scope of its own; its failure is then the enclosing call's to report.
  absl::Status Call(std::function<absl::Status()> fn);

  int rank() const { return options_.rank; }
  int size() const { return options_.size; }
  Runtime& runtime() { return *runtime_; }
  // The device's mailbox (peer_mail.h), made when the Run starts. Only for
  // calls running on the device.
  PeerMail* mail() { return mail_.get(); }
  // The heap tensors' region; any thread once `Start` has returned.
  TensorArena& arena() { return *arena_; }
  // Symmetric memory that calls stage their outputs in (a quarter of the
  // heap): unlike `AllocateSymmetric` it is not zeroed for every call.
  TensorArena& staging() { return *staging_; }
  // The first failure, OK while the server serves.
  absl::Status failure() const;

 private:
  struct Request {
    std::function<absl::Status()> fn;
    std::shared_ptr<Completion> completion;
    bool stop = false;
  };
  explicit DeviceServer(Options options) : options_(options) {}
  static absl::StatusOr<std::shared_ptr<DeviceServer>> StartOn(
      std::unique_ptr<ProcessGroup> processes, Options options);
  // The Run's function on the device: take, run, complete, until stopped or
  // a call fails.
  absl::Status Serve();
  bool TakeNext(Request& request);
  void Enqueue(Request request);
  void FailPending(const absl::Status& status);

  Options options_;
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<PeerMail> mail_;
  std::unique_ptr<TensorArena> arena_;
  std::unique_ptr<TensorArena> staging_;
  // Set once the Run serves (or failed before it could): `Start` waits.
  bool serving_ = false;
  std::thread run_thread_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request> queue_;
  std::atomic<uint64_t> submitted_{0};
  bool sleeping_ = false;
  absl::Status failure_;
  bool stopped_ = false;
};

}  // namespace meshdma::torch_backend

#endif  // MESHDMA_PYTHON_CSRC_DEVICE_SERVER_H_
