// Peers on other hosts, over MPI two-sided messages driven by one progress
// thread per process. Why two-sided and not MPI RMA: a DMA must signal the
// receiver's semaphore only after the data is in place, and a semaphore wait
// must not call into MPI. With RMA that takes a put, a flush, and an atomic
// (MPI_Accumulate) whose completion the target cannot observe without polling
// the window from MPI; Open MPI's osc over TCP also progresses passive-target
// epochs only inside MPI calls on the target. A receiver-side progress thread
// that writes the payload into the heap and then bumps the semaphore cell with
// a release store keeps the waiter's path identical on every transport.
//
// Wire protocol, per (source, destination) pair in MPI's non-overtaking order:
//   header (tag kHeaderTag) [, payload (tag kPayloadTag) in <= 1 GiB pieces]
// The receiver posts the payload receive straight into the destination heap
// when the destination view is contiguous (single copy), otherwise into a
// staging buffer that it scatters into the strided view.
#ifndef MESHDMA_DMA_TRANSPORT_MPI_TRANSPORT_H_
#define MESHDMA_DMA_TRANSPORT_MPI_TRANSPORT_H_

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
#include "dma/transport/transport.h"

namespace meshdma::internal {

class RuntimeImpl;

class MpiTransport : public Transport {
 public:
  // `comm` is the runtime's own communicator (a dup of MPI_COMM_WORLD).
  MpiTransport(RuntimeImpl* runtime, MPI_Comm comm);
  ~MpiTransport() override;

  absl::string_view name() const override { return "mpi"; }
  void Put(std::unique_ptr<DmaOp> op) override;
  void Signal(int target_device, int64_t sem_offset, int64_t inc) override;
  // Tells every other process that this launch failed (see Runtime::Abort).
  void BroadcastAbort(const std::string& reason);
  // Collective: completes outstanding traffic, then a barrier, then stops the
  // progress thread.
  absl::Status Shutdown();

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

  RuntimeImpl* const runtime_;
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

}  // namespace meshdma::internal

#endif  // MESHDMA_DMA_TRANSPORT_MPI_TRANSPORT_H_
