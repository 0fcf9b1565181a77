#include "dma/runtime.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "dma/internal/runtime_impl.h"
#include "dma/trace.h"
#include "dma/transport/direct_transport.h"
#include "dma/transport/mpi_transport.h"
#include "dma/transport/shm_segment.h"

namespace meshdma {
namespace internal {
namespace {

std::atomic<bool> g_runtime_alive{false};

absl::Status MpiError(int code, absl::string_view call) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return absl::InternalError(
      absl::StrCat(call, " failed: ", absl::string_view(text, len)));
}

const char* GetEnv(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

}  // namespace

RuntimeImpl::RuntimeImpl(RuntimeOptions options)
    : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<RuntimeImpl>> RuntimeImpl::Create(
    RuntimeOptions options) {
  if (g_runtime_alive.exchange(true)) {
    return absl::FailedPreconditionError(
        "a meshdma::Runtime is already alive in this process; destroy it "
        "before creating another");
  }
  std::unique_ptr<RuntimeImpl> rt(new RuntimeImpl(std::move(options)));
  absl::Status s = rt->Init();
  if (!s.ok()) {
    rt->Shutdown().IgnoreError();
    return s;
  }
  return rt;
}

RuntimeImpl::~RuntimeImpl() {
  absl::Status s = Shutdown();
  if (!s.ok()) {
    std::fprintf(stderr, "meshdma: runtime shutdown: %s\n",
                 std::string(s.message()).c_str());
  }
}

absl::Status RuntimeImpl::Init() {
  // 1. Options, from the struct or the environment.
  heap_bytes_ = options_.heap_bytes.value_or(256ll << 20);
  if (!options_.heap_bytes.has_value()) {
    if (const char* v = GetEnv(kHeapBytesEnv)) {
      if (!absl::SimpleAtoi(v, &heap_bytes_)) {
        return absl::InvalidArgumentError(
            absl::StrCat(kHeapBytesEnv, "='", v, "' is not a byte count"));
      }
    }
  }
  if (heap_bytes_ < kReservedHeapBytes + 4096 || heap_bytes_ > (1ll << 40)) {
    return absl::InvalidArgumentError(
        absl::StrCat("heap size ", heap_bytes_, " bytes is outside [",
                     kReservedHeapBytes + 4096, ", 2^40]"));
  }
  heap_bytes_ = (heap_bytes_ + 4095) & ~int64_t{4095};
  dma_mode_ = options_.dma_mode.value_or(DmaMode::kAsync);
  if (!options_.dma_mode.has_value()) {
    if (const char* v = GetEnv(kDmaModeEnv)) {
      const absl::string_view mode(v);
      if (mode == "eager") {
        dma_mode_ = DmaMode::kEager;
      } else if (mode != "async") {
        return absl::InvalidArgumentError(absl::StrCat(
            kDmaModeEnv, "='", v, "': expected 'async' or 'eager'"));
      }
    }
  }
  wait_timeout_ = options_.wait_timeout.value_or(absl::Seconds(120));
  if (!options_.wait_timeout.has_value()) {
    if (const char* v = GetEnv(kWaitTimeoutEnv)) {
      double seconds = 0;
      if (!absl::SimpleAtod(v, &seconds) || seconds <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            kWaitTimeoutEnv, "='", v, "' is not a positive number of seconds"));
      }
      wait_timeout_ = absl::Seconds(seconds);
    }
  }
  if (wait_timeout_ <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("wait timeout must be positive");
  }
  if (const char* v = GetEnv(kStreamingMinBytesEnv)) {
    if (!absl::SimpleAtoi(v, &options_.streaming_min_bytes) ||
        options_.streaming_min_bytes < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          kStreamingMinBytesEnv, "='", v, "' is not a byte count"));
    }
  }
  if (const char* v = GetEnv(kSpinNsEnv)) {
    if (!absl::SimpleAtoi(v, &options_.spin_ns) || options_.spin_ns < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(kSpinNsEnv, "='", v,
                       "' is not a non-negative number of nanoseconds"));
    }
  }
  if (options_.async_min_bytes < 0 || options_.copy_chunk_bytes < 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("async_min_bytes ", options_.async_min_bytes,
                     " must be >= 0 and copy_chunk_bytes ",
                     options_.copy_chunk_bytes, " >= 4096"));
  }

  // 2. MPI, when launched by mpirun.
  use_mpi_ = LaunchedByMpi();
  MPI_Comm comm = MPI_COMM_NULL;
  if (use_mpi_) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (finalized) {
      return absl::FailedPreconditionError(
          "MPI has been finalised in this process: a meshdma runtime cannot "
          "be created again after the one that owned MPI shut down");
    }
    int provided = 0;
    if (!initialized) {
      int rc =
          MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Init_thread");
      owns_mpi_ = true;
    } else {
      MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_MULTIPLE) {
      return absl::FailedPreconditionError(absl::StrCat(
          "MPI provides thread level ", provided,
          "; meshdma needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE, ")"));
    }
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Comm_dup");
    comm = comm_;
  }

  // 3. Topology and the launch.
  MESHDMA_ASSIGN_OR_RETURN(HostTopology topo, HostTopology::Discover());
  topology_ = std::make_unique<HostTopology>(std::move(topo));
  MESHDMA_ASSIGN_OR_RETURN(Launch launch,
                           Launch::Discover(*topology_, options_.launch, comm));
  launch_ = std::make_unique<Launch>(std::move(launch));

  // 4. Observation: the user's observer, behind the tracer when tracing.
  observer_ = options_.observer;
  trace_path_ = options_.trace_path.value_or("");
  if (!options_.trace_path.has_value()) {
    if (const char* v = GetEnv(kTraceEnv)) trace_path_ = v;
  }
  if (!trace_path_.empty()) {
    tracer_ =
        std::make_unique<TimelineTracer>(launch_->rank(), options_.observer);
    observer_ = tracer_.get();
  }

  // 5. Heaps and transports.
  const int n = launch_->num_devices();
  heap_base_of_device_.assign(n, nullptr);
  transport_of_device_.assign(n, nullptr);
  local_of_global_.assign(n, -1);
  MESHDMA_RETURN_IF_ERROR(InitHeaps(comm));

  // 6. Copy workers (asynchronous mode).
  const int local = static_cast<int>(devices_.size());
  if (dma_mode_ == DmaMode::kAsync) {
    const int threads = options_.copy_threads > 0 ? options_.copy_threads
                                                  : std::max(1, local / 2);
    copy_engine_ =
        std::make_unique<CopyEngine>(threads, options_.copy_chunk_bytes);
  }

  // 7. Device threads, pinned to their cores.
  for (int i = 0; i < local; ++i) {
    threads_.emplace_back([this, i] { DeviceThreadMain(i); });
  }
  return absl::OkStatus();
}

absl::Status RuntimeImpl::InitHeaps(MPI_Comm comm) {
  const int rank = launch_->rank();
  const std::vector<int> mine = launch_->DevicesOfRank(rank);
  const size_t per_device = static_cast<size_t>(heap_bytes_);
  local_heaps_bytes_ = per_device * mine.size();

  // Processes sharing this host (other than this one) reach our heaps through
  // shared memory; without such peers private memory suffices. The tag
  // broadcast and the barriers are collective over all processes, whether or
  // not a process has host peers.
  std::vector<int> host_peers;
  for (int r = 0; r < launch_->num_processes(); ++r) {
    if (r != rank && launch_->SameHost(r, rank)) host_peers.push_back(r);
  }
  uint64_t job_tag = 0;
  if (comm != MPI_COMM_NULL) {
    if (rank == 0)
      job_tag = std::random_device{}() ^ (uint64_t(getpid()) << 32);
    MPI_Bcast(&job_tag, 1, MPI_UINT64_T, 0, comm);
  }
  if (host_peers.empty()) {
    void* p = mmap(nullptr, local_heaps_bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot reserve ", local_heaps_bytes_, " bytes of heap for ",
          mine.size(), " devices: ", std::strerror(errno)));
    }
    local_heaps_ = static_cast<std::byte*>(p);
  } else {
    MESHDMA_ASSIGN_OR_RETURN(
        own_segment_, ShmSegment::Create(ShmSegment::NameFor(job_tag, rank),
                                         local_heaps_bytes_));
    local_heaps_ = own_segment_->data();
  }
  for (size_t i = 0; i < mine.size(); ++i) {
    heap_base_of_device_[mine[i]] = local_heaps_ + i * per_device;
    local_of_global_[mine[i]] = static_cast<int>(i);
    devices_.push_back(
        std::make_unique<Device>(this, mine[i], static_cast<int>(i),
                                 local_heaps_ + i * per_device, heap_bytes_));
  }
  transports_.push_back(std::make_unique<DirectTransport>("local", this));
  Transport* local_transport = transports_.back().get();
  for (int g : mine) transport_of_device_[g] = local_transport;

  if (comm != MPI_COMM_NULL) MPI_Barrier(comm);  // Every segment exists.
  absl::Status mapped = absl::OkStatus();
  if (!host_peers.empty()) {
    transports_.push_back(std::make_unique<DirectTransport>("shm", this));
    Transport* shm = transports_.back().get();
    for (int r : host_peers) {
      const std::vector<int> theirs = launch_->DevicesOfRank(r);
      auto segment = ShmSegment::Open(ShmSegment::NameFor(job_tag, r),
                                      per_device * theirs.size());
      if (!segment.ok()) {
        mapped = segment.status();
        break;
      }
      for (size_t i = 0; i < theirs.size(); ++i) {
        heap_base_of_device_[theirs[i]] = (*segment)->data() + i * per_device;
        transport_of_device_[theirs[i]] = shm;
      }
      peer_segments_.push_back(std::move(*segment));
    }
  }
  // Every peer has mapped every segment: the names can go, so nothing is
  // left behind in /dev/shm however the job ends.
  if (comm != MPI_COMM_NULL) MPI_Barrier(comm);
  if (own_segment_ != nullptr) own_segment_->Unlink();
  MESHDMA_RETURN_IF_ERROR(mapped);

  if (launch_->num_processes() > 1) {
    auto mpi = std::make_unique<MpiTransport>(this, comm);
    mpi_transport_ = mpi.get();
    transports_.push_back(std::move(mpi));
    for (int g = 0; g < launch_->num_devices(); ++g) {
      if (transport_of_device_[g] == nullptr)
        transport_of_device_[g] = mpi_transport_;
    }
  }
  return absl::OkStatus();
}

void RuntimeImpl::DeviceThreadMain(int local_index) {
  Device* device = devices_[local_index].get();
  if (options_.pin_threads) {
    const int core = launch_->devices()[device->global_index()].core;
    if (core >= 0) {
      absl::Status s = topology_->PinThreadToCore(core);
      if (!s.ok()) {
        std::fprintf(stderr, "meshdma: warning: %s: %s\n",
                     device->Name().c_str(), std::string(s.message()).c_str());
      }
    }
  }
  uint64_t seen = 0;
  for (;;) {
    std::function<void(int)> task;
    {
      std::unique_lock<std::mutex> lock(task_mu_);
      task_cv_.wait(lock,
                    [&] { return stopping_ || task_generation_ != seen; });
      if (stopping_) return;
      seen = task_generation_;
      task = task_;
    }
    task(local_index);
    {
      std::lock_guard<std::mutex> lock(task_mu_);
      --tasks_pending_;
    }
    done_cv_.notify_all();
  }
}

Device* RuntimeImpl::LocalDevice(int global_device) const {
  if (global_device < 0 ||
      global_device >= static_cast<int>(local_of_global_.size())) {
    return nullptr;
  }
  const int local = local_of_global_[global_device];
  return local < 0 ? nullptr : devices_[local].get();
}

absl::Status RuntimeImpl::Run(const Mesh& mesh,
                              std::function<absl::Status()> fn) {
  if (shut_down_) {
    return absl::FailedPreconditionError("Runtime::Run after Shutdown");
  }
  if (Device* d = CurrentDevice()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Runtime::Run called from inside Run on ", d->Name(),
        ": the function passed to Run already runs on every device"));
  }
  // Every process finishes the previous Run before any device starts this
  // one: the reserved barrier semaphores are shared by all Runs, and a
  // process holding no device of the previous mesh must not signal a device
  // that is still in that mesh's barrier.
  MESHDMA_RETURN_IF_ERROR(SyncProcesses("Runtime::Run"));
  if (aborted()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Runtime::Run on a runtime whose earlier Run failed (",
                     abort_reason(), "); create a new runtime"));
  }
  for (int g : mesh.devices()) {
    if (g < 0 || g >= launch_->num_devices()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mesh ", mesh.ToString(), " names global device ", g,
          " but the launch has ", launch_->num_devices(), " devices"));
    }
  }
  std::vector<absl::Status> results(devices_.size());
  auto task = [&](int local) {
    Device* device = devices_[local].get();
    auto logical = mesh.LogicalIdOfGlobal(device->global_index());
    if (!logical.ok()) return;  // Not in this mesh.
    SetCurrentDevice(device);
    device->EnterRun(&mesh, *logical);
    absl::Status s = fn();
    absl::Status exit = device->PopScope();
    if (s.ok()) s = exit;
    device->ExitRun();
    SetCurrentDevice(nullptr);
    if (!s.ok()) {
      Abort(absl::StrCat(device->Name(), " failed: ",
                         s.message().substr(0, s.message().find('\n'))));
    }
    results[local] = std::move(s);
  };
  {
    std::lock_guard<std::mutex> lock(task_mu_);
    task_ = task;
    tasks_pending_ = static_cast<int>(devices_.size());
    ++task_generation_;
  }
  task_cv_.notify_all();
  {
    std::unique_lock<std::mutex> lock(task_mu_);
    done_cv_.wait(lock, [&] { return tasks_pending_ == 0; });
    task_ = nullptr;
  }
  // Report root causes before the waits they aborted.
  std::vector<std::string> lines;
  absl::StatusCode code = absl::StatusCode::kOk;
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < results.size(); ++i) {
      const absl::Status& s = results[i];
      if (s.ok() || (s.code() == absl::StatusCode::kAborted) != (pass == 1)) {
        continue;
      }
      if (code == absl::StatusCode::kOk) code = s.code();
      lines.push_back(absl::StrCat(devices_[i]->Name(), ": ", s.message()));
    }
  }
  if (lines.empty()) return absl::OkStatus();
  return absl::Status(
      code,
      absl::StrCat("Run on mesh ", mesh.ToString(), " failed on ", lines.size(),
                   " device(s):\n", absl::StrJoin(lines, "\n")));
}

absl::Status RuntimeImpl::SyncProcesses(absl::string_view what) {
  if (comm_ == MPI_COMM_NULL) return absl::OkStatus();
  MPI_Request request;
  MPI_Ibarrier(comm_, &request);
  const absl::Time deadline = absl::Now() + wait_timeout_;
  for (;;) {
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return absl::OkStatus();
    if (absl::Now() > deadline) {
      // The request cannot be cancelled; the process is expected to exit.
      return absl::DeadlineExceededError(
          absl::StrCat(what, " on rank ", launch_->rank(),
                       ": not every process reached it within ",
                       absl::FormatDuration(wait_timeout_)));
    }
    absl::SleepFor(absl::Microseconds(20));
  }
}

void RuntimeImpl::Abort(const std::string& reason, bool notify_peers) {
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (aborted_.load()) return;
    abort_reason_ = reason;
    aborted_.store(true, std::memory_order_release);
  }
  if (notify_peers && mpi_transport_ != nullptr) {
    mpi_transport_->BroadcastAbort(reason);
  }
}

std::string RuntimeImpl::abort_reason() const {
  std::lock_guard<std::mutex> lock(abort_mu_);
  return abort_reason_;
}

std::string RuntimeImpl::DescribeLocalDevices() {
  std::vector<std::string> lines;
  for (auto& d : devices_) {
    lines.push_back(absl::StrCat("  ", d->Name(), ": ", d->BlockedOn(),
                                 "; DMAs in flight: ", d->DescribeInflight()));
  }
  return absl::StrJoin(lines, "\n");
}

absl::Status RuntimeImpl::Shutdown() {
  if (shut_down_) return absl::OkStatus();
  shut_down_ = true;
  {
    std::lock_guard<std::mutex> lock(task_mu_);
    stopping_ = true;
  }
  task_cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
  copy_engine_.reset();
  absl::Status status;
  if (mpi_transport_ != nullptr) status = mpi_transport_->Shutdown();
  transports_.clear();
  mpi_transport_ = nullptr;
  peer_segments_.clear();
  if (own_segment_ != nullptr) {
    own_segment_.reset();
  } else if (local_heaps_ != nullptr) {
    munmap(local_heaps_, local_heaps_bytes_);
  }
  local_heaps_ = nullptr;
  devices_.clear();
  if (tracer_ != nullptr) {
    absl::Status written = tracer_->Write(trace_path_, comm_);
    if (status.ok()) status = written;
  }
  if (comm_ != MPI_COMM_NULL) {
    MPI_Comm_free(&comm_);
  }
  if (owns_mpi_) {
    MPI_Finalize();
    owns_mpi_ = false;
  }
  g_runtime_alive.store(false);
  return status;
}

}  // namespace internal

// --- Runtime facade
// -----------------------------------------------------------

Runtime::Runtime(std::unique_ptr<internal::RuntimeImpl> impl)
    : impl_(std::move(impl)) {}
Runtime::~Runtime() = default;

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Create(
    RuntimeOptions options) {
  MESHDMA_ASSIGN_OR_RETURN(auto impl,
                           internal::RuntimeImpl::Create(std::move(options)));
  return std::unique_ptr<Runtime>(new Runtime(std::move(impl)));
}

const Launch& Runtime::launch() const { return impl_->launch(); }
const HostTopology& Runtime::topology() const { return impl_->topology(); }
int Runtime::num_local_devices() const { return impl_->num_local_devices(); }
int Runtime::num_devices() const { return impl_->launch().num_devices(); }
DmaMode Runtime::dma_mode() const { return impl_->dma_mode(); }
int64_t Runtime::heap_bytes() const { return impl_->heap_bytes(); }
absl::Duration Runtime::wait_timeout() const { return impl_->wait_timeout(); }

absl::StatusOr<Mesh> Runtime::MakeMesh(std::vector<Mesh::Axis> axes) const {
  std::vector<int> devices(num_devices());
  for (int i = 0; i < num_devices(); ++i) devices[i] = i;
  return Mesh::Create(std::move(axes), std::move(devices));
}

absl::StatusOr<Mesh> Runtime::MakeMesh1D(std::string axis) const {
  return MakeMesh({{std::move(axis), num_devices()}});
}

absl::Status Runtime::Run(const Mesh& mesh, std::function<absl::Status()> fn) {
  return impl_->Run(mesh, std::move(fn));
}

absl::Status Runtime::Shutdown() { return impl_->Shutdown(); }

absl::StatusOr<int> axis_index(std::string_view axis) {
  MESHDMA_ASSIGN_OR_RETURN(internal::Device * d,
                           internal::RequireDevice("axis_index"));
  MESHDMA_ASSIGN_OR_RETURN(const Mesh* mesh, d->mesh());
  return mesh->axis_index(d->logical_id(), axis);
}

absl::StatusOr<int> axis_size(std::string_view axis) {
  MESHDMA_ASSIGN_OR_RETURN(internal::Device * d,
                           internal::RequireDevice("axis_size"));
  MESHDMA_ASSIGN_OR_RETURN(const Mesh* mesh, d->mesh());
  return mesh->axis_size(axis);
}

absl::StatusOr<const Mesh*> current_mesh() {
  MESHDMA_ASSIGN_OR_RETURN(internal::Device * d,
                           internal::RequireDevice("current_mesh"));
  return d->mesh();
}

absl::StatusOr<int> logical_device_id() {
  MESHDMA_ASSIGN_OR_RETURN(internal::Device * d,
                           internal::RequireDevice("logical_device_id"));
  return d->logical_id();
}

absl::StatusOr<int> global_device_id() {
  MESHDMA_ASSIGN_OR_RETURN(internal::Device * d,
                           internal::RequireDevice("global_device_id"));
  return d->global_index();
}

}  // namespace meshdma
