#include "meshdma/dma/internal/runtime_impl.h"

#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "meshdma/base/deadline.h"
#include "meshdma/base/env.h"
#include "meshdma/base/logging.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/base/thread_name.h"
#include "meshdma/dma/internal/timeline_tracer.h"
#include "meshdma/dma/trace.h"
#include "meshdma/dma/transport/direct/direct_transport.h"
#include "meshdma/dma/transport/mpi/mpi_path.h"
#include "meshdma/dma/transport/progress_policy.h"
#include "meshdma/dma/transport/shm/shm_segment.h"
#include "meshdma/dma/transport/socket/socket_transport.h"

namespace meshdma::dma_internal {
namespace {

std::atomic<bool> g_runtime_alive{false};
// The runtime whose Run is in progress, for `AbortRunAtExit`.
std::atomic<RuntimeImpl*> g_running{nullptr};

// Registered once, after MPI's own handler (so it runs first): a device
// thread that calls exit() while its Run is in progress would leave its
// peers waiting for it; the launch is aborted instead. An exit from any
// other thread is left alone: a long Run that serves calls (the torch
// backend's) ends through the static destructors as the process exits.
void AbortRunAtExit() {
  RuntimeImpl* rt = g_running.load();
  if (rt != nullptr && CurrentDevice() != nullptr) rt->OnExitDuringRun();
}

// The most the mesh-wide hang report waits for fresh boards
// (RuntimeImpl::fault_grace).
constexpr absl::Duration kMaxFaultGrace = absl::Milliseconds(500);
// The most an aborted shutdown waits for its peers (healthy ones were told
// and are shutting down too). Shorter, a peer slowed by a loaded machine
// misses the barrier and is taken for lost, which poisons MPI for the rest
// of the process (a later runtime of the process is refused).
constexpr absl::Duration kMaxAbortedShutdown = absl::Seconds(1);

// A Run whose only failure is races (RaceChecker::TakeReport's code).
constexpr absl::StatusCode kRaceCode = absl::StatusCode::kFailedPrecondition;

// The enums of `options` that are set must hold one of their enumerators
// (not an integer cast to the enum): InvalidArgument naming the option and
// its value.
absl::Status CheckOptionEnums(const RuntimeOptions& options) {
  auto bad = [](absl::string_view option, int value, absl::string_view valid) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RuntimeOptions::", option, " ", value, " is not one of ", valid));
  };
  if (options.dma_mode.has_value() && *options.dma_mode != DmaMode::kAsync &&
      *options.dma_mode != DmaMode::kEager) {
    return bad("dma_mode", static_cast<int>(*options.dma_mode),
               "kAsync (0), kEager (1)");
  }
  if (options.remote_transport.has_value() &&
      *options.remote_transport != RemoteTransport::kAuto &&
      *options.remote_transport != RemoteTransport::kTcp &&
      *options.remote_transport != RemoteTransport::kMpi) {
    return bad("remote_transport", static_cast<int>(*options.remote_transport),
               "kAuto (0), kTcp (1), kMpi (2)");
  }
  if (options.check.has_value() && *options.check != CheckMode::kOff &&
      *options.check != CheckMode::kRaces) {
    return bad("check", static_cast<int>(*options.check),
               "kOff (0), kRaces (1)");
  }
  return absl::OkStatus();
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
  static const bool registered = std::atexit(AbortRunAtExit) == 0;
  (void)registered;
  return rt;
}

RuntimeImpl::~RuntimeImpl() {
  absl::Status s = Shutdown();
  // Nobody can receive this error: it is printed whatever MESHDMA_DEBUG says.
  if (!s.ok()) LogError(absl::StrCat("runtime shutdown: ", s.message()));
}

absl::Status RuntimeImpl::Init() {
  MESHDMA_RETURN_IF_ERROR(ReadOptions());
  MESHDMA_RETURN_IF_ERROR(ConnectProcesses());
  MESHDMA_RETURN_IF_ERROR(DiscoverLaunch());
  // A process bound to some cores (mpirun's --bind-to) counts its own
  // devices against them; one free to run anywhere, the machine's.
  oversubscribed_ =
      static_cast<int>(launch_->DevicesOfRank(launch_->rank()).size()) >
          UsableCores() ||
      DeviceThreadsOnMachine() > MachineCores();
  MESHDMA_RETURN_IF_ERROR(StartObservation());
  MESHDMA_RETURN_IF_ERROR(InitHeaps());
  StartPeerWatch();
  StartCopyEngine();
  StartDeviceThreads();
  return absl::OkStatus();
}

int RuntimeImpl::DeviceThreadsOnMachine() const {
  const std::string& me = launch_->processes()[launch_->rank()].hostname;
  int threads = 0;
  for (const ProcessInfo& p : launch_->processes()) {
    if (p.hostname == me) threads += p.num_devices;
  }
  return threads;
}

int RuntimeImpl::MachineCores() {
  return std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
}

int RuntimeImpl::UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    return std::max(1, CPU_COUNT(&set));
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// Step 1: options, each from the struct, else the environment, else its
// default.
absl::Status RuntimeImpl::ReadOptions() {
  base_internal::WarnUnknownVariablesOnce();
  MESHDMA_RETURN_IF_ERROR(CheckOptionEnums(options_));
  MESHDMA_RETURN_IF_ERROR(ReadMemoryOptions());
  MESHDMA_RETURN_IF_ERROR(ReadTransportOptions());
  return ReadWaitOptions();
}

// Step 1a: the heap's size and the DMA execution mode.
absl::Status RuntimeImpl::ReadMemoryOptions() {
  using base_internal::EnvChoice;
  using base_internal::EnvInt;
  using base_internal::Resolve;
  static_assert(kMinHeapBytes >= kReservedHeapBytes + 4096);
  MESHDMA_ASSIGN_OR_RETURN(std::optional<int64_t> heap_env,
                           EnvInt(config::kHeapBytes));
  heap_bytes_ = Resolve(options_.heap_bytes, heap_env, int64_t{256} << 20);
  if (heap_bytes_ < kMinHeapBytes || heap_bytes_ > kMaxHeapBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("heap size ", heap_bytes_,
                     " bytes (RuntimeOptions::heap_bytes) is outside [",
                     kMinHeapBytes, ", ", kMaxHeapBytes, "]"));
  }
  heap_bytes_ = (heap_bytes_ + 4095) & ~int64_t{4095};

  MESHDMA_ASSIGN_OR_RETURN(std::optional<std::string> mode_env,
                           EnvChoice(config::kDmaMode));
  std::optional<DmaMode> mode_from_env;
  if (mode_env.has_value()) {
    mode_from_env = *mode_env == "eager" ? DmaMode::kEager : DmaMode::kAsync;
  }
  dma_mode_ = Resolve(options_.dma_mode, mode_from_env, DmaMode::kAsync);
  if (options_.async_min_bytes < 0 || options_.copy_chunk_bytes < 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("async_min_bytes ", options_.async_min_bytes,
                     " must be >= 0 and copy_chunk_bytes ",
                     options_.copy_chunk_bytes, " >= 4096"));
  }
  return absl::OkStatus();
}

// Step 1b: the transport to other hosts, its congestion control and how
// MPI cuts its puts; the channels' protocol.
absl::Status RuntimeImpl::ReadTransportOptions() {
  using base_internal::EnvChoice;
  using base_internal::EnvInt;
  using base_internal::EnvString;
  using base_internal::Resolve;
  MESHDMA_ASSIGN_OR_RETURN(std::optional<std::string> remote_env,
                           EnvChoice(config::kRemoteTransport));
  std::optional<RemoteTransport> remote_from_env;
  if (remote_env.has_value()) {
    remote_from_env = *remote_env == "tcp"   ? RemoteTransport::kTcp
                      : *remote_env == "mpi" ? RemoteTransport::kMpi
                                             : RemoteTransport::kAuto;
  }
  remote_choice_ = Resolve(options_.remote_transport, remote_from_env,
                           RemoteTransport::kAuto);
  MESHDMA_RETURN_IF_ERROR(EnvChoice(config::kChannelProtocol).status());
  if (options_.tcp_congestion.has_value()) {
    tcp_congestion_asked_ = *options_.tcp_congestion;
    tcp_congestion_source_ = "RuntimeOptions::tcp_congestion";
  } else if (std::optional<std::string> env =
                 EnvString(config::kTcpCongestion)) {
    tcp_congestion_asked_ = *env;
    tcp_congestion_source_ = kTcpCongestionEnv;
  }
  // A named congestion control the kernel refuses is an error at once, also
  // in a launch that will not use TCP (uniform on every process of a host).
  MESHDMA_RETURN_IF_ERROR(CheckTcpCongestion(
      TcpCongestion{tcp_congestion_asked_, tcp_congestion_source_}));
  constexpr int64_t kMaxPieced = config::kMpiPiecedBytes.max;
  MESHDMA_ASSIGN_OR_RETURN(std::optional<int64_t> pieced_env,
                           EnvInt(config::kMpiPiecedBytes));
  if (!options_.mpi_pieced_bytes.has_value()) {
    options_.mpi_pieced_bytes = pieced_env;
  }
  if (options_.mpi_pieced_bytes.has_value() &&
      (*options_.mpi_pieced_bytes < 0 ||
       *options_.mpi_pieced_bytes > kMaxPieced)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RuntimeOptions::mpi_pieced_bytes ", *options_.mpi_pieced_bytes,
        " must lie in [0, ", kMaxPieced, "]"));
  }
  return absl::OkStatus();
}

// Step 1c: the wait timeout and the spins of a wait.
absl::Status RuntimeImpl::ReadWaitOptions() {
  using base_internal::EnvInt;
  using base_internal::EnvSeconds;
  using base_internal::Resolve;
  // Infinite means no timeout; a finite timeout is at most ~31 years, so a
  // deadline on the monotonic clock never overflows.
  constexpr double kMaxTimeoutSeconds = config::kWaitTimeout.max;
  MESHDMA_ASSIGN_OR_RETURN(std::optional<absl::Duration> timeout_from_env,
                           EnvSeconds(config::kWaitTimeout));
  wait_timeout_ =
      Resolve(options_.wait_timeout, timeout_from_env, absl::Seconds(120));
  if (wait_timeout_ <= absl::ZeroDuration() ||
      (wait_timeout_ != absl::InfiniteDuration() &&
       wait_timeout_ > absl::Seconds(kMaxTimeoutSeconds))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RuntimeOptions::wait_timeout ", absl::FormatDuration(wait_timeout_),
        " must be positive and at most ", kMaxTimeoutSeconds,
        " s, or absl::InfiniteDuration() for no timeout"));
  }
  MESHDMA_ASSIGN_OR_RETURN(std::optional<int64_t> spin_env,
                           EnvInt(config::kSpinNs));
  if (spin_env.has_value()) options_.spin_ns = *spin_env;
  MESHDMA_ASSIGN_OR_RETURN(std::optional<int64_t> remote_spin_env,
                           EnvInt(config::kRemoteSpinNs));
  if (remote_spin_env.has_value()) {
    options_.remote_spin_ns = *remote_spin_env;
  }
  if (options_.spin_ns < 0 || options_.remote_spin_ns < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("spin_ns ", options_.spin_ns, " and remote_spin_ns ",
                     options_.remote_spin_ns, " must be >= 0"));
  }
  return absl::OkStatus();
}

// Step 2: the processes of the launch: the caller's (a store's), else MPI's
// when launched by mpirun, else this process alone.
absl::Status RuntimeImpl::ConnectProcesses() {
  if (options_.processes != nullptr) {
    processes_ = options_.processes;
    if (remote_choice_ == RemoteTransport::kMpi) {
      return absl::InvalidArgumentError(absl::StrCat(
          "remote transport 'mpi' (RuntimeOptions::remote_transport or ",
          kRemoteTransportEnv,
          ") needs an MPI launch, but this launch's processes came from "
          "RuntimeOptions::processes: use 'tcp' or 'auto'"));
    }
  } else if (LaunchedByMpi()) {
    mpi_launch_ = true;
    MESHDMA_ASSIGN_OR_RETURN(processes_, ConnectMpiProcesses());
  } else {
    processes_ = MakeSingleProcessGroup();
  }
  return absl::OkStatus();
}

// Step 3: the host topology and the launch's global device order.
absl::Status RuntimeImpl::DiscoverLaunch() {
  MESHDMA_ASSIGN_OR_RETURN(HostTopology topo, HostTopology::Discover());
  topology_ = std::make_unique<HostTopology>(std::move(topo));
  MESHDMA_ASSIGN_OR_RETURN(
      Launch launch,
      Launch::Discover(*topology_, options_.launch, *processes_));
  launch_ = std::make_unique<Launch>(std::move(launch));
  const int n = launch_->num_devices();
  heap_base_of_device_.assign(n, nullptr);
  transport_of_device_.assign(n, nullptr);
  local_of_global_.assign(n, -1);
  return absl::OkStatus();
}

// Step 4: the user's observer, behind the timeline tracer when tracing.
absl::Status RuntimeImpl::StartObservation() {
  observer_ = options_.observer;
  trace_path_ = options_.trace_path.value_or(
      base_internal::EnvString(config::kTrace).value_or(""));
  if (!trace_path_.empty()) {
    MESHDMA_RETURN_IF_ERROR(
        TimelineTracer::CheckWritable(trace_path_, *processes_));
    MESHDMA_ASSIGN_OR_RETURN(std::optional<int64_t> max_events,
                             base_internal::EnvInt(config::kTraceMaxEvents));
    tracer_ = std::make_unique<TimelineTracer>(
        *launch_, options_.observer,
        max_events.value_or(TimelineTracer::kDefaultMaxEvents));
    observer_ = tracer_.get();
  }
  MESHDMA_ASSIGN_OR_RETURN(std::optional<std::string> check_env,
                           base_internal::EnvChoice(config::kCheck));
  std::optional<CheckMode> check_from_env;
  if (check_env.has_value()) {
    check_from_env =
        *check_env == "races" ? CheckMode::kRaces : CheckMode::kOff;
  }
  const bool races =
      base_internal::Resolve(options_.check, check_from_env, CheckMode::kOff) ==
      CheckMode::kRaces;
  if (races) {
    // A race is reported as a zero-length span on the device that saw it.
    race_checker_ = std::make_unique<RaceChecker>(
        launch_->num_devices(), [this](int device, const std::string& text) {
          if (observer_ == nullptr) return;
          const std::string name =
              absl::StrCat("data race: ", text.substr(0, text.find('\n')));
          observer_->OnSpanBegin(device, name);
          observer_->OnSpanEnd(device, name);
        });
  }
  return absl::OkStatus();
}

// Step 6: copy workers, in the asynchronous DMA mode only.
void RuntimeImpl::StartCopyEngine() {
  if (dma_mode_ != DmaMode::kAsync) return;
  const int local = static_cast<int>(devices_.size());
  const int threads = options_.copy_threads > 0 ? options_.copy_threads
                                                : std::max(1, local / 2);
  copy_engine_ =
      std::make_unique<CopyEngine>(threads, options_.copy_chunk_bytes);
}

// Step 7: device threads, pinned to their cores.
void RuntimeImpl::StartDeviceThreads() {
  for (int i = 0; i < static_cast<int>(devices_.size()); ++i) {
    threads_.emplace_back([this, i] { DeviceThreadMain(i); });
    base_internal::NameThread(
        threads_.back(),
        absl::StrCat("meshdma-dev", devices_[i]->global_index()));
  }
}

// Every process must have the same heap size (offsets are symmetric, and a
// peer's DMA is checked against this process's heap only) and the same
// checked mode (its clocks travel with signals and DMAs).
absl::Status RuntimeImpl::AgreeOnHeaps() {
  MESHDMA_ASSIGN_OR_RETURN(
      std::vector<std::string> each,
      processes_->AllGather(absl::StrCat(
          heap_bytes_, race_checker_ != nullptr ? " races" : " off")));
  // Each entry is "<heap bytes> <races|off>".
  std::vector<std::string> heaps, checks;
  for (size_t q = 0; q < each.size(); ++q) {
    const std::vector<std::string> v = absl::StrSplit(each[q], ' ');
    heaps.push_back(v[0]);
    checks.push_back(v[1]);
  }
  auto per_rank = [](const std::vector<std::string>& values) {
    std::vector<std::string> lines;
    for (size_t q = 0; q < values.size(); ++q) {
      lines.push_back(absl::StrCat("rank ", q, ": ", values[q]));
    }
    return absl::StrJoin(lines, ", ");
  };
  for (size_t q = 1; q < each.size(); ++q) {
    if (heaps[q] != heaps[0]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "heap sizes differ between processes (bytes per device; set "
          "RuntimeOptions::heap_bytes or ",
          kHeapBytesEnv, " the same on every rank): ", per_rank(heaps)));
    }
    if (checks[q] != checks[0]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checked mode differs between processes (set "
          "RuntimeOptions::check or ",
          kCheckEnv, " the same on every rank): ", per_rank(checks)));
    }
  }
  return absl::OkStatus();
}

// Step 5: heaps and transports. Local devices' heaps are one region:
// private memory, or a shared-memory segment that same-host peers map.
absl::StatusOr<RemoteTransport> RuntimeImpl::AgreeOnRemoteTransport(
    bool one_machine) {
  // Automatic: MPI where its path is not TCP: an RDMA device on this host,
  // or processes that share this machine through MPI's shared memory
  // (simulated hosts). meshdma's own TCP connections otherwise.
  RemoteTransport mine = remote_choice_;
  const bool told = mine != RemoteTransport::kAuto;
  if (!told) {
    mine = mpi_launch_ && (HostHasRdmaDevice() ||
                           (one_machine && MpiUsesSharedMemoryWithinMachine()))
               ? RemoteTransport::kMpi
               : RemoteTransport::kTcp;
  }
  const char* name = mine == RemoteTransport::kTcp ? "tcp" : "mpi";
  // One transport for all: a host that prefers MPI decides for every host;
  // choices set by hand must agree.
  MESHDMA_ASSIGN_OR_RETURN(
      std::vector<std::string> all,
      processes_->AllGather(absl::StrCat(told ? "told:" : "auto:", name)));
  bool any_mpi = false;
  std::set<std::string> told_names;
  for (const std::string& choice : all) {
    any_mpi |= absl::EndsWith(choice, ":mpi");
    if (absl::StartsWith(choice, "told:")) told_names.insert(choice.substr(5));
  }
  if (told_names.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the processes chose different remote transports (",
        absl::StrJoin(all, ", "),
        " by rank; RuntimeOptions::remote_transport "
        "or ",
        kRemoteTransportEnv, "): every process must choose the same"));
  }
  if (told_names.size() == 1) {
    return *told_names.begin() == "tcp" ? RemoteTransport::kTcp
                                        : RemoteTransport::kMpi;
  }
  return any_mpi ? RemoteTransport::kMpi : RemoteTransport::kTcp;
}

absl::Status RuntimeImpl::ExchangeProcessIdentities() {
  const ProcessIdentity me = ProcessIdentity::Self();
  const int64_t mine[2] = {me.pid, static_cast<int64_t>(me.start_ticks)};
  MESHDMA_ASSIGN_OR_RETURN(
      std::vector<int64_t> published,
      processes_->BarrierExchange("process identities", wait_timeout_, mine));
  identity_of_rank_.resize(launch_->num_processes());
  for (size_t r = 0; r < identity_of_rank_.size(); ++r) {
    identity_of_rank_[r] = {published[2 * r],
                            static_cast<uint64_t>(published[2 * r + 1])};
  }
  return absl::OkStatus();
}

absl::Status RuntimeImpl::InitHeaps() {
  const int rank = launch_->rank();
  // Processes sharing this host (other than this one) reach our heaps through
  // shared memory; without such peers private memory suffices. The tag
  // broadcast and the barriers are collective over all processes, whether or
  // not a process has host peers.
  std::vector<int> host_peers;
  for (int r = 0; r < launch_->num_processes(); ++r) {
    if (r != rank && launch_->SameHost(r, rank)) host_peers.push_back(r);
  }
  // Step 1: one tag for the job's segments and boards.
  MESHDMA_RETURN_IF_ERROR(AgreeOnHeaps());
  MESHDMA_ASSIGN_OR_RETURN(const uint64_t tag, AgreeOnJobTag());
  // Step 2: this process's heaps and devices. Checked mode: each segment
  // ends with its process's clock mailbox.
  const size_t mailbox_bytes =
      race_checker_ != nullptr && !host_peers.empty()
          ? ClockMailbox::BytesFor(launch_->num_devices())
          : 0;
  MESHDMA_RETURN_IF_ERROR(MapOwnHeaps(tag, !host_peers.empty(), mailbox_bytes));
  CreateLocalDevices();
  // Step 3: the heaps of the other processes of this host.
  MESHDMA_RETURN_IF_ERROR(
      processes_->Barrier("heap set-up (segments created)", wait_timeout_));
  std::vector<ClockMailbox*> mailbox_of_device(launch_->num_devices(), nullptr);
  const absl::Status mapped =
      MapPeerHeaps(tag, host_peers, mailbox_bytes, mailbox_of_device);
  // Every peer has mapped every segment: the names can go, so nothing is
  // left behind in /dev/shm however the job ends.
  MESHDMA_RETURN_IF_ERROR(
      processes_->Barrier("heap set-up (segments mapped)", wait_timeout_));
  if (own_segment_ != nullptr) own_segment_->Unlink();
  MESHDMA_RETURN_IF_ERROR(mapped);
  if (launch_->num_processes() > 1) {
    MESHDMA_RETURN_IF_ERROR(ExchangeProcessIdentities());
  }
  // Step 4: the transport to other hosts, checked mode's mailboxes and the
  // hang board.
  MESHDMA_RETURN_IF_ERROR(StartRemoteTransport());
  if (race_checker_ != nullptr && own_mailbox_ != nullptr) {
    race_checker_->AttachMailboxes(own_mailbox_.get(),
                                   std::move(mailbox_of_device));
  }
  hang_board_ =
      std::make_unique<HangBoard>(tag, rank, launch_->num_processes());
  PublishHangState();
  LogLaunch();
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> RuntimeImpl::AgreeOnJobTag() {
  std::string job_tag(sizeof(uint64_t), '\0');
  if (launch_->rank() == 0) {
    const uint64_t tag = std::random_device{}() ^ (uint64_t(getpid()) << 32);
    std::memcpy(job_tag.data(), &tag, sizeof(tag));
  }
  MESHDMA_RETURN_IF_ERROR(processes_->Broadcast(job_tag, 0));
  uint64_t tag = 0;
  std::memcpy(&tag, job_tag.data(), sizeof(tag));
  return tag;
}

absl::Status RuntimeImpl::MapOwnHeaps(uint64_t tag, bool shared,
                                      size_t mailbox_bytes) {
  const size_t devices = launch_->DevicesOfRank(launch_->rank()).size();
  local_heaps_bytes_ = static_cast<size_t>(heap_bytes_) * devices;
  if (!shared) {
    void* p = mmap(nullptr, local_heaps_bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot reserve ", local_heaps_bytes_, " bytes of heap for ", devices,
          " devices: ", std::strerror(errno)));
    }
    local_heaps_ = static_cast<std::byte*>(p);
    return absl::OkStatus();
  }
  MESHDMA_ASSIGN_OR_RETURN(
      own_segment_,
      ShmSegment::Create(ShmSegment::NameFor(tag, launch_->rank()),
                         local_heaps_bytes_ + mailbox_bytes));
  local_heaps_ = own_segment_->data();
  if (mailbox_bytes > 0) {
    own_mailbox_ = std::make_unique<ClockMailbox>(
        local_heaps_ + local_heaps_bytes_, launch_->num_devices());
    own_mailbox_->Format();
  }
  return absl::OkStatus();
}

void RuntimeImpl::CreateLocalDevices() {
  const std::vector<int> mine = launch_->DevicesOfRank(launch_->rank());
  const size_t per_device = static_cast<size_t>(heap_bytes_);
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
}

absl::Status RuntimeImpl::MapPeerHeaps(
    uint64_t tag, const std::vector<int>& host_peers, size_t mailbox_bytes,
    std::vector<ClockMailbox*>& mailbox_of_device) {
  if (host_peers.empty()) return absl::OkStatus();
  const size_t per_device = static_cast<size_t>(heap_bytes_);
  transports_.push_back(std::make_unique<DirectTransport>("shm", this));
  Transport* shm = transports_.back().get();
  for (int r : host_peers) {
    const std::vector<int> theirs = launch_->DevicesOfRank(r);
    const size_t heaps = per_device * theirs.size();
    MESHDMA_ASSIGN_OR_RETURN(
        std::unique_ptr<ShmSegment> segment,
        ShmSegment::Open(ShmSegment::NameFor(tag, r), heaps + mailbox_bytes));
    ClockMailbox* mailbox = nullptr;
    if (mailbox_bytes > 0) {
      peer_mailboxes_.push_back(std::make_unique<ClockMailbox>(
          segment->data() + heaps, launch_->num_devices()));
      mailbox = peer_mailboxes_.back().get();
    }
    for (size_t i = 0; i < theirs.size(); ++i) {
      heap_base_of_device_[theirs[i]] = segment->data() + i * per_device;
      transport_of_device_[theirs[i]] = shm;
      mailbox_of_device[theirs[i]] = mailbox;
    }
    peer_segments_.push_back(std::move(segment));
  }
  return absl::OkStatus();
}

// Step 5b: the transport to other processes that memory does not reach (and
// without MPI, the path for aborts), and which devices it serves.
absl::Status RuntimeImpl::StartRemoteTransport() {
  // Devices no transport above reaches are on other hosts; copies of their
  // call notes exist before any can arrive.
  bool other_hosts = false;
  mirrored_notes_.resize(launch_->num_devices());
  for (int g = 0; g < launch_->num_devices(); ++g) {
    if (transport_of_device_[g] != nullptr) continue;
    other_hosts = true;
    mirrored_notes_[g] = std::make_unique<MirroredNote>();
    if (std::find(remote_ranks_.begin(), remote_ranks_.end(), RankOf(g)) ==
        remote_ranks_.end()) {
      remote_ranks_.push_back(RankOf(g));
    }
  }
  const std::string& my_machine =
      launch_->processes()[launch_->rank()].hostname;
  bool one_machine = true;
  for (const ProcessInfo& p : launch_->processes()) {
    one_machine &= p.hostname == my_machine;
  }
  if (other_hosts) {
    MESHDMA_ASSIGN_OR_RETURN(remote_choice_,
                             AgreeOnRemoteTransport(one_machine));
  }
  // Without MPI, processes of one host still need a path for aborts: the
  // TCP connections, which then carry nothing else.
  const bool tcp_for_aborts = !mpi_launch_ && launch_->num_processes() > 1;
  if ((other_hosts && remote_choice_ == RemoteTransport::kTcp) ||
      tcp_for_aborts) {
    // One transport carries every message between processes, so that a
    // put and a later signal to the same process stay in order.
    MESHDMA_ASSIGN_OR_RETURN(
        std::unique_ptr<PolledTransport> tcp,
        MakeSocketTransport(
            this, *processes_, one_machine, wait_timeout_,
            TcpCongestion{tcp_congestion_asked_, tcp_congestion_source_},
            &tcp_congestion_running_));
    remote_transport_ = tcp.get();
    transports_.push_back(std::move(tcp));
  } else if (launch_->num_processes() > 1) {
    mpi_limits_ = MpiLimits();
    std::unique_ptr<PolledTransport> mpi =
        MakeMpiTransport(this, *processes_, mpi_limits_);
    remote_transport_ = mpi.get();
    transports_.push_back(std::move(mpi));
  }
  bool remote_peers = false;
  for (int g = 0; g < launch_->num_devices(); ++g) {
    if (transport_of_device_[g] == nullptr && remote_transport_ != nullptr) {
      transport_of_device_[g] = remote_transport_;
      remote_peers = true;
    }
  }
  remote_peers_.store(remote_peers, std::memory_order_relaxed);
  return absl::OkStatus();
}

// The MPI transport's piece sizes towards each process: puts in pieces
// unless told otherwise. Towards a process of this machine that MPI reaches
// through shared memory, a long message moves in one copy, but one past
// MPI's eager size waits for the receiver to match it: pieces of that size
// up to kDefaultMpiSharedMemoryPiecedBytes (none where the size is unknown).
// Not on an oversubscribed machine: there each piece costs its receiver a
// poll that yields the core, and the pieces were slower than the rendezvous
// at 8-32 KiB in every round (`mpirun -np 4 --oversubscribe -x
// MESHDMA_HOSTS=2 meshdma-bench --collective all_reduce -b 1K -e 64K -f 2`).
std::vector<MpiPeerLimits> RuntimeImpl::MpiLimits() const {
  std::vector<MpiPeerLimits> limits(launch_->num_processes());
  const std::string& my_machine =
      launch_->processes()[launch_->rank()].hostname;
  const bool mpi_shares_memory = MpiUsesSharedMemoryWithinMachine();
  const int64_t eager_bytes = MpiSharedMemoryEagerBytes();
  const int64_t network_piece =
      MpiPieceBytesWithin(std::numeric_limits<int64_t>::max());
  for (int r = 0; r < launch_->num_processes(); ++r) {
    if (r == launch_->rank()) continue;
    const bool shared =
        mpi_shares_memory && launch_->processes()[r].hostname == my_machine;
    MpiPeerLimits& l = limits[r];
    l.piece_bytes = network_piece;
    l.pieced_bytes = kDefaultMpiPiecedBytes;
    if (shared) {
      // Two messages on MPI's fastest path instead of one just past it:
      // only oversubscribed, where that saved 1.5 us of an 8 us
      // all-reduce; with a core each, the second message cost 0.1 us
      // (`mpirun -np 4 --oversubscribe -x MESHDMA_HOSTS=2 meshdma-bench
      // --collective all_reduce -b 128 -e 512 -i 64`).
      l.fast_bytes = oversubscribed_ ? MpiSharedMemoryFastBytes() : 0;
      l.piece_bytes =
          eager_bytes > 0 ? MpiPieceBytesWithin(eager_bytes) : network_piece;
      l.pieced_bytes = eager_bytes > 0 && !oversubscribed_
                           ? kDefaultMpiSharedMemoryPiecedBytes
                           : 0;
    }
    l.pieced_bytes = options_.mpi_pieced_bytes.value_or(l.pieced_bytes);
  }
  return limits;
}

// MESHDMA_DEBUG=INFO: the launch (rank 0), this process's settings and the
// path to every peer device, once per runtime.
void RuntimeImpl::LogLaunch() const {
  if (!LogEnabled(LogLevel::kInfo, kLogInit | kLogTransport)) return;
  if (launch_->rank() == 0) MESHDMA_LOG(kInfo, kLogInit, launch_->Describe());
  MESHDMA_LOG(
      kInfo, kLogInit, "rank ", launch_->rank(), ": DMA mode ",
      dma_mode_ == DmaMode::kAsync ? "async" : "eager", ", heap ", heap_bytes_,
      " bytes per device, wait timeout ", absl::FormatDuration(wait_timeout_),
      ", spin ", options_.spin_ns, " ns",
      RemotePeers() ? absl::StrCat(" (", options_.remote_spin_ns,
                                   " ns while devices on other hosts exist)")
                    : "",
      oversubscribed_
          ? absl::StrCat(" (", DeviceThreadsOnMachine(), " device threads on ",
                         MachineCores(), " cores, ", UsableCores(),
                         " usable here: waits yield while they spin)")
          : "");
  std::map<std::string, std::vector<int>> by_path;
  for (int g = 0; g < launch_->num_devices(); ++g) {
    if (transport_of_device_[g] != nullptr) {
      by_path[std::string(transport_of_device_[g]->name())].push_back(g);
    }
  }
  for (const auto& [path, devices] : by_path) {
    MESHDMA_LOG(kInfo, kLogTransport, "rank ", launch_->rank(),
                " reaches devices ", absl::StrJoin(devices, ","), " by ", path);
  }
}

void RuntimeImpl::DeviceThreadMain(int local_index) {
  Device* device = devices_[local_index].get();
  if (options_.pin_threads) {
    const int core = launch_->devices()[device->global_index()].core;
    if (core >= 0) {
      absl::Status s = topology_->PinThreadToCore(core);
      if (!s.ok()) {
        MESHDMA_LOG(kWarn, kLogTopology, device->Name(), ": ", s.message());
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

void RuntimeImpl::OnCallNote(int src_device,
                             std::span<const int64_t, kCallNoteWords> words) {
  if (src_device < 0 ||
      src_device >= static_cast<int>(mirrored_notes_.size()) ||
      mirrored_notes_[src_device] == nullptr) {
    return;  // Not a device of another host.
  }
  MirroredNote& mirror = *mirrored_notes_[src_device];
  const CallNoteView view = CallNoteView::FromWords(words);
  std::lock_guard<std::mutex> lock(mirror_mu_);
  if (view.run < mirror.run ||
      (view.run == mirror.run && view.version <= mirror.version)) {
    return;
  }
  mirror.run = view.run;
  mirror.version = view.version;
  mirror.note.Store(view);
}

void RuntimeImpl::SendCallNote(int global_device,
                               std::span<const int64_t, kCallNoteWords> words) {
  if (remote_transport_ == nullptr) return;
  for (int rank : remote_ranks_) {
    remote_transport_->SendCallNote(rank, global_device, words);
  }
}

int RuntimeImpl::RankOf(int global_device) const {
  return launch_->devices()[global_device].rank;
}

void RuntimeImpl::RemoteDeviceSleeping() const {
  if (remote_transport_ != nullptr) {
    remote_transport_->progress().DeviceSleeping();
  }
}

bool RuntimeImpl::IsLocalDevice(int global_device) const {
  return LocalDevice(global_device) != nullptr;
}

void RuntimeImpl::CompleteDma(std::unique_ptr<DmaOp> op) {
  Device* issuer = op->issuer;
  issuer->CompleteDma(std::move(op));
}

void RuntimeImpl::AbandonDma(std::unique_ptr<DmaOp> op) {
  Device* issuer = op->issuer;
  issuer->AbandonDma(std::move(op));
}

bool RuntimeImpl::DevicesWaiting() const {
  return waiting_devices_.load(std::memory_order_relaxed) > 0;
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
  // Step 1: a Run may start here (not after Shutdown, not inside a Run).
  if (shut_down_) {
    return absl::FailedPreconditionError("Runtime::Run after Shutdown");
  }
  if (Device* d = CurrentDevice()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Runtime::Run called from inside Run on ", d->Name(),
        ": the function passed to Run already runs on every device"));
  }
  // Step 2: begin the Run (recovering from a failed one) on a mesh of this
  // launch's devices. Checked mode forgets the previous Run before the
  // processes meet: a
  // peer that leaves the barrier first may already send this Run's clocks.
  if (race_checker_ != nullptr) race_checker_->Reset();
  MESHDMA_RETURN_IF_ERROR(BeginRun());
  for (int g : mesh.devices()) {
    if (g < 0 || g >= launch_->num_devices()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mesh ", mesh.ToString(), " names global device ", g,
          " but the launch has ", launch_->num_devices(), " devices"));
    }
  }
  // Step 3: every local device of the mesh runs `fn` on its thread.
  std::vector<absl::Status> results(devices_.size());
  auto task = [&](int local) {
    Device* device = devices_[local].get();
    auto logical = mesh.LogicalIdOfGlobal(device->global_index());
    if (!logical.ok()) return;  // Not in this mesh.
    SetCurrentDevice(device);
    device->EnterRun(&mesh, *logical);
    absl::Status s = fn ? fn()
                        : absl::InvalidArgumentError(
                              absl::StrCat("Runtime::Run on ", device->Name(),
                                           ": the function to run is empty"));
    // A failure is announced before the scopes close: peers stop at once,
    // and memory that their late DMAs and signals may still reach is left
    // to the recovery to zero.
    auto announce = [&] {
      Abort(absl::StrCat(device->Name(), " failed: ",
                         s.message().substr(0, s.message().find('\n'))));
    };
    if (!s.ok()) announce();
    absl::Status persistent = device->ReleasePersistent(/*run_hooks=*/s.ok());
    absl::Status exit = device->PopScope();
    if (s.ok()) s = persistent;
    if (s.ok()) s = exit;
    device->ExitRun();
    SetCurrentDevice(nullptr);
    if (!s.ok()) announce();  // No-op when already aborted.
    results[local] = std::move(s);
  };
  {
    std::lock_guard<std::mutex> lock(task_mu_);
    task_ = task;
    tasks_pending_ = static_cast<int>(devices_.size());
    ++task_generation_;
  }
  g_running.store(this);
  task_cv_.notify_all();
  {
    std::unique_lock<std::mutex> lock(task_mu_);
    done_cv_.wait(lock, [&] { return tasks_pending_ == 0; });
    task_ = nullptr;
  }
  g_running.store(nullptr);
  // Step 4: release persistent memory; one status for the Run. No local
  // device writes any more; peers' writes into persistent memory
  // were ordered by the channels' credits. After a failure the next Run's
  // recovery zeroes it, once every late DMA has drained.
  if (!aborted()) {
    for (auto& d : devices_) d->ZeroPersistent();
  }
  return RunStatus(mesh, results);
}

absl::Status RuntimeImpl::RunStatus(const Mesh& mesh,
                                    const std::vector<absl::Status>& results) {
  // Step 1: root causes before the waits they aborted.
  std::vector<std::string> lines;
  absl::StatusCode code = absl::StatusCode::kOk;
  bool timed_out = false, abandoned = false;
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < results.size(); ++i) {
      const absl::Status& s = results[i];
      if (s.ok() || (s.code() == absl::StatusCode::kAborted) != (pass == 1)) {
        continue;
      }
      if (code == absl::StatusCode::kOk) code = s.code();
      timed_out = timed_out || absl::IsDeadlineExceeded(s);
      abandoned = abandoned || absl::IsAborted(s);
      lines.push_back(absl::StrCat(devices_[i]->Name(), ": ", s.message()));
    }
  }
  // Step 2: races that checked mode found in the Run (collective).
  if (race_checker_ != nullptr) {
    std::string races = GatherRaceReports();
    if (!races.empty()) {
      if (code == absl::StatusCode::kOk) code = kRaceCode;
      lines.push_back(std::move(races));
    }
  }
  if (lines.empty()) return absl::OkStatus();
  // Step 3: the mesh-wide picture of a timeout, where another process
  // timed out first and saved it.
  std::string message =
      absl::StrCat("Run on mesh ", mesh.ToString(), " failed on ", lines.size(),
                   " device(s):\n", absl::StrJoin(lines, "\n"));
  if ((timed_out || abandoned) && hang_board_ != nullptr &&
      !absl::StrContains(message, kMeshReportHeading)) {
    // A process that timed out itself may be ahead of the first one's
    // report; an abandoned wait heard of the failure after it was saved.
    const std::string mesh_report = hang_board_->SavedReport(
        timed_out ? fault_grace() : absl::ZeroDuration());
    if (!mesh_report.empty()) absl::StrAppend(&message, "\n", mesh_report);
  }
  return absl::Status(code, message);
}

std::string RuntimeImpl::GatherRaceReports() {
  if (processes_->size() == 1) {
    return std::string(race_checker_->TakeReport().message());
  }
  // Once every process is here, every device's signals and DMAs of this Run
  // are complete, so their clocks have arrived (or wait in the mailbox that
  // TakeReport drains).
  absl::Status synced = SyncProcesses("checked mode: gathering race reports");
  const std::string mine(race_checker_->TakeReport().message());
  if (!synced.ok()) {
    return absl::StrCat(mine, mine.empty() ? "" : "\n",
                        "checked mode: the race reports of the other "
                        "processes are missing: ",
                        synced.message());
  }
  absl::StatusOr<std::vector<std::string>> all = processes_->AllGather(mine);
  if (!all.ok()) return mine;
  std::vector<std::string> parts;
  for (size_t r = 0; r < all->size(); ++r) {
    if (!(*all)[r].empty()) {
      parts.push_back(absl::StrCat("rank ", r, ": ", (*all)[r]));
    }
  }
  return absl::StrJoin(parts, "\n");
}

// Every process finishes the previous Run before any device starts this one:
// the reserved barrier semaphores are shared by all Runs, and a process
// holding no device of the previous mesh must not signal a device that is
// still in that mesh's barrier.
absl::Status RuntimeImpl::BeginRun() {
  if (!lost_.ok()) return lost_;
  // Step 1: the barrier, carrying [failed, heap top, heap bottom] of each
  // process: whether any of its devices failed (or heard of a failure), and
  // the heap its devices have used.
  int64_t mine[3] = {aborted() ? 1 : 0, kReservedHeapBytes, heap_bytes_};
  for (const auto& d : devices_) {
    mine[1] = std::max(mine[1], d->touched_top());
    mine[2] = std::min(mine[2], d->touched_bottom());
  }
  absl::StatusOr<std::vector<int64_t>> votes =
      processes_->BarrierExchange("Runtime::Run", wait_timeout_, mine);
  if (!votes.ok()) return Lose(votes.status());
  // Step 2: every process sees the same votes, so all recover, or none.
  bool failed = false;
  int64_t top = kReservedHeapBytes, bottom = heap_bytes_;
  for (size_t i = 0; i + 2 < votes->size(); i += 3) {
    failed = failed || (*votes)[i] != 0;
    top = std::max(top, (*votes)[i + 1]);
    bottom = std::min(bottom, (*votes)[i + 2]);
  }
  if (!failed) return absl::OkStatus();
  absl::Status recovered = Recover(top, bottom);
  if (!recovered.ok()) return Lose(recovered);
  return absl::OkStatus();
}

absl::Status RuntimeImpl::Recover(int64_t zero_top, int64_t zero_bottom) {
  MESHDMA_LOG(kInfo, kLogInit, "rank ", launch_->rank(),
              ": recovering from a failed Run (", abort_reason(), ")");
  // Step 1: this process's DMAs have completed.
  MESHDMA_RETURN_IF_ERROR(DrainLocalDmas());
  // Step 2: nothing any process sent can still land here: each peer's flush
  // marker, sent after its own step 1, has been handled.
  for (auto& t : transports_) {
    MESHDMA_RETURN_IF_ERROR(t->Quiesce(wait_timeout_));
  }
  // Step 3: late data and counts of the failed Run are zeroed; scopes,
  // persistent memory and reserved semaphores start as at start-up.
  for (auto& d : devices_) d->ResetAfterFailure(zero_top, zero_bottom);
  // Step 4: the failure is forgotten (waits no longer abort; the next
  // timeout prints the mesh-wide report again).
  ClearAbort();
  if (hang_board_ != nullptr) hang_board_->ForgetFirst();
  PublishHangState();
  // Checked mode forgets what late arrivals of the failed Run recorded after
  // the Run's first reset (their clocks are the failed Run's), once every
  // process has finished its steps 1 and 2 and so posted all of them.
  if (race_checker_ != nullptr) {
    MESHDMA_RETURN_IF_ERROR(SyncProcesses("checked mode: recovery"));
    race_checker_->DrainMailbox();
    race_checker_->Reset();
  }
  // Step 5: no process starts the new Run, and signals a peer, before every
  // process has reset.
  return SyncProcesses("Runtime::Run (recovery)");
}

absl::Status RuntimeImpl::DrainLocalDmas() {
  auto drained = [this] {
    for (const auto& d : devices_) {
      if (d->num_inflight() != 0) return false;
    }
    return copy_engine_ == nullptr || copy_engine_->Idle();
  };
  const base_internal::Deadline deadline =
      base_internal::Deadline::After(wait_timeout_);
  while (!drained()) {
    if (deadline.Expired()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "recovery on rank ", launch_->rank(), ": DMAs of the failed Run did ",
          "not complete within ", absl::FormatDuration(wait_timeout_), ":\n",
          DescribeLocalDevices()));
    }
    bool moved = PollRemote();
    if (copy_engine_ != nullptr) moved = copy_engine_->HelpOnce() || moved;
    if (!moved) absl::SleepFor(absl::Microseconds(20));
  }
  return absl::OkStatus();
}

void RuntimeImpl::StartPeerWatch() {
  if (identity_of_rank_.empty()) return;  // One process.
  const std::string& my_machine =
      launch_->processes()[launch_->rank()].hostname;
  std::vector<PeerWatch::Peer> peers;
  for (int r = 0; r < launch_->num_processes(); ++r) {
    if (r != launch_->rank() &&
        launch_->processes()[r].hostname == my_machine) {
      peers.push_back({r, identity_of_rank_[r]});
    }
  }
  peer_watch_ = PeerWatch::Start(
      peers, [this](int rank, int64_t pid) { OnPeerExited(rank, pid); });
  MESHDMA_LOG(
      kInfo, kLogInit, "rank ", launch_->rank(), " watches ",
      peer_watch_ != nullptr
          ? absl::StrCat("rank(s) ",
                         absl::StrJoin(peer_watch_->watched_ranks(), ", "),
                         " for exit")
          : std::string("no process for exit"),
      " (", peers.size(), " other process(es) on this machine)");
}

void RuntimeImpl::OnPeerExited(int rank, int64_t pid) {
  const std::string reason =
      absl::StrCat("rank ", launch_->rank(), ": rank ", rank, " (pid ", pid,
                   ", on this machine) exited while the launch ran");
  // Processes on other machines hear of it through the transport to them,
  // while it is still in use; then the launch is marked as having lost a
  // process, so that nothing waits for that one any more.
  Abort(reason, /*notify_peers=*/true);
  processes_->MarkPeersLost(reason);
}

void RuntimeImpl::OnExitDuringRun() {
  const std::string reason = absl::StrCat(
      "rank ", launch_->rank(), " (pid ", getpid(),
      ") exited while Runtime::Run was in progress (exit() called on a "
      "device); the launch is aborted");
  // exit() has already destroyed the calling thread's thread_local objects
  // (the transports' spare send buffers among them): a fresh thread tells
  // the peers.
  std::thread tell([&] {
    Abort(reason, /*notify_peers=*/true);
    processes_->MarkPeersLost(reason);
  });
  tell.join();
  // Its device threads still run: neither MPI's finalisation (a barrier the
  // others never reach) nor the static destructors may run under them.
  std::fprintf(stderr, "meshdma: %s; exiting with status 1\n", reason.c_str());
  std::fflush(stderr);
  _exit(1);
}

void RuntimeImpl::ClearAbort() {
  std::lock_guard<std::mutex> lock(abort_mu_);
  abort_reason_.clear();
  aborted_.store(false, std::memory_order_release);
}

absl::Status RuntimeImpl::Lose(const absl::Status& cause) {
  lost_ = absl::FailedPreconditionError(absl::StrCat(
      "Runtime::Run refused: the launch cannot recover (", cause.message(),
      "); every later Run fails the same way. Destroy the runtime and start "
      "a new launch"));
  Abort(std::string(lost_.message()), /*notify_peers=*/false);
  return lost_;
}

absl::Status RuntimeImpl::SyncProcesses(absl::string_view what) {
  return processes_->Barrier(what, wait_timeout_);
}

void RuntimeImpl::Abort(const std::string& reason, bool notify_peers) {
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (aborted_.load()) return;
    abort_reason_ = reason;
    aborted_.store(true, std::memory_order_release);
  }
  if (notify_peers && remote_transport_ != nullptr) {
    remote_transport_->BroadcastAbort(reason);
  }
}

std::string RuntimeImpl::abort_reason() const {
  std::lock_guard<std::mutex> lock(abort_mu_);
  return abort_reason_;
}

void RuntimeImpl::PublishHangState() {
  if (hang_board_ == nullptr) return;
  ProcessHangState state;
  state.rank = launch_->rank();
  state.pid = getpid();
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  state.host = host;
  for (auto& d : devices_) state.devices.push_back(d->HangState());
  std::lock_guard<std::mutex> lock(hang_mu_);
  state.written_ns = base_internal::MonotonicNanos();
  hang_board_->Publish(state);
}

absl::Duration RuntimeImpl::fault_grace() const {
  return std::min(wait_timeout_ / 10, kMaxFaultGrace);
}

absl::Duration RuntimeImpl::shutdown_timeout() const {
  return aborted() ? std::min(wait_timeout_, kMaxAbortedShutdown)
                   : wait_timeout_;
}

std::string RuntimeImpl::MeshHangReport(int device, int64_t since_ns) {
  if (hang_board_ == nullptr) return "";
  PublishHangState();
  if (!hang_board_->ClaimFirst()) return "";
  std::string report = hang_board_->Report(device, since_ns, fault_grace());
  hang_board_->SaveReport(report);
  LogError(report);
  if (observer_ != nullptr) {
    const std::string name = "hang report: see stderr";
    observer_->OnSpanBegin(device, name);
    observer_->OnSpanEnd(device, name);
  }
  return report;
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
  // First: the other processes may exit once every process has begun its
  // shutdown (the transports' shutdown is collective), and that is no loss.
  peer_watch_.reset();
  {
    std::lock_guard<std::mutex> lock(task_mu_);
    stopping_ = true;
  }
  task_cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
  copy_engine_.reset();
  absl::Status status;
  if (remote_transport_ != nullptr) status = remote_transport_->Shutdown();
  transports_.clear();
  remote_transport_ = nullptr;
  if (race_checker_ != nullptr) race_checker_->DetachMailboxes();
  peer_mailboxes_.clear();
  own_mailbox_.reset();
  peer_segments_.clear();
  if (own_segment_ != nullptr) {
    own_segment_.reset();
  } else if (local_heaps_ != nullptr) {
    munmap(local_heaps_, local_heaps_bytes_);
  }
  local_heaps_ = nullptr;
  devices_.clear();
  hang_board_.reset();  // Removes this process's board.
  if (tracer_ != nullptr) {
    absl::Status written = tracer_->Write(trace_path_, *processes_);
    if (status.ok()) status = written;
  }
  processes_.reset();
  g_runtime_alive.store(false);
  return status;
}

}  // namespace meshdma::dma_internal
