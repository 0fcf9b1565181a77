#include "python/csrc/device_server.h"

#include <sched.h>

#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "meshdma/base/env.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/symmetric_memory.h"
#include "meshdma/topology/mesh.h"

namespace meshdma::torch_backend {
namespace {

// How long the device polls its queue after a call before it sleeps, and
// how long a waiting caller polls before it sleeps. Both yield the core on
// every poll: on a machine with fewer cores than threads, the thread they
// wait for may need it.
// Spinning longer before yielding, or sleeping at once, were each slower:
// 16.5-34 us per 8-byte all_reduce against 16.2-18.2 on 2 cores (`mpirun
// -np 2 /usr/bin/python3 bench/torch_collectives.py`, temporary switches).
constexpr absl::Duration kIdleSpin = absl::Microseconds(200);
constexpr absl::Duration kCallerSpin = absl::Microseconds(200);
// A sleeping device wakes this often to notice a failure of the Run that
// happened elsewhere.
constexpr absl::Duration kIdleCheck = absl::Milliseconds(2);

// The server whose Run this thread serves (set on its device thread only):
// a call submitted from inside a call runs inline instead of queueing
// behind the call that waits for it.
thread_local const DeviceServer* t_serving = nullptr;

}  // namespace

void Completion::Finish(absl::Status status) {
  std::vector<std::function<void(const absl::Status&)>> then;
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = std::move(status);
    done_.store(1, std::memory_order_release);
    then.swap(then_);
  }
  done_.notify_all();
  for (auto& fn : then) fn(status_);
}

const absl::Status& Completion::Wait() {
  const absl::Time spin_until = absl::Now() + kCallerSpin;
  while (!done() && absl::Now() < spin_until) {
    sched_yield();
  }
  while (!done()) done_.wait(0, std::memory_order_acquire);
  return status_;
}

void Completion::Then(std::function<void(const absl::Status&)> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done()) {
      then_.push_back(std::move(fn));
      return;
    }
  }
  fn(status_);
}

absl::StatusOr<std::shared_ptr<DeviceServer>> DeviceServer::Start(
    std::shared_ptr<KeyValueStore> store, Options options) {
  StoreProcessGroupOptions group;
  group.rank = options.rank;
  group.size = options.size;
  group.prefix = "meshdma/launch";
  group.exchange_timeout = options.timeout;
  MESHDMA_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> processes,
                           MakeStoreProcessGroup(std::move(store), group));
  return StartOn(std::move(processes), options);
}

absl::StatusOr<std::shared_ptr<DeviceServer>> DeviceServer::StartAlone(
    Options options) {
  options.rank = 0;
  options.size = 1;
  return StartOn(MakeSingleProcessGroup(), options);
}

absl::StatusOr<std::shared_ptr<DeviceServer>> DeviceServer::StartOn(
    std::unique_ptr<ProcessGroup> processes, Options options) {
  // Step 1: the runtime over `processes`, one device per process.
  RuntimeOptions runtime_options;
  runtime_options.processes = std::move(processes);
  runtime_options.launch.devices_per_process = 1;
  if (!options.heap_bytes.has_value() &&
      !base_internal::EnvString(kHeapBytesEnv).has_value()) {
    options.heap_bytes = int64_t{1} << 30;
  }
  runtime_options.heap_bytes = options.heap_bytes;
  if (!base_internal::EnvString(kWaitTimeoutEnv).has_value()) {
    runtime_options.wait_timeout = options.timeout;
  }
  std::shared_ptr<DeviceServer> server(new DeviceServer(options));
  MESHDMA_ASSIGN_OR_RETURN(server->runtime_,
                           Runtime::Create(std::move(runtime_options)));
  // Step 2: a 1-D mesh "x" whose positions are the torch ranks.
  const Launch& launch = server->runtime_->launch();
  std::vector<int> devices;
  for (int r = 0; r < launch.num_processes(); ++r) {
    devices.push_back(launch.DevicesOfRank(r).at(0));
  }
  MESHDMA_ASSIGN_OR_RETURN(
      Mesh mesh, Mesh::Create({{"x", launch.num_processes()}}, devices));
  // Step 3: the serving Run, on a thread of its own that waits for it.
  DeviceServer* self = server.get();
  server->run_thread_ = std::thread([self, mesh = std::move(mesh)] {
    absl::Status s =
        self->runtime_->Run(mesh, [self] { return self->Serve(); });
    if (!s.ok()) self->FailPending(s);
  });
  // Step 4: the Run serves once its mailbox and tensor region exist.
  {
    std::unique_lock<std::mutex> lock(server->mu_);
    server->cv_.wait(
        lock, [&] { return server->serving_ || !server->failure_.ok(); });
    if (!server->failure_.ok()) return server->failure_;
  }
  return server;
}

DeviceServer::~DeviceServer() {
  Request stop;
  stop.stop = true;
  Enqueue(std::move(stop));
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  if (run_thread_.joinable()) run_thread_.join();
  runtime_.reset();
}

absl::Status DeviceServer::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

std::shared_ptr<Completion> DeviceServer::Submit(
    std::function<absl::Status()> fn) {
  Request request;
  request.fn = std::move(fn);
  request.completion = std::make_shared<Completion>();
  std::shared_ptr<Completion> completion = request.completion;
  Enqueue(std::move(request));
  return completion;
}

absl::Status DeviceServer::Call(std::function<absl::Status()> fn) {
  if (t_serving == this) return run_scoped(fn);
  std::shared_ptr<Completion> c = Submit(std::move(fn));
  return c->Wait();
}

void DeviceServer::Enqueue(Request request) {
  absl::Status refused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok() || stopped_) {
      refused = !failure_.ok() ? failure_
                               : absl::FailedPreconditionError(
                                     "the meshdma process group was destroyed");
    } else {
      queue_.push_back(std::move(request));
      submitted_.fetch_add(1, std::memory_order_release);
      if (sleeping_) cv_.notify_one();
      return;
    }
  }
  if (request.completion != nullptr) request.completion->Finish(refused);
}

bool DeviceServer::TakeNext(Request& request) {
  // Step 1: poll, yielding the core, for a while after the last call.
  const absl::Time spin_until = absl::Now() + kIdleSpin;
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!queue_.empty()) {
        request = std::move(queue_.front());
        queue_.pop_front();
        return true;
      }
      seen = submitted_.load(std::memory_order_acquire);
      absl::StatusOr<bool> sending = mail_->Progress();
      if (!sending.ok()) return false;
      if (absl::Now() >= spin_until && !*sending) {
        // Step 2: sleep, waking now and then to notice a failed Run.
        sleeping_ = true;
        cv_.wait_for(lock, absl::ToChronoMilliseconds(kIdleCheck),
                     [&] { return !queue_.empty(); });
        sleeping_ = false;
        if (!queue_.empty()) continue;
        absl::StatusOr<bool> failed = run_failed();
        if (!failed.ok() || *failed) return false;
        continue;
      }
    }
    sched_yield();
    while (submitted_.load(std::memory_order_acquire) == seen &&
           absl::Now() < spin_until) {
      sched_yield();
    }
  }
}

absl::Status DeviceServer::Serve() {
  absl::Status ready = [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(mail_, PeerMail::Create(options_.size));
    MESHDMA_ASSIGN_OR_RETURN(int64_t heap_free, SymmetricBytesFree());
    MESHDMA_ASSIGN_OR_RETURN(arena_, TensorArena::Create(heap_free / 2));
    MESHDMA_ASSIGN_OR_RETURN(staging_, TensorArena::Create(heap_free / 4));
    return absl::OkStatus();
  }();
  if (!ready.ok()) return ready;
  t_serving = this;
  absl::Cleanup not_serving = [] { t_serving = nullptr; };
  {
    std::lock_guard<std::mutex> lock(mu_);
    serving_ = true;
  }
  cv_.notify_all();
  for (;;) {
    Request request;
    if (!TakeNext(request)) {
      return absl::AbortedError("another process's call failed");
    }
    if (request.stop) return absl::OkStatus();
    absl::Status s = run_scoped([&] { return request.fn(); });
    if (!s.ok()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (failure_.ok()) {
          failure_ = absl::Status(
              s.code(),
              absl::StrCat(s.message(),
                           " [the meshdma process group cannot continue "
                           "after a failed call: destroy it and initialise a "
                           "new one]"));
        }
      }
      request.completion->Finish(s);
      return s;
    }
    request.completion->Finish(absl::OkStatus());
  }
}

void DeviceServer::FailPending(const absl::Status& status) {
  std::deque<Request> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.ok()) {
      failure_ = absl::Status(
          status.code(),
          absl::StrCat("rank ", options_.rank, ": ", status.message(),
                       " [the meshdma process group cannot continue after a "
                       "failed call: destroy it and initialise a new one]"));
    }
    pending.swap(queue_);
  }
  cv_.notify_all();  // A `Start` still waiting for the Run.
  for (Request& r : pending) {
    if (r.completion != nullptr) r.completion->Finish(failure());
  }
}

}  // namespace meshdma::torch_backend
