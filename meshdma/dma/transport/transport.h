// The one interface behind which every path to a peer sits, and the narrow
// interface through which a transport calls back into the runtime.
//
// The runtime picks a transport per peer device. The implementations:
// - `DirectTransport` (direct/): devices whose heap this process can address,
//   in this process (plain memory) or on this host (a shared-memory mapping,
//   shm/);
// - `SocketTransport` (socket/, `MakeSocketTransport`): devices on other
//   hosts over meshdma's own TCP connections (the default without an RDMA
//   device); its congestion control is the TCP connections' own setting, how
//   the kernel paces their bytes, not a policy of meshdma's;
// - `MpiTransport` (mpi/, `MakeMpiTransport`): devices on other hosts over
//   MPI messages.
// The two remote ones are `PolledTransport`s. Transports are leaves that move
// bytes: they include this header and nothing else of the runtime, and reach
// the runtime only through `TransportHost`. Policy lives beside or above
// them: when a remote transport's progress thread polls, yields or sleeps is
// its `ProgressPolicy`'s (progress_policy.h); who copies the bytes of an
// addressable destination (the issuing device now, or the copy engine later)
// is the device's; and when a waiting device polls, spins, yields or sleeps
// is the wait policy's (dma/internal/wait_policy.h).
#ifndef MESHDMA_DMA_TRANSPORT_TRANSPORT_H_
#define MESHDMA_DMA_TRANSPORT_TRANSPORT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "meshdma/dma/internal/copy_plan.h"
#include "meshdma/dma/internal/semaphore_cell.h"
#include "meshdma/dma/observer.h"

namespace meshdma::dma_internal {

class Device;
struct DmaOp;
class ProgressPolicy;

// The words of one device's call note as it crosses processes
// (dma/internal/call_note.h gives them their meaning).
inline constexpr int kCallNoteWords = 8;

// What a transport may ask of the runtime that owns it.
class TransportHost {
 public:
  virtual ~TransportHost() = default;
  // Base address of `global_device`'s heap in this process, or null when
  // this process cannot address it (another host).
  virtual std::byte* HeapBase(int global_device) const = 0;
  // Bytes in every device's heap (the same on all devices).
  virtual int64_t heap_bytes() const = 0;
  // The process (rank) that holds `global_device`.
  virtual int RankOf(int global_device) const = 0;
  // True when `global_device` is a device of this process.
  virtual bool IsLocalDevice(int global_device) const = 0;
  // `op`'s source has been read (and, on addressable paths, its destination
  // written): hands it back to its issuer, which counts the send semaphore.
  virtual void CompleteDma(std::unique_ptr<DmaOp> op) = 0;
  // `op` never completes: the process it goes to is lost, and nothing reads
  // its source any more. Hands it back to its issuer, which stops listing
  // it in flight (a closing scope does not wait for it) and moves no
  // semaphore.
  virtual void AbandonDma(std::unique_ptr<DmaOp> op) = 0;
  // Fails every wait of this launch with `reason`; with `notify_peers`, the
  // other processes are told too.
  virtual void Abort(const std::string& reason, bool notify_peers) = 0;
  // True while some local device sleeps in a wait (past its spin, in which
  // it polls itself), so that a progress thread should poll rather than
  // sleep.
  virtual bool DevicesWaiting() const = 0;
  // True when some device of the launch lives on another host, reached
  // through the remote transport. False on one host: a progress thread then
  // moves only control messages, and must not take a core from the devices.
  virtual bool RemotePeers() const = 0;
  // How long a wait on a peer may take (RuntimeOptions::wait_timeout).
  virtual absl::Duration wait_timeout() const = 0;
  // How long a transport's shutdown waits for its peers: the wait timeout,
  // or once the launch is aborted (healthy peers were told and are shutting
  // down too) the short fault grace that bounds a fault's report
  // (docs/semantics.md, "Faults within the timeout").
  virtual absl::Duration shutdown_timeout() const = 0;
  // True once `Abort` has been called.
  virtual bool aborted() const = 0;
  // Checked mode, for transports whose messages cross processes: a signal
  // (`dst_layout` null) or a DMA's data from `issuer` carrying `clock` has
  // arrived at `target_device`, just before its semaphore at `sem_offset`
  // moves. `dma_seq` is the DMA's number among its issuer's DMAs.
  virtual void OnCheckClock(int target_device, int issuer, int64_t sem_offset,
                            std::span<const uint32_t> clock, uint32_t dma_seq,
                            int64_t dst_offset, const ViewLayout* dst_layout,
                            int64_t elem_bytes) {}
  // Another process's device `src_device` sent its call note
  // (Transport::SendCallNote); the words are unchecked.
  virtual void OnCallNote(int src_device,
                          std::span<const int64_t, kCallNoteWords> words) {}
};

// One started DMA, owned by the transport until it completes.
struct DmaOp {
  DmaEvent event;
  Device* issuer = nullptr;        // The device that called start().
  int scope_depth = 0;             // The issuer's scope depth at start().
  const std::byte* src = nullptr;  // Local address of src element 0.
  ViewLayout src_layout;
  ViewLayout dst_layout;
  int64_t elem_bytes = 1;
  int64_t dst_heap_offset = 0;         // Of dst element 0 on the target.
  SemaphoreCell* send_cell = nullptr;  // Sender's send semaphore, or null.

  // Addressable destinations (`Transport::MapDestination`): the resolved
  // destination and chunk bookkeeping for the copy engine.
  std::byte* dst = nullptr;
  SemaphoreCell* recv_cell = nullptr;
  int64_t num_chunks = 1;
  std::atomic<int64_t> next_chunk{0};
  std::atomic<int64_t> done_chunks{0};

  // Checked mode's record of this DMA (its issuer's vector clock and the
  // destination to track); null when checked mode is off. Opaque here.
  std::shared_ptr<const void> check_info;
  // The same, as data a message can carry: the issuer's clock at start()
  // and the DMA's number. Empty when checked mode is off.
  std::vector<uint32_t> check_clock;
  uint32_t check_seq = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  // "local", "shm" or "mpi": shown in diagnostics and benchmarks.
  virtual absl::string_view name() const = 0;
  // When this process can address `op`'s destination, sets `op->dst` (if
  // unset) and `op->recv_cell` and returns true: any thread of this process
  // may then copy the bytes, and the device may hand them to its copy
  // engine. Otherwise returns false: only `Put` can move them.
  virtual bool MapDestination(DmaOp& op) = 0;
  // Moves `op`'s bytes to `op->event.dst_device`. When the source has been
  // read it calls `TransportHost::CompleteDma(op)`; the target's receive
  // semaphore grows by the byte count only after the data is in place.
  virtual void Put(std::unique_ptr<DmaOp> op) = 0;
  // Adds `inc` to the semaphore at `sem_offset` on `target_device`.
  // `check_clock` is the signaller's vector clock in checked mode (empty
  // otherwise), for transports that cross processes to carry.
  virtual void Signal(int target_device, int64_t sem_offset, int64_t inc,
                      std::span<const uint32_t> check_clock) = 0;
  // Tells every other process that this launch failed. Paths that share
  // memory have nothing to tell: a no-op.
  virtual void BroadcastAbort(const std::string& reason) {}
  // Sends `src_device`'s call note (dma/internal/call_note.h: what a device
  // of this process calls, so that peers on other hosts can compare) to
  // process `rank`, behind what this process sent there before. Paths that
  // share memory have nothing to send: the peer reads the note itself.
  virtual void SendCallNote(int rank, int src_device,
                            std::span<const int64_t, kCallNoteWords> words) {}
  // Collective over the processes using this transport, called while no
  // device of any process starts traffic (recovery after a failed Run):
  // returns once this process's sends are complete and every message another
  // process sent here before its own call has been handled here, or fails
  // after `timeout` naming the peers not heard from. Paths whose traffic
  // completes inside the call that starts it have nothing to do.
  virtual absl::Status Quiesce(absl::Duration timeout) {
    return absl::OkStatus();
  }
  // Collective over the processes using this transport: completes
  // outstanding traffic and stops any helper thread.
  virtual absl::Status Shutdown() { return absl::OkStatus(); }
};

// A transport to devices on other hosts (TCP or MPI): its messages move
// only while a thread polls it, its own progress thread or a waiting device.
// When that thread polls, yields or sleeps is its `ProgressPolicy`'s
// (progress_policy.h), which the devices inform; the transport carries the
// decisions out and reports the facts below, which are its own.
class PolledTransport : public Transport {
 public:
  // Makes progress on outstanding traffic from the calling thread (a device
  // in a wait); true when anything moved.
  virtual bool Poll() = 0;
  // True while traffic that somebody waits for is outstanding: a put whose
  // send semaphore waits for the transport to finish with its source, or a
  // payload announced but not yet received. (A message that carried its
  // payload inline completed its put already.) A fact of the transport's
  // queues, which the policies read.
  virtual bool HasPending() const = 0;
  // True when a `Poll` that finds nothing to do yields the calling thread's
  // core itself (MPI's progress under Open MPI's `mpi_yield_when_idle`): a
  // fact of the library under the transport, which a waiting device reads so
  // as not to yield twice.
  virtual bool PollYieldsWhenIdle() const { return false; }
  // The policy of this transport's progress thread, which waiting devices
  // tell that they poll or stop to sleep.
  virtual ProgressPolicy& progress() = 0;
};

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_TRANSPORT_TRANSPORT_H_
