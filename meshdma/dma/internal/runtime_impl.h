// The runtime's internals: it owns the processes, the launch, the heaps, the
// transports, the copy engine and the device threads. Devices use it
// directly; transports only through `TransportHost`.
#ifndef MESHDMA_DMA_INTERNAL_RUNTIME_IMPL_H_
#define MESHDMA_DMA_INTERNAL_RUNTIME_IMPL_H_

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "meshdma/dma/check/hang_report.h"
#include "meshdma/dma/check/race_checker.h"
#include "meshdma/dma/internal/copy_engine.h"
#include "meshdma/dma/internal/device.h"
#include "meshdma/dma/internal/peer_watch.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/transport/mpi/mpi_path.h"
#include "meshdma/dma/transport/transport.h"
#include "meshdma/topology/process_group.h"

namespace meshdma::dma_internal {

class ShmSegment;
class TimelineTracer;

class RuntimeImpl : public TransportHost {
 public:
  static absl::StatusOr<std::unique_ptr<RuntimeImpl>> Create(
      RuntimeOptions options);
  ~RuntimeImpl() override;

  const Launch& launch() const { return *launch_; }
  const HostTopology& topology() const { return *topology_; }
  DmaMode dma_mode() const { return dma_mode_; }
  // "tcp" or "mpi" where devices of other hosts are reached; else "".
  std::string remote_transport_name() const {
    return RemotePeers() ? std::string(remote_transport_->name()) : "";
  }
  std::string tcp_congestion() const {
    return RemotePeers() ? tcp_congestion_running_ : "";
  }
  absl::Duration wait_timeout() const override { return wait_timeout_; }
  // The wait timeout, or once the launch is aborted the wait timeout up to
  // 1 s (docs/semantics.md, "Faults within the timeout").
  absl::Duration shutdown_timeout() const override;
  // How long the mesh-wide hang report of a timeout waits for fresh boards:
  // a tenth of the timeout, at most 0.5 s.
  absl::Duration fault_grace() const;
  int64_t async_min_bytes() const { return options_.async_min_bytes; }
  int64_t copy_chunk_bytes() const { return options_.copy_chunk_bytes; }
  int64_t spin_ns() const { return options_.spin_ns; }
  // How long a semaphore wait spins before it sleeps: longer in a launch with
  // devices on other hosts, where the spin progresses MPI.
  int64_t semaphore_spin_ns() const {
    return RemotePeers() ? std::max(options_.spin_ns, options_.remote_spin_ns)
                         : options_.spin_ns;
  }
  // More device threads than cores (this process's on the cores it is bound
  // to, or the launch's on this machine): a spinning wait then
  // yields its core on every poll, since the peer it waits for may be the
  // thread it keeps off a core (Open MPI's yield_when_idle).
  bool oversubscribed() const { return oversubscribed_; }
  Observer* observer() const { return observer_; }
  // Checked mode's race detector, or null when checked mode is off.
  RaceChecker* race_checker() const { return race_checker_.get(); }
  int num_local_devices() const { return static_cast<int>(devices_.size()); }
  // How puts to process `rank` are cut; zeros for this process, a rank out
  // of range, and a launch without the MPI path.
  MpiPeerLimits mpi_limits(int rank) const {
    return rank >= 0 && rank < static_cast<int>(mpi_limits_.size())
               ? mpi_limits_[rank]
               : MpiPeerLimits{};
  }

  // The transport that reaches `global_device`.
  Transport* TransportTo(int global_device) const {
    return transport_of_device_[global_device];
  }
  // Base address of `global_device`'s heap in this process, or null when it
  // lives on another host.
  std::byte* HeapBase(int global_device) const override {
    return heap_base_of_device_[global_device];
  }
  int64_t heap_bytes() const override { return heap_bytes_; }
  int RankOf(int global_device) const override;
  bool IsLocalDevice(int global_device) const override;
  void CompleteDma(std::unique_ptr<DmaOp> op) override;
  void AbandonDma(std::unique_ptr<DmaOp> op) override;
  bool DevicesWaiting() const override;
  bool RemotePeers() const override {
    return remote_peers_.load(std::memory_order_relaxed);
  }
  void OnCheckClock(int target_device, int issuer, int64_t sem_offset,
                    std::span<const uint32_t> clock, uint32_t dma_seq,
                    int64_t dst_offset, const ViewLayout* dst_layout,
                    int64_t elem_bytes) override {
    if (race_checker_ != nullptr) {
      race_checker_->OnRemoteArrival(target_device, issuer, sem_offset, clock,
                                     dma_seq, dst_offset, dst_layout,
                                     elem_bytes);
    }
  }
  void OnCallNote(int src_device,
                  std::span<const int64_t, kCallNoteWords> words) override;
  // The copy of the latest call note that `global_device`, a device of
  // another host, sent here (call_note.h); null for a device whose heap
  // this process maps.
  CallNote* MirroredCallNote(int global_device) const {
    return global_device >= 0 &&
                   global_device < static_cast<int>(mirrored_notes_.size()) &&
                   mirrored_notes_[global_device] != nullptr
               ? &mirrored_notes_[global_device]->note
               : nullptr;
  }
  // Sends the words of `global_device`'s call note to every process of
  // another host.
  void SendCallNote(int global_device,
                    std::span<const int64_t, kCallNoteWords> words);
  // The processes of this launch (host collectives).
  ProcessGroup& processes() const { return *processes_; }
  // The local device with this global index, or null.
  Device* LocalDevice(int global_device) const;
  CopyEngine* copy_engine() const { return copy_engine_.get(); }
  // Progresses the transport to other hosts from the calling (waiting)
  // device thread; true when anything moved. No-op without other hosts.
  bool PollRemote() const {
    return remote_transport_ != nullptr && remote_transport_->Poll();
  }
  // True when a poll of the transport to other hosts that finds nothing to
  // do yields the core itself (PolledTransport::PollYieldsWhenIdle).
  bool RemotePollYields() const {
    return remote_transport_ != nullptr &&
           remote_transport_->PollYieldsWhenIdle();
  }
  // The calling device stops polling the transport to other hosts to sleep:
  // tells that transport's progress policy.
  void RemoteDeviceSleeping() const;
  // True while the transport to other hosts has traffic outstanding.
  bool RemotePending() const {
    return remote_transport_ != nullptr && remote_transport_->HasPending();
  }
  uint64_t NextDmaId() { return next_dma_id_.fetch_add(1) + 1; }
  // The number of the current (or last) Run, the same on every process:
  // every process runs every Run. Read by device threads inside it.
  uint64_t run_generation() const { return task_generation_; }
  // Devices of this process past the spin of a wait (asleep, polling no
  // more); the MPI progress thread keeps polling instead of sleeping while
  // any are.
  std::atomic<int>& waiting_devices() { return waiting_devices_; }

  // Fails every wait in this launch: local waits return Aborted with `reason`
  // and other processes are told. Idempotent; the first reason wins.
  void Abort(const std::string& reason, bool notify_peers = true) override;
  bool aborted() const override {
    return aborted_.load(std::memory_order_acquire);
  }
  std::string abort_reason() const;
  // What each local device is doing, one line each.
  std::string DescribeLocalDevices();
  // Writes this process's devices' states to its hang board.
  void PublishHangState();
  // The mesh-wide hang report for a wait of `device` that began at
  // `since_ns` and timed out, when this is the first timeout of the job
  // (printed to stderr and traced); otherwise empty.
  std::string MeshHangReport(int device, int64_t since_ns);

  // Runs `fn` on the local devices of `mesh`; after a failed Run the next
  // one first recovers (see `BeginRun`).
  absl::Status Run(const Mesh& mesh, std::function<absl::Status()> fn);
  // A Run's Status from its devices' `results` (OK when all are OK and
  // checked mode found no race). A timed-out Run's carries the mesh-wide
  // hang report, where this process or the first to time out made one.
  absl::Status RunStatus(const Mesh& mesh,
                         const std::vector<absl::Status>& results);
  // This process exits (exit() on a device thread) while a Run is in
  // progress: aborts the launch, tells the peers, and ends the process with
  // status 1 at once. Called from the process's exit handlers.
  void OnExitDuringRun();
  // Checked mode, after a Run's devices finished: the races that every
  // process found in it, each process's prefixed by its rank when there are
  // several; empty when none. Collective over the processes.
  std::string GatherRaceReports();
  // A barrier across processes (no-op alone) that gives up after the wait
  // timeout instead of hanging when a process never arrives.
  absl::Status SyncProcesses(absl::string_view what);
  absl::Status Shutdown();

 private:
  explicit RuntimeImpl(RuntimeOptions options);
  // Init's steps, in order.
  absl::Status Init();
  absl::Status ReadOptions();
  absl::Status ReadMemoryOptions();
  absl::Status ReadTransportOptions();
  absl::Status ReadWaitOptions();
  absl::Status ConnectProcesses();
  absl::Status DiscoverLaunch();
  // Device threads of the launch on this machine (by hostname, so simulated
  // and forced hosts on one machine count together), the machine's cores,
  // and the cores this process may run on.
  int DeviceThreadsOnMachine() const;
  static int MachineCores();
  static int UsableCores();
  absl::Status StartObservation();
  void LogLaunch() const;
  absl::Status AgreeOnHeaps();
  absl::Status InitHeaps();
  // InitHeaps' steps. The tag rank 0 draws for the job's shared-memory
  // segments and hang boards (collective).
  absl::StatusOr<uint64_t> AgreeOnJobTag();
  // This process's heaps: private memory, or with `shared` (processes of
  // this host map them) a segment ending with `mailbox_bytes` of checked
  // mode's clock mailbox.
  absl::Status MapOwnHeaps(uint64_t tag, bool shared, size_t mailbox_bytes);
  // A `Device` per heap of this process, reached by the local transport.
  void CreateLocalDevices();
  // The segments of `host_peers`, reached by the shm transport; their clock
  // mailboxes into `mailbox_of_device`.
  absl::Status MapPeerHeaps(uint64_t tag, const std::vector<int>& host_peers,
                            size_t mailbox_bytes,
                            std::vector<ClockMailbox*>& mailbox_of_device);
  absl::Status StartRemoteTransport();
  std::vector<MpiPeerLimits> MpiLimits() const;
  // The transport to other hosts, agreed by every process (collective):
  // the one told, else MPI where some process prefers it, else TCP.
  absl::StatusOr<RemoteTransport> AgreeOnRemoteTransport(bool one_machine);
  // Every process's identity on its machine (pid and start time), gathered
  // once into `identity_of_rank_` (collective).
  absl::Status ExchangeProcessIdentities();
  // Watches every other process of this machine for exit (PeerWatch).
  void StartPeerWatch();
  // The watch saw `rank` (pid `pid`) exit: the launch fails at once, here
  // and, told through the transport to other hosts, everywhere.
  void OnPeerExited(int rank, int64_t pid);
  void StartCopyEngine();
  void StartDeviceThreads();
  void DeviceThreadMain(int local_index);

  // Before every Run, on every process: a deadlined barrier that carries
  // each process's verdict on the previous Run; when it failed anywhere,
  // every process recovers together. A launch that lost a process (or whose
  // recovery failed) refuses this and every later Run with the reason.
  absl::Status BeginRun();
  // Recovery's steps, in order; [0, zero_top) and [zero_bottom, heap) cover
  // the heap any device of the launch has used.
  absl::Status Recover(int64_t zero_top, int64_t zero_bottom);
  absl::Status DrainLocalDmas();
  void ClearAbort();
  // Records `cause` as the launch's permanent failure and returns it.
  absl::Status Lose(const absl::Status& cause);

  RuntimeOptions options_;
  DmaMode dma_mode_ = DmaMode::kAsync;
  // As told (kAuto when not); kTcp or kMpi once the processes agreed.
  RemoteTransport remote_choice_ = RemoteTransport::kAuto;
  // The TCP congestion control asked for ("": the transport's default) and
  // who asked; the TCP transport applies it.
  std::string tcp_congestion_asked_, tcp_congestion_source_;
  // Per rank, as it published it (ExchangeProcessIdentities); empty for a
  // launch of one process.
  std::vector<ProcessIdentity> identity_of_rank_;
  int64_t heap_bytes_ = 0;
  absl::Duration wait_timeout_;
  // Per process, what the MPI transport was given (mpi_path.h).
  std::vector<MpiPeerLimits> mpi_limits_;
  bool shut_down_ = false;
  std::shared_ptr<ProcessGroup> processes_;
  // Whether `processes_` is MPI's: only then may a transport use MPI.
  bool mpi_launch_ = false;
  std::unique_ptr<HostTopology> topology_;
  std::unique_ptr<Launch> launch_;

  // Heaps: one region holding all local devices' heaps (private memory, or a
  // shared-memory segment when other processes share the host), plus the
  // mapped segments of same-host peers.
  std::byte* local_heaps_ = nullptr;
  size_t local_heaps_bytes_ = 0;
  std::unique_ptr<ShmSegment> own_segment_;
  std::vector<std::unique_ptr<ShmSegment>> peer_segments_;
  // Checked mode with same-host peers: the clock mailboxes at the end of
  // this process's segment and of each peer's.
  std::unique_ptr<ClockMailbox> own_mailbox_;
  std::vector<std::unique_ptr<ClockMailbox>> peer_mailboxes_;
  std::vector<std::byte*> heap_base_of_device_;
  std::vector<Transport*> transport_of_device_;
  std::vector<std::unique_ptr<Transport>> transports_;
  PolledTransport* remote_transport_ = nullptr;  // To other hosts, if any.
  // The processes of other hosts; per global device of theirs, the copy of
  // its latest call note (null for the devices of this host), written under
  // `mirror_mu_` by the threads that receive.
  // The copy keeps the run and version of the note it holds: a message
  // that arrives late (an older version of the same run) changes nothing.
  struct MirroredNote {
    CallNote note;
    uint64_t run = 0;
    uint64_t version = 0;
  };
  std::vector<int> remote_ranks_;
  std::vector<std::unique_ptr<MirroredNote>> mirrored_notes_;
  std::mutex mirror_mu_;
  // The congestion control the TCP transport's connections run; "" without
  // it.
  std::string tcp_congestion_running_;
  std::unique_ptr<CopyEngine> copy_engine_;

  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<int> local_of_global_;  // -1 for other processes' devices.

  // Device threads and the task they run.
  std::vector<std::thread> threads_;
  std::mutex task_mu_;
  std::condition_variable task_cv_;
  std::condition_variable done_cv_;
  uint64_t task_generation_ = 0;
  std::function<void(int)> task_;
  int tasks_pending_ = 0;
  bool stopping_ = false;

  Observer* observer_ = nullptr;
  std::unique_ptr<TimelineTracer> tracer_;
  std::unique_ptr<RaceChecker> race_checker_;
  std::unique_ptr<HangBoard> hang_board_;
  std::mutex hang_mu_;
  // Null when no other process of this machine can be watched.
  std::unique_ptr<PeerWatch> peer_watch_;
  std::string trace_path_;

  // Set once a process is lost: every later Run fails with it.
  absl::Status lost_;
  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mu_;
  std::string abort_reason_;
  std::atomic<uint64_t> next_dma_id_{0};
  std::atomic<int> waiting_devices_{0};
  bool oversubscribed_ = false;
  // Whether a device is on another host; set once the transports are known
  // (true until then, so that nothing waits on a wrong assumption).
  std::atomic<bool> remote_peers_{true};
};

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_INTERNAL_RUNTIME_IMPL_H_
