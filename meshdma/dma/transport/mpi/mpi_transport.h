// Peers on other hosts, over MPI two-sided messages driven by one progress
// thread per process.
//
// Why two-sided and not MPI RMA (measured with bench/mpi_path_probe.cc, see
// BENCHMARKS.md): over Open MPI 4.1 restricted to TCP, the inter-host case
// without UCX or InfiniBand, no one-sided component creates a window at
// MPI_THREAD_MULTIPLE (osc/pt2pt refuses the thread level, osc/rdma needs an
// RDMA-capable BTL); the fast RMA numbers on one machine come from osc/sm,
// i.e. shared memory, which meshdma already uses directly. Where RMA does
// work, a DMA still needs put + flush + a remote atomic + flush before the
// receiver may count the bytes, and the receiver must call into MPI to see
// the atomic. A receiver-side progress thread that writes the payload into
// the heap and then bumps the semaphore cell with a release add keeps the
// waiter's path identical on every transport and never calls MPI from a wait.
//
// Wire protocol, per (source, destination) pair in MPI's non-overtaking order:
//   header (tag kHeaderTag) [, payload (tag kPayloadTag) in <= 1 GiB pieces]
// The receiver posts the payload receive straight into the destination heap
// when the destination view is contiguous (single copy), otherwise into a
// staging buffer that it scatters into the strided view.
#ifndef MESHDMA_DMA_TRANSPORT_MPI_MPI_TRANSPORT_H_
#define MESHDMA_DMA_TRANSPORT_MPI_MPI_TRANSPORT_H_

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "meshdma/dma/transport/transport.h"

namespace meshdma::dma_internal {

class MpiTransport : public Transport {
 public:
  // `comm` is the runtime's own communicator (a dup of MPI_COMM_WORLD).
  MpiTransport(TransportHost* host, MPI_Comm comm);
  ~MpiTransport() override;

  absl::string_view name() const override { return "mpi"; }
  // Never: the destination heap is in another process's memory.
  bool MapDestination(DmaOp&) override { return false; }
  void Put(std::unique_ptr<DmaOp> op) override;
  void Signal(int target_device, int64_t sem_offset, int64_t inc) override;
  // Tells every other process that this launch failed (see Runtime::Abort).
  void BroadcastAbort(const std::string& reason) override;
  // Collective: completes outstanding traffic, then a barrier, then stops the
  // progress thread.
  absl::Status Shutdown() override;

 private:
  struct Header;
  struct Outgoing;
  struct PendingSend;
  struct PendingRecv;

  void Enqueue(std::unique_ptr<Outgoing> out);
  void ProgressMain();
  bool PostOutgoing();
  bool PollIncoming();
  bool TestPending();
  void HandleHeader(const Header& h, int source);

  TransportHost* const host_;
  const MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Outgoing>> outgoing_;
  bool shutdown_requested_ = false;

  // Owned by the progress thread.
  std::list<std::unique_ptr<PendingSend>> sends_;
  std::list<std::unique_ptr<PendingRecv>> recvs_;
  std::thread thread_;
  absl::Status error_;
};

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_TRANSPORT_MPI_MPI_TRANSPORT_H_
