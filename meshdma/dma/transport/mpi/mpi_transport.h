// Peers on other hosts, over MPI two-sided messages issued and progressed by
// the device threads themselves.
//
// The direct path: the device that starts a DMA or signals a semaphore calls
// `MPI_Isend` itself; a device blocked in a wait drives MPI progress itself
// (`Poll`) while it spins, so a small message costs no thread hand-off on
// either side. One progress thread per process covers the time when nobody
// polls (every device computing, or sleeping in a long wait), when its
// `ProgressPolicy` says: it polls while traffic is outstanding or a device
// sleeps in a wait, and backs off while devices poll. All MPI state is behind
// one lock; a poller that cannot take it leaves the work to whoever holds it.
//
// Why two-sided and not MPI RMA: measured with bench/mpi_path_probe.cc
// (`mpirun -np 2 --mca btl self,tcp --mca osc pt2pt|rdma mpi-path-probe`).
// Over Open MPI 4.1 restricted to TCP no one-sided
// component creates a window at MPI_THREAD_MULTIPLE (osc/pt2pt refuses the
// thread level, osc/rdma needs an RDMA-capable BTL), and through osc/ucx over
// TCP a put, a remote atomic and the flushes cost several times a two-sided
// message. A DMA also needs its bytes counted on the receiver only after
// they are in place, which a receiver that writes the payload and then adds
// to the semaphore cell gives on every path.
//
// Wire protocol, per (source, destination) pair in MPI's non-overtaking
// order (received through a ring of pre-posted persistent receives): one
// message with tag kMessageTag holding a wire message (wire.h: the header,
// its extras), followed by the payload itself when it is at most kInlineBytes
// (one message per small DMA; the sender's source is free as soon as it is
// packed), else by the payload as separate messages (tag kPayloadTag, <= 1 GiB
// pieces) that the receiver posts straight into the destination heap (a strided
// view of at most 1 GiB through an MPI datatype of it, on either side; beyond,
// packed on the sender and staged on the receiver). An abort carries its reason
// as the payload. A flush marker (`Quiesce`) carries its number in `value`:
// behind everything its sender sent before it.
#ifndef MESHDMA_DMA_TRANSPORT_MPI_MPI_TRANSPORT_H_
#define MESHDMA_DMA_TRANSPORT_MPI_MPI_TRANSPORT_H_

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "meshdma/dma/transport/mpi/mpi_path.h"
#include "meshdma/dma/transport/progress_policy.h"
#include "meshdma/dma/transport/transport.h"
#include "meshdma/dma/transport/wire.h"

namespace meshdma::dma_internal {

class MpiTransport : public PolledTransport {
 public:
  // Payloads up to this many bytes travel inside the header's message, which
  // stays within Open MPI's TCP eager limit (64 KiB).
  static constexpr int64_t kInlineBytes = 60 << 10;

  // Takes ownership of `comm`, a communicator of its own (a dup of the
  // process group's), so that its shutdown barrier never matches a barrier
  // of `Runtime::Run`.
  // `limits[r]`: puts to rank r of more than `piece_bytes` and at most
  // `pieced_bytes` bytes (outside checked mode) leave as inline messages of
  // at most `piece_bytes` each, each a block of the view counted on the
  // receiver's semaphore when written, so that no message waits for the
  // receiver to match it (MPI's rendezvous). `piece_bytes` is at most
  // kInlineBytes.
  MpiTransport(TransportHost* host, MPI_Comm comm,
               std::vector<MpiPeerLimits> limits);
  ~MpiTransport() override;

  absl::string_view name() const override { return "mpi"; }
  // Never: the destination heap is in another process's memory.
  bool MapDestination(DmaOp&) override { return false; }
  void Put(std::unique_ptr<DmaOp> op) override;
  void Signal(int target_device, int64_t sem_offset, int64_t inc,
              std::span<const uint32_t> check_clock) override;
  bool Poll() override;
  // MPI's own idle poll yields (MpiYieldsWhenIdle); so does a Poll that
  // finds another thread progressing MPI.
  bool PollYieldsWhenIdle() const override { return yields_when_idle_; }
  ProgressPolicy& progress() override { return progress_; }
  bool HasPending() const override {
    return pending_.load(std::memory_order_relaxed) > 0;
  }
  void BroadcastAbort(const std::string& reason) override;
  void SendCallNote(int rank, int src_device,
                    std::span<const int64_t, kCallNoteWords> words) override;
  // Sends a flush marker to every peer, then progresses until every peer's
  // marker of the same number has been handled and no send or receive is
  // outstanding. On timeout MPI is marked unusable (a peer is lost).
  absl::Status Quiesce(absl::Duration timeout) override;
  // Collective: completes outstanding traffic, then a barrier, then stops the
  // progress thread. The barrier gives up after the host's shutdown timeout
  // (the wait timeout, or a short grace when the launch was aborted: healthy
  // peers have been told), naming the ranks that never arrived.
  absl::Status Shutdown() override;

 private:
  struct PendingSend;
  struct PendingRecv;

  // Payload written straight into a message: `bytes` by `write`.
  struct InlinePayload {
    int64_t bytes;
    absl::FunctionRef<void(std::byte*)> write;
  };
  // Sends `header` (with `layout` when not null, the clock, and
  // `inline_payload`; then the op's payload when it is not inline) to
  // `dest_rank`. Called by the issuing device.
  void Send(int dest_rank, const WireHeader& header, const ViewLayout* layout,
            const InlinePayload& inline_payload, std::unique_ptr<DmaOp> op,
            std::span<const uint32_t> check_clock = {});
  // A put as inline puts of blocks of its view of at most `piece_bytes`
  // each; the op completes with the last one.
  void PutInPieces(int dest_rank, const WireHeader& header,
                   std::unique_ptr<DmaOp> op, int64_t piece_bytes);
  // One round of progress; the caller holds `mu_`. Once a process of the
  // launch is lost (MpiPeersLost), none: what is outstanding is abandoned.
  bool ProgressLocked();
  // Hands every put in flight back to its issuer as never completing
  // (`TransportHost::AbandonDma`) and stops counting pending traffic; once.
  void AbandonLocked();
  bool PollIncoming();
  bool TestPending();
  // True once every peer's flush marker `epoch` is handled and no traffic is
  // outstanding; the caller holds `mu_`.
  bool FlushedLocked(int64_t epoch) const;
  // The peers whose flush marker `epoch` has not arrived, as "1, 3".
  std::string Unflushed(int64_t epoch);
  // Handles one message from `source`: control, a signal, a put with its
  // payload inside, or the header of a put whose payload follows.
  void HandleMessage(std::span<const std::byte> message, int source);
  // Posts the receives of the payload that follows header `h`, into
  // `target`; pending until they complete.
  void ReceivePayload(const WireHeader& h, const WireTarget& target,
                      std::span<const uint32_t> clock, int source);
  // `send.message`: the header `header` marked with what follows it,
  // `layout` (when not null), `check_clock` and `inline_payload`.
  void PackMessage(PendingSend& send, const WireHeader& header,
                   const ViewLayout* layout,
                   const InlinePayload& inline_payload,
                   std::span<const uint32_t> check_clock);
  // Posts `op`'s payload to `send.dest` in messages of its own (a strided
  // datatype, or packed pieces); the caller holds `mu_`.
  void PostPayloadLocked(PendingSend& send, const DmaOp& op);
  // The progress thread's shutdown: the barrier, posted once every send is
  // out, and the deadline.
  struct ShutdownProgress;
  // One step of the shutdown, the caller holding `mu_`: true when the
  // progress thread is to return (done; peers lost; or past the deadline,
  // with `error_` naming the ranks missing).
  bool ShutdownStepLocked(ShutdownProgress& closing);
  void ProgressMain();

  TransportHost* const host_;
  MPI_Comm comm_;
  const std::vector<MpiPeerLimits> limits_;  // Per destination rank.
  int rank_ = 0;
  int size_ = 1;

  // Guards every MPI call and the pending lists. Recursive: handling a
  // message may abort, which sends.
  std::recursive_mutex mu_;
  std::list<std::unique_ptr<PendingSend>> sends_;
  std::list<std::unique_ptr<PendingRecv>> recvs_;
  // Receives posted in advance for incoming headers, used round-robin.
  static constexpr int kPostedReceives = 8;
  struct PostedReceive {
    std::vector<std::byte> buffer;  // The longest message.
    MPI_Request request = MPI_REQUEST_NULL;
  };
  PostedReceive posted_[kPostedReceives];
  int next_posted_ = 0;     // The earliest posted, next to complete.
  bool abandoned_ = false;  // AbandonLocked has run (under mu_).
  bool handling_ = false;   // Inside PollIncoming (under mu_).
  const bool yields_when_idle_ = MpiYieldsWhenIdle();
  int64_t flush_epoch_ = 0;            // Markers this process has sent.
  std::vector<int64_t> flushed_from_;  // Per rank: its latest marker here.
  // Awaited sends (non-inline puts) and recvs_: traffic somebody waits for.
  std::atomic<int> pending_{0};
  // Told when a device progresses MPI (`Poll`) or sends (`Send`); decides
  // when the progress thread polls, yields or sleeps.
  ProgressPolicy progress_;

  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  bool shutdown_requested_ = false;
  bool wake_requested_ = false;  // A device stopped polling: look now.
  std::thread thread_;
  absl::Status error_;
};

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_TRANSPORT_MPI_MPI_TRANSPORT_H_
