#include "meshdma/dma/transport/mpi/mpi_transport.h"

#include <sched.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "meshdma/dma/transport/mpi/mpi_path.h"
#include "meshdma/dma/transport/mpi/mpi_process_group.h"

namespace meshdma::dma_internal {
namespace {

constexpr int kHeaderTag = 7101;
constexpr int kPayloadTag = 7102;
constexpr int64_t kMaxPiece = int64_t{1} << 30;

enum class Kind : int32_t { kPut = 1, kSignal = 2, kAbort = 3 };

bool IsPacked(const ViewLayout& v, int64_t elem_bytes) {
  int64_t stride = elem_bytes;
  for (int d = v.rank - 1; d >= 0; --d) {
    if (v.shape[d] != 1 && v.byte_strides[d] != stride) return false;
    stride *= v.shape[d];
  }
  return true;
}

ViewLayout Packed(const ViewLayout& v, int64_t elem_bytes) {
  ViewLayout p = v;
  int64_t stride = elem_bytes;
  for (int d = v.rank - 1; d >= 0; --d) {
    p.byte_strides[d] = stride;
    stride *= v.shape[d];
  }
  return p;
}

}  // namespace

struct MpiTransport::Header {
  Kind kind;
  int32_t dst_device;
  int64_t dst_offset;  // kPut: heap offset of dst; kSignal: semaphore offset.
  int64_t sem_offset;  // kPut: receiver's recv semaphore.
  int64_t value;       // kPut: bytes; kSignal: increment.
  int64_t elem_bytes;
  ViewLayout dst_layout;
  char reason[256];  // kAbort.
};

struct MpiTransport::Outgoing {
  Header header{};
  std::unique_ptr<DmaOp> op;  // kPut.
  int dest_rank = 0;
};

struct MpiTransport::PendingSend {
  Header header;
  std::unique_ptr<DmaOp> op;
  std::vector<std::byte> packed;
  std::vector<MPI_Request> requests;
};

struct MpiTransport::PendingRecv {
  std::vector<MPI_Request> requests;
  std::vector<std::byte> staging;  // Non-contiguous destinations only.
  std::byte* dst = nullptr;
  ViewLayout dst_layout;
  int64_t elem_bytes = 1;
  int64_t bytes = 0;
  SemaphoreCell* recv_cell = nullptr;
};

MpiTransport::MpiTransport(TransportHost* host, MPI_Comm comm)
    : host_(host), comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  thread_ = std::thread([this] { ProgressMain(); });
}

MpiTransport::~MpiTransport() { Shutdown().IgnoreError(); }

void MpiTransport::Enqueue(std::unique_ptr<Outgoing> out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    outgoing_.push_back(std::move(out));
  }
  cv_.notify_one();
}

void MpiTransport::Put(std::unique_ptr<DmaOp> op) {
  auto out = std::make_unique<Outgoing>();
  const int dst = op->event.dst_device;
  out->dest_rank = host_->RankOf(dst);
  out->header.kind = Kind::kPut;
  out->header.dst_device = dst;
  out->header.dst_offset = op->dst_heap_offset;
  out->header.sem_offset = op->event.recv_sem;
  out->header.value = op->event.bytes;
  out->header.elem_bytes = op->elem_bytes;
  out->header.dst_layout = op->dst_layout;
  out->op = std::move(op);
  Enqueue(std::move(out));
}

void MpiTransport::Signal(int target_device, int64_t sem_offset, int64_t inc) {
  auto out = std::make_unique<Outgoing>();
  out->dest_rank = host_->RankOf(target_device);
  out->header.kind = Kind::kSignal;
  out->header.dst_device = target_device;
  out->header.dst_offset = sem_offset;
  out->header.value = inc;
  Enqueue(std::move(out));
}

void MpiTransport::BroadcastAbort(const std::string& reason) {
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    auto out = std::make_unique<Outgoing>();
    out->dest_rank = r;
    out->header.kind = Kind::kAbort;
    std::snprintf(out->header.reason, sizeof(out->header.reason), "%s",
                  reason.c_str());
    Enqueue(std::move(out));
  }
}

absl::Status MpiTransport::Shutdown() {
  if (!thread_.joinable()) return error_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_requested_ = true;
  }
  cv_.notify_one();
  thread_.join();
  return error_;
}

bool MpiTransport::PostOutgoing() {
  std::deque<std::unique_ptr<Outgoing>> batch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    batch.swap(outgoing_);
  }
  for (auto& out : batch) {
    auto send = std::make_unique<PendingSend>();
    send->header = out->header;
    send->op = std::move(out->op);
    MPI_Request req;
    MPI_Isend(&send->header, sizeof(Header), MPI_BYTE, out->dest_rank,
              kHeaderTag, comm_, &req);
    send->requests.push_back(req);
    if (send->header.kind == Kind::kPut && send->header.value > 0) {
      DmaOp* op = send->op.get();
      const std::byte* payload = op->src;
      if (!IsPacked(op->src_layout, op->elem_bytes)) {
        // Gather the strided source into one message.
        send->packed.resize(op->event.bytes);
        CopyPlan(op->src_layout, Packed(op->src_layout, op->elem_bytes),
                 op->elem_bytes)
            .CopyAll(op->src, send->packed.data());
        payload = send->packed.data();
      }
      for (int64_t off = 0; off < op->event.bytes; off += kMaxPiece) {
        const int64_t len = std::min(kMaxPiece, op->event.bytes - off);
        MPI_Isend(payload + off, static_cast<int>(len), MPI_BYTE,
                  out->dest_rank, kPayloadTag, comm_, &req);
        send->requests.push_back(req);
      }
    }
    sends_.push_back(std::move(send));
  }
  return !batch.empty();
}

void MpiTransport::HandleHeader(const Header& h, int source) {
  if (h.kind == Kind::kAbort) {
    host_->Abort(h.reason, /*notify_peers=*/false);
    return;
  }
  std::byte* heap = host_->HeapBase(h.dst_device);
  if (heap == nullptr || !host_->IsLocalDevice(h.dst_device)) {
    host_->Abort(absl::StrCat("rank ", rank_,
                                 " received a message for device ",
                                 h.dst_device, ", which it does not hold"),
                 /*notify_peers=*/true);
    return;
  }
  if (h.kind == Kind::kSignal) {
    CellAdd(reinterpret_cast<SemaphoreCell*>(heap + h.dst_offset), h.value);
    return;
  }
  auto recv = std::make_unique<PendingRecv>();
  recv->dst = heap + h.dst_offset;
  recv->dst_layout = h.dst_layout;
  recv->elem_bytes = h.elem_bytes;
  recv->bytes = h.value;
  recv->recv_cell = reinterpret_cast<SemaphoreCell*>(heap + h.sem_offset);
  std::byte* landing = recv->dst;
  if (!IsPacked(h.dst_layout, h.elem_bytes)) {
    recv->staging.resize(h.value);
    landing = recv->staging.data();
  }
  for (int64_t off = 0; off < h.value; off += kMaxPiece) {
    const int64_t len = std::min(kMaxPiece, h.value - off);
    MPI_Request req;
    MPI_Irecv(landing + off, static_cast<int>(len), MPI_BYTE, source,
              kPayloadTag, comm_, &req);
    recv->requests.push_back(req);
  }
  recvs_.push_back(std::move(recv));
}

bool MpiTransport::PollIncoming() {
  bool any = false;
  for (int i = 0; i < 64; ++i) {
    int flag = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kHeaderTag, comm_, &flag, &status);
    if (!flag) break;
    Header h;
    MPI_Recv(&h, sizeof(Header), MPI_BYTE, status.MPI_SOURCE, kHeaderTag, comm_,
             MPI_STATUS_IGNORE);
    HandleHeader(h, status.MPI_SOURCE);
    any = true;
  }
  return any;
}

bool MpiTransport::TestPending() {
  bool any = false;
  for (auto it = sends_.begin(); it != sends_.end();) {
    int done = 0;
    MPI_Testall(static_cast<int>((*it)->requests.size()),
                (*it)->requests.data(), &done, MPI_STATUSES_IGNORE);
    if (!done) {
      ++it;
      continue;
    }
    if ((*it)->op != nullptr) {
      // The source has been read: the sender's send semaphore may move.
      host_->CompleteDma(std::move((*it)->op));
    }
    it = sends_.erase(it);
    any = true;
  }
  for (auto it = recvs_.begin(); it != recvs_.end();) {
    int done = 0;
    MPI_Testall(static_cast<int>((*it)->requests.size()),
                (*it)->requests.data(), &done, MPI_STATUSES_IGNORE);
    if (!done) {
      ++it;
      continue;
    }
    PendingRecv& r = **it;
    if (!r.staging.empty()) {
      CopyPlan(Packed(r.dst_layout, r.elem_bytes), r.dst_layout, r.elem_bytes)
          .CopyAll(r.staging.data(), r.dst);
    }
    // The data is in place: now the receiver may see the bytes counted.
    CellAdd(r.recv_cell, r.bytes);
    it = recvs_.erase(it);
    any = true;
  }
  return any;
}

void MpiTransport::ProgressMain() {
  // Poll while traffic flows; when idle, back off from spinning to yielding
  // to short sleeps (woken at once by new outgoing work), so an idle launch
  // does not burn a core.
  int idle = 0;
  MPI_Request barrier = MPI_REQUEST_NULL;
  bool barrier_posted = false;
  for (;;) {
    bool did = PostOutgoing();
    did |= PollIncoming();
    did |= TestPending();
    if (did) {
      idle = 0;
      continue;
    }
    bool shutdown;
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown = shutdown_requested_ && outgoing_.empty();
    }
    if (shutdown && sends_.empty()) {
      if (!barrier_posted) {
        MPI_Ibarrier(comm_, &barrier);
        barrier_posted = true;
      }
      int done = 0;
      MPI_Test(&barrier, &done, MPI_STATUS_IGNORE);
      if (done && recvs_.empty()) return;
    }
    ++idle;
    if (idle < 200 || !sends_.empty() || !recvs_.empty() ||
        host_->DevicesWaiting()) {
      if (idle > 50) sched_yield();
      continue;
    }
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t us = std::min<int64_t>(500, (idle - 200) * 5 + 5);
    cv_.wait_for(lock, std::chrono::microseconds(us),
                 [this] { return !outgoing_.empty() || shutdown_requested_; });
  }
}

std::unique_ptr<Transport> MakeMpiTransport(TransportHost* host,
                                            ProcessGroup& processes) {
  return std::make_unique<MpiTransport>(
      host, static_cast<MpiProcessGroup&>(processes).comm());
}

}  // namespace meshdma::dma_internal
