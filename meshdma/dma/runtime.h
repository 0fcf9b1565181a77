// The meshdma runtime: this process's devices (threads pinned by the host
// topology), their symmetric heaps, and the transports that reach every peer.
//
// Life cycle. `Runtime::Create` initialises MPI when the process was started
// by mpirun (with MPI_THREAD_MULTIPLE; a process started without mpirun runs
// alone, without MPI, unless `RuntimeOptions::processes` names its launch's
// processes through a store), discovers the launch, maps the heaps and starts
// the device threads. Only one runtime may be alive in a process; creating a
// second is an error, but once it is destroyed another may be created.
// Destroying it (or `Shutdown`) is collective across processes, stops the
// threads and removes shared memory. MPI, when a runtime initialised it, stays
// initialised for later runtimes and is finalised when the process exits.
//
// SPMD. `Run(mesh, fn)` is called by every process with the same mesh; `fn`
// runs once on each of this process's devices that the mesh contains, on that
// device's thread, where the verbs (`axis_index`, `make_async_remote_copy`,
// `semaphore_signal`, `pallas_call`, ...) act as that device. `Run` starts
// once every process has finished its previous `Run`, and returns
// when all local devices are done: OK, or an error naming each device that
// failed. When one device fails, waits on the others (in every process) end
// with Aborted instead of hanging.
//
// Recovery. After a failed `Run` (on any process) the next `Run`, on every
// process together, drains the failed Run's DMAs, flushes the transports,
// zeroes the heap the launch used (semaphores included) and forgets scopes,
// persistent memory and collective channels, all within the wait timeout;
// then it runs as on a fresh runtime. When a process does not take part in
// time (dead or stuck), that `Run` and every later one fail with
// FailedPrecondition naming the rank(s) (docs/semantics.md §6).
#ifndef MESHDMA_DMA_RUNTIME_H_
#define MESHDMA_DMA_RUNTIME_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "meshdma/base/config.h"
#include "meshdma/dma/observer.h"
#include "meshdma/topology/host_topology.h"
#include "meshdma/topology/launch.h"
#include "meshdma/topology/mesh.h"
#include "meshdma/topology/process_group.h"

namespace meshdma {

// Who moves the bytes of a DMA between devices that share memory.
enum class DmaMode {
  // `start()` hands copies of at least `async_min_bytes` to the process's copy
  // workers and returns at once, so compute between `start()` and `wait()`
  // overlaps the copy. Waiting devices help the workers (a waiter runs queued
  // copy chunks rather than sleep). Smaller copies run inside `start()`.
  kAsync,
  // `start()` performs the copy before it returns: lowest latency,
  // deterministic, no overlap.
  kEager,
};

// Environment variables read when the matching option is unset; each is a
// row of the configuration table (base/config.h), which holds its range.
inline constexpr const char* kDmaModeEnv = config::kDmaMode.name;
inline constexpr const char* kHeapBytesEnv = config::kHeapBytes.name;
// The range of the heap per device (RuntimeOptions::heap_bytes,
// MESHDMA_HEAP_BYTES, a program's --heap-bytes): room above the semaphores
// meshdma reserves at its bottom, and 1 TiB.
inline constexpr int64_t kMinHeapBytes = config::kHeapBytes.min;
inline constexpr int64_t kMaxHeapBytes = config::kHeapBytes.max;
inline constexpr const char* kWaitTimeoutEnv = config::kWaitTimeout.name;
inline constexpr const char* kSpinNsEnv = config::kSpinNs.name;
inline constexpr const char* kRemoteSpinNsEnv = config::kRemoteSpinNs.name;
inline constexpr const char* kMpiPiecedBytesEnv = config::kMpiPiecedBytes.name;
// The default of mpi_pieced_bytes towards processes that MPI reaches over
// the network (on other machines, or on this one when MPI's settings leave
// it no shared memory): 256 KiB of data plus room for a small header in
// front of it (a collective channel's row of 256 KiB carries one).
inline constexpr int64_t kDefaultMpiPiecedBytes = (256 + 4) << 10;
// The default of mpi_pieced_bytes towards processes of this machine that MPI
// reaches through shared memory, where its eager size is known (Open MPI):
// above it MPI's single copy beats many eager messages.
inline constexpr int64_t kDefaultMpiSharedMemoryPiecedBytes = 16 << 10;

// The path to devices on other hosts (`RuntimeOptions::remote_transport`).
enum class RemoteTransport {
  // kMpi where MPI's own path is not TCP: some host has an RDMA device (a
  // non-empty /sys/class/infiniband), or every process runs on this machine
  // and MPI joins them through shared memory (simulated or forced hosts).
  // kTcp otherwise.
  kAuto,
  // meshdma's own TCP connections, one per pair of processes, under CUBIC
  // unless `tcp_congestion` says otherwise: the header and the
  // source's bytes in one write, the payload read straight into the
  // destination heap.
  kTcp,
  // MPI two-sided messages (dma/transport/mpi/), through whatever network
  // MPI is configured for.
  kMpi,
};
// Overrides remote_transport: "tcp", "mpi" or "auto".
inline constexpr const char* kRemoteTransportEnv =
    config::kRemoteTransport.name;
// Overrides tcp_congestion: a congestion control's name, or "system".
inline constexpr const char* kTcpCongestionEnv = config::kTcpCongestion.name;
// "auto" or "dma": the rows of the collectives' channels
// (collectives/internal/channel.h). Read there, and checked by
// `Runtime::Create` so that a bad value fails at once in every program, also
// one that never uses a channel.
inline constexpr const char* kChannelProtocolEnv =
    config::kChannelProtocol.name;

// Checked mode: kRaces reports data races as an error from `Runtime::Run` on
// every process; all processes use one mode (docs/checked_mode.md).
enum class CheckMode { kOff, kRaces };
inline constexpr const char* kCheckEnv = config::kCheck.name;

struct RuntimeOptions {
  LaunchOptions launch;
  // The processes of the launch. Unset: MPI's when mpirun started this
  // process (`LaunchedByMpi`), else this process alone. A launch that no MPI
  // launcher started passes a group on its launcher's store
  // (topology/store_process_group.h): then nothing uses MPI, shared memory
  // joins the processes of a host, and meshdma's TCP connections join the
  // hosts and carry aborts between the processes of one host.
  std::shared_ptr<ProcessGroup> processes;
  // Symmetric heap per device. Unset: MESHDMA_HEAP_BYTES, else 256 MiB
  // (reserved lazily: untouched pages cost nothing).
  std::optional<int64_t> heap_bytes;
  // Unset: MESHDMA_DMA_MODE, else kAsync.
  std::optional<DmaMode> dma_mode;
  int64_t async_min_bytes = 64 << 10;
  // Copy chunk size; chunks of one DMA may run on several threads.
  int64_t copy_chunk_bytes = 1 << 20;
  // Copy worker threads per process (kAsync). 0: one per two local devices,
  // at least one.
  int copy_threads = 0;
  // How long a wait spins before it sleeps on a futex. Spinning answers a
  // signal within ~100 ns but holds a core; sleeping frees the core and costs
  // 35-60 us to wake on a virtual machine; 20 us took 0.52-0.62 us per
  // 8 B-4 KiB ppermute where 0, 2 us and 200 us took up to 1.4, 2.3 and 4.9
  // (`MESHDMA_SPIN_NS=S mpirun -np 2 -x MESHDMA_SPIN_NS meshdma-bench
  // --collective ppermute -b 8 -e 4K -f 8`).
  int64_t spin_ns = 20'000;
  // The spin of a wait in a launch with devices on other hosts, where the
  // waiter progresses MPI on every turn. MPI moves a message only while a
  // process polls (a rendezvous needs both sides), and a sleeping waiter is
  // woken only when the MPI progress thread gets to the message, so these
  // waits spin longer: until this long has passed without the transport moving
  // anything, so that a wait whose bytes keep arriving keeps reading them
  // itself, or until the wait timeout.
  int64_t remote_spin_ns = 1'000'000;
  // DMAs to another host's devices of more than one message's payload
  // (`Runtime::mpi_piece_bytes`: 60 KiB) and at most this many bytes leave
  // as messages of at most that payload each, counted on the receiver's
  // semaphore as each is written, instead of a header and a payload whose
  // receive is posted when the header arrives (a rendezvous that costs a
  // round trip over TCP). 0: never. Unset: MESHDMA_MPI_PIECED_BYTES, else
  // 260 KiB. Towards processes on this machine (simulated or forced hosts)
  // that MPI reaches through shared memory, which it does unless its
  // settings leave only the network (for example Open MPI's
  // `--mca btl self,tcp`), a long message moves in one copy but waits for
  // the receiver to match it: there a message's payload is what fits in
  // MPI's eager size, and the default is 16 KiB where MPI tells that size
  // (Open MPI), else 0. Over TCP, thresholds of 1 and 4 MiB lost at 512 KiB
  // and 1 MiB (`mpirun -np 2 --mca btl self,tcp -x MESHDMA_FORCE_INTERHOST=1
  // -x MESHDMA_MPI_PIECED_BYTES meshdma-bench --collective ppermute -b 32K
  // -e 1M -f 2`); through shared memory, pieces of 16 KiB made 4-16 KiB
  // calls 1.4-2.3x faster and pieces of 64 KiB made a 64 KiB put twice as
  // slow (`mpirun -np 2 -x MESHDMA_FORCE_INTERHOST=1 -x
  // MESHDMA_MPI_PIECED_BYTES meshdma-bench --collective OP -b 1K -e 64K -f
  // 2`). At most 1 GiB.
  std::optional<int64_t> mpi_pieced_bytes;
  // The path to devices on other hosts. Unset: MESHDMA_REMOTE_TRANSPORT,
  // else kAuto. The processes agree at start-up: choices set by hand must be
  // the same on every process (an error otherwise), and automatic ones take
  // MPI where any process prefers it. A launch on one host uses MPI's
  // messages for its control traffic only (aborts).
  std::optional<RemoteTransport> remote_transport;
  // The TCP congestion control of the TCP transport's connections: a name
  // the kernel offers ("cubic", "reno", "bbr", ...), or "system" for the
  // kernel's default. Unset: MESHDMA_TCP_CONGESTION, else CUBIC where the
  // kernel allows it (else its default stays): under BBR one connection
  // carrying exchanges of 1 MiB or more both ways ran at about half the
  // rate at random times (`mpirun -np 2 --mca btl self,tcp
  // socket-exchange-probe --congestion bbr|cubic`). A name the kernel refuses
  // fails `Create` on every process.
  std::optional<std::string> tcp_congestion;
  // A wait that cannot complete fails after this long, measured on the
  // monotonic clock. Unset: MESHDMA_WAIT_TIMEOUT_S (seconds, or "inf"), else
  // 120 s. absl::InfiniteDuration() (or "inf") means no timeout; other values
  // must lie in (0, 1e9 s].
  std::optional<absl::Duration> wait_timeout;
  // Pin device threads to the cores the launch assigned.
  bool pin_threads = true;
  // Receives every DMA, signal and wait (dma/observer.h). Not owned.
  Observer* observer = nullptr;
  // Writes a timeline trace (dma/trace.h) here at shutdown. Unset:
  // MESHDMA_TRACE, else no tracing.
  std::optional<std::string> trace_path;
  // Checked mode (docs/checked_mode.md). Unset: MESHDMA_CHECK ("off" or
  // "races"), else off.
  std::optional<CheckMode> check;
};

namespace dma_internal {
class RuntimeImpl;
}

class Runtime {
 public:
  static absl::StatusOr<std::unique_ptr<Runtime>> Create(
      RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const Launch& launch() const;
  // The processes of this launch, for host-side exchanges outside `Run`
  // (collective calls; see meshdma/topology/process_group.h).
  ProcessGroup& processes() const;
  const HostTopology& topology() const;
  int num_local_devices() const;
  int num_devices() const;  // In the whole launch.
  DmaMode dma_mode() const;
  // The transport to devices on other hosts: "tcp" or "mpi"; "" when every
  // device of the launch is reached through memory (one host).
  std::string remote_transport() const;
  // The congestion control the TCP transport's connections run ("cubic");
  // "" without that transport.
  std::string tcp_congestion() const;
  int64_t heap_bytes() const;
  absl::Duration wait_timeout() const;
  // The effective `RuntimeOptions::mpi_pieced_bytes` for puts to process
  // `rank` (0 for this process and without MPI).
  int64_t mpi_pieced_bytes(int rank) const;
  // The most payload one MPI message to process `rank` carries: 60 KiB, or
  // towards a process of this machine that MPI reaches through shared
  // memory, what fits in MPI's eager size there (0 for this process and
  // without MPI).
  int64_t mpi_piece_bytes(int rank) const;
  // The most payload and header one MPI message to process `rank` takes on
  // MPI's fastest path through shared memory, where a put just past it
  // leaves as two messages on it (oversubscribed under Open MPI: 256); 0
  // where puts are not cut so.
  int64_t mpi_fast_bytes(int rank) const;
  // Whether this process's devices outnumber the cores it may run on, or the
  // launch's device threads on this machine its cores: waits then yield the
  // core at every poll.
  bool oversubscribed() const;

  // A mesh over all devices of the launch, in global (topology-aware) order.
  absl::StatusOr<Mesh> MakeMesh(std::vector<Mesh::Axis> axes) const;
  // A 1-D mesh {axis: num_devices()}.
  absl::StatusOr<Mesh> MakeMesh1D(std::string axis = "x") const;

  // Runs `fn` SPMD on the local devices of `mesh` (see above); recovers
  // first when the previous Run failed.
  absl::Status Run(const Mesh& mesh, std::function<absl::Status()> fn);

  // Collective shutdown; later calls of `Run` fail. Idempotent.
  absl::Status Shutdown();

 private:
  explicit Runtime(std::unique_ptr<dma_internal::RuntimeImpl> impl);
  std::unique_ptr<dma_internal::RuntimeImpl> impl_;
};

// Queries about the calling device; errors outside `Runtime::Run`.
// This device's coordinate along `axis` of the current mesh, and its size.
absl::StatusOr<int> axis_index(std::string_view axis);
absl::StatusOr<int> axis_size(std::string_view axis);
// The current mesh and this device's LOGICAL id in it.
absl::StatusOr<const Mesh*> current_mesh();
absl::StatusOr<int> logical_device_id();
// This device's global index in the launch.
absl::StatusOr<int> global_device_id();
// Whether the current Run has failed on some device of the launch (its waits
// now end with Aborted). For a device that waits on something outside
// meshdma (a host-side queue) and must leave the Run when it fails.
absl::StatusOr<bool> run_failed();

}  // namespace meshdma

#endif  // MESHDMA_DMA_RUNTIME_H_
