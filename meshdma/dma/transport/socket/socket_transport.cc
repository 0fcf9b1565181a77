#include "meshdma/dma/transport/socket/socket_transport.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "meshdma/base/deadline.h"
#include "meshdma/base/env.h"
#include "meshdma/base/logging.h"
#include "meshdma/base/thread_name.h"
#include "meshdma/dma/transport/progress_policy.h"
#include "meshdma/dma/transport/wire.h"

namespace meshdma::dma_internal {
namespace {

using base_internal::Deadline;

// The first bytes on every connection: who connects, and that it is meshdma.
constexpr uint32_t kHelloMagic = 0x6d646d61;  // "mdma"
struct Hello {
  uint32_t magic;
  int32_t rank;
};
// Received bytes are read into a buffer of this size and parsed from it, so
// that small messages cost one recv(2) however many arrive together.
constexpr size_t kReceiveBufferBytes = 64 << 10;
// A payload with at least this much still to come is read straight into its
// destination, not through the buffer.
constexpr int64_t kDirectReadBytes = 32 << 10;
// A strided view is moved as an I/O vector of its contiguous runs when runs
// are at least this long and there are at most kMaxRuns of them; otherwise
// it is packed (sender) or staged (receiver) in one more copy.
constexpr int64_t kMinRunBytes = 256;
constexpr int64_t kMaxRuns = 4096;
// An abort's reason: longer ones are cut.
constexpr int64_t kMaxReasonBytes = 4 << 10;

std::string ErrnoText(int err) { return std::strerror(err); }

// `what` (a socket that could not be made or accepted) failed with `err`:
// ResourceExhausted when out of descriptors, saying for this process's limit
// what it may hold against what the transport needs (a connection to every
// other process of the launch, `peers`); Internal otherwise.
absl::Status SocketError(absl::string_view what, int err, int peers) {
  std::string text = absl::StrCat(what, ": ", ErrnoText(err));
  if (err == EMFILE) {
    rlimit limit{};
    getrlimit(RLIMIT_NOFILE, &limit);
    absl::StrAppend(&text, " (this process may hold ", limit.rlim_cur,
                    " open files, RLIMIT_NOFILE, `ulimit -n`; the TCP "
                    "transport holds a connection to each of ",
                    peers, " other processes)");
  }
  return err == EMFILE || err == ENFILE ? absl::ResourceExhaustedError(text)
                                        : absl::InternalError(text);
}

// What `Lose` says of a connection that closed (`error` empty) or failed.
std::string Broken(const std::string& error) {
  return absl::StrCat(error.empty() ? "closed" : "failed: ", error,
                      " (the process exited or died)");
}

// The contiguous runs of view `v` at `base`, in element order, appended to
// `out`; false (and `out` unchanged) when they are too many or too short.
bool AppendRuns(std::byte* base, const ViewLayout& v, int64_t elem_bytes,
                std::vector<iovec>& out) {
  int64_t counts[kMaxRank], strides[kMaxRank];
  int dims = 0;
  for (int d = 0; d < v.rank; ++d) {
    if (v.shape[d] == 1) continue;
    if (v.shape[d] == 0) return true;  // No bytes.
    counts[dims] = v.shape[d];
    strides[dims++] = v.byte_strides[d];
  }
  int64_t run = elem_bytes;
  while (dims > 0 && strides[dims - 1] == run) run *= counts[--dims];
  int64_t runs = 1;
  for (int d = 0; d < dims; ++d) runs *= counts[d];
  if (dims > 0 && (run < kMinRunBytes || runs > kMaxRuns)) return false;
  out.reserve(out.size() + runs);
  int64_t index[kMaxRank] = {};
  for (int64_t i = 0; i < runs; ++i) {
    int64_t at = 0;
    for (int d = 0; d < dims; ++d) at += index[d] * strides[d];
    out.push_back({base + at, static_cast<size_t>(run)});
    for (int d = dims - 1; d >= 0; --d) {
      if (++index[d] < counts[d]) break;
      index[d] = 0;
    }
  }
  return true;
}

// A position in an I/O vector that a partial read or write advances.
struct IoCursor {
  std::vector<iovec> iov;
  size_t index = 0;

  bool done() const { return index == iov.size(); }
  void Advance(size_t n) {
    while (n > 0 && index < iov.size()) {
      iovec& v = iov[index];
      const size_t take = std::min(n, v.iov_len);
      v.iov_base = static_cast<std::byte*>(v.iov_base) + take;
      v.iov_len -= take;
      n -= take;
      if (v.iov_len == 0) ++index;
    }
    while (index < iov.size() && iov[index].iov_len == 0) ++index;
  }
  int count() const {
    return static_cast<int>(std::min<size_t>(iov.size() - index, IOV_MAX));
  }
};

// Writes what the socket takes of the `n` buffers at `iov` without
// blocking: the bytes written, or -1 with errno. Whole messages in one call:
// writes capped at 64 KiB to 1 MiB were 1.3-2x slower for a 2 MiB put
// (`mpirun -np 2 --mca btl self,tcp -x MESHDMA_FORCE_INTERHOST=1
// meshdma-bench --collective ppermute -b 8 -e 16M -f 8`, a temporary cap).
ssize_t WriteSome(int fd, const iovec* iov, int n) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = std::min(n, IOV_MAX);
  return sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void SetNonBlocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK);
}

}  // namespace

class SocketTransport : public PolledTransport {
 public:
  // `fds[r]`: the connected socket to rank r (-1 for this rank).
  // `processes` (the group the connections were made over) is told when a
  // peer is lost, and must outlive the transport.
  SocketTransport(TransportHost* host, ProcessGroup* processes, int rank,
                  std::vector<int> fds);
  ~SocketTransport() override;

  absl::string_view name() const override { return "tcp"; }
  bool MapDestination(DmaOp&) override { return false; }
  void Put(std::unique_ptr<DmaOp> op) override;
  void Signal(int target_device, int64_t sem_offset, int64_t inc,
              std::span<const uint32_t> check_clock) override;
  bool Poll() override;
  ProgressPolicy& progress() override { return progress_; }
  bool HasPending() const override {
    return queued_.load(std::memory_order_relaxed) > 0 ||
           receiving_.load(std::memory_order_relaxed) > 0;
  }
  void BroadcastAbort(const std::string& reason) override;
  void SendCallNote(int rank, int src_device,
                    std::span<const int64_t, kCallNoteWords> words) override;
  absl::Status Quiesce(absl::Duration timeout) override;
  absl::Status Shutdown() override;

 private:
  // A message the socket did not take at once, with what it still needs.
  struct OutMessage {
    std::vector<std::byte> head;    // Header and extras (and an abort reason).
    std::vector<std::byte> packed;  // A source too fragmented for a vector.
    IoCursor cursor;                // What is left to write.
    std::unique_ptr<DmaOp> op;      // Completes once its source is written.
  };
  struct Peer {
    int rank = -1;
    int fd = -1;
    // Sending, under `send_mu`: messages behind a partly written one.
    std::mutex send_mu;
    std::deque<std::unique_ptr<OutMessage>> queue;
    // Receiving, under the transport's `recv_mu_`.
    std::vector<std::byte> buffer;  // kReceiveBufferBytes (or a longer head).
    size_t begin = 0, end = 0;      // Unparsed bytes in `buffer`.
    bool in_payload = false;        // A put's payload is being read.
    WireHeader header{};
    std::vector<uint32_t> clock;
    WireTarget target;
    IoCursor payload;  // Where the rest of the payload goes.
    int64_t payload_left = 0;
    std::vector<std::byte> staging;    // A fragmented destination's payload.
    int64_t flushed = 0;               // Latest flush epoch handled.
    std::atomic<bool> goodbye{false};  // The peer sent its last message.
    std::atomic<bool> lost{false};     // The connection failed or closed early.
  };

  // Writes `head` and then `payload` to `peer`, or queues what the socket
  // does not take behind its earlier messages. `op` completes once
  // `payload` (which it owns) is written; `head` is copied when queued.
  void Send(Peer& peer, std::span<const std::byte> head, IoCursor payload,
            std::vector<std::byte> packed, std::unique_ptr<DmaOp> op);
  // Writes what `peer`'s queue holds; the caller holds `peer.send_mu`. Moves
  // ops whose sources are written to `done`. False when the connection
  // failed (the caller aborts, after unlocking).
  bool FlushQueueLocked(Peer& peer, std::vector<std::unique_ptr<DmaOp>>& done);
  // Writes queued bytes to every peer whose lock is free; true if any moved.
  bool FlushQueues();
  // Reads and handles what has arrived; the caller holds `recv_mu_`.
  bool ReceiveLocked();
  bool ReceiveFrom(Peer& peer);
  // Reads more of `peer`'s stream into its buffer: false when nothing came
  // (or the connection is gone).
  bool Fill(Peer& peer);
  // Parses one message from the buffered bytes; false when more are needed.
  bool ParseMessage(Peer& peer);
  void FinishPayload(Peer& peer);
  // One round of progress from the calling thread.
  bool Progress();
  // `peer`'s connection failed or closed before its goodbye: the launch
  // fails, naming the peer.
  void Lose(Peer& peer, const std::string& what);
  void Wake();
  void ProgressMain();
  // Sends a header-only message of `kind` carrying `value` to every live
  // peer.
  void SendToAll(WireKind kind, int64_t value);
  // Progresses until `done()` holds (under `recv_mu_`) or `deadline`.
  bool ProgressUntil(const Deadline& deadline,
                     const std::function<bool()>& done);
  std::string PeersWhere(const std::function<bool(const Peer&)>& pred) const;

  TransportHost* const host_;
  ProcessGroup* const processes_;
  const int rank_;
  std::vector<std::unique_ptr<Peer>> peers_;  // Indexed by rank; null: self.
  std::vector<Peer*> live_;                   // The other ranks.

  std::mutex recv_mu_;
  std::atomic<int> queued_{0};     // Messages waiting in send queues.
  std::atomic<int> receiving_{0};  // Payloads being read.
  // Told when devices write, poll or stop to sleep; decides when the
  // progress thread looks at the sockets.
  ProgressPolicy progress_;
  int64_t flush_epoch_ = 0;

  int wake_fd_ = -1;  // An eventfd: wakes the progress thread.
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  bool shut_down_ = false;
};

SocketTransport::SocketTransport(TransportHost* host, ProcessGroup* processes,
                                 int rank, std::vector<int> fds)
    : host_(host), processes_(processes), rank_(rank), progress_(host) {
  progress_.SetWake([this] { Wake(); });
  for (int r = 0; r < static_cast<int>(fds.size()); ++r) {
    if (r == rank) {
      peers_.push_back(nullptr);
      continue;
    }
    auto peer = std::make_unique<Peer>();
    peer->rank = r;
    peer->fd = fds[r];
    peer->buffer.resize(kReceiveBufferBytes);
    live_.push_back(peer.get());
    peers_.push_back(std::move(peer));
  }
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  thread_ = std::thread([this] { ProgressMain(); });
  base_internal::NameThread(thread_, "meshdma-tcp");
}

SocketTransport::~SocketTransport() {
  Shutdown().IgnoreError();
  for (Peer* p : live_) close(p->fd);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void SocketTransport::Wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
}

void SocketTransport::Lose(Peer& peer, const std::string& what) {
  if (peer.lost.exchange(true)) return;
  std::vector<std::unique_ptr<DmaOp>> abandoned;
  {
    // Nothing more reaches the peer: its queue is dropped, and its ops go
    // back to their issuers as abandoned, so that a closing scope does not
    // wait for them. Under `send_mu`, no write is reading them.
    std::lock_guard<std::mutex> lock(peer.send_mu);
    for (auto& out : peer.queue) {
      if (out->op != nullptr) abandoned.push_back(std::move(out->op));
    }
    queued_.fetch_sub(static_cast<int>(peer.queue.size()),
                      std::memory_order_relaxed);
    peer.queue.clear();
  }
  const std::string reason = absl::StrCat(
      "rank ", rank_, ": the connection to rank ", peer.rank, " ", what);
  processes_->MarkPeersLost(reason);
  host_->Abort(reason, /*notify_peers=*/true);
  for (auto& op : abandoned) host_->AbandonDma(std::move(op));
}

void SocketTransport::Send(Peer& peer, std::span<const std::byte> head,
                           IoCursor payload, std::vector<std::byte> packed,
                           std::unique_ptr<DmaOp> op) {
  progress_.DeviceEntered();
  std::vector<std::unique_ptr<DmaOp>> done;
  std::unique_ptr<DmaOp> abandoned;  // The peer is lost: it never completes.
  bool failed = false;
  int err = 0;
  {
    std::lock_guard<std::mutex> lock(peer.send_mu);
    size_t written = 0;
    const size_t total_head = head.size();
    // Step 1: write what the socket takes now (nothing to a lost peer, or
    // behind queued messages).
    if (peer.lost.load(std::memory_order_relaxed)) {
      abandoned = std::move(op);  // As in Lose.
      payload = IoCursor{};
      written = total_head;
    } else if (peer.queue.empty()) {
      // The common case: the socket takes it all in one call.
      iovec iov[1 + 16];
      int n = 0;
      iov[n++] = {const_cast<std::byte*>(head.data()), head.size()};
      for (size_t i = payload.index; i < payload.iov.size() && n < 17; ++i) {
        iov[n++] = payload.iov[i];
      }
      const ssize_t w = WriteSome(peer.fd, iov, n);
      if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        failed = true;
        err = errno;
        abandoned = std::move(op);  // As in Lose.
      } else if (w > 0) {
        written = static_cast<size_t>(w);
      }
    }
    // Step 2: done, or queue the rest with its own copy of the head.
    if (!failed) {
      const size_t from_head = std::min(written, total_head);
      payload.Advance(written - from_head);
      if (from_head == total_head && payload.done()) {
        if (op != nullptr) done.push_back(std::move(op));
      } else {
        auto out = std::make_unique<OutMessage>();
        out->head.assign(head.begin() + from_head, head.end());
        out->packed = std::move(packed);
        IoCursor& c = out->cursor;
        if (!out->head.empty()) {
          c.iov.push_back({out->head.data(), out->head.size()});
        }
        // Packed bytes keep their address when the vector moves: the
        // cursor's runs still point into them.
        c.iov.insert(c.iov.end(), payload.iov.begin() + payload.index,
                     payload.iov.end());
        out->op = std::move(op);
        peer.queue.push_back(std::move(out));
        // The issuing device writes the rest when it waits; the progress
        // thread takes over soon after if it does not (ProgressMain).
        queued_.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
  // Step 3: outside the lock, complete, lose or abandon. A device that sent
  // counts as polling: it progresses the sockets when it waits, and until
  // then the progress thread stays off the core.
  progress_.DeviceSent();
  progress_.DeviceLeft();
  for (auto& d : done) host_->CompleteDma(std::move(d));
  if (failed) Lose(peer, Broken(ErrnoText(err)));
  if (abandoned != nullptr) host_->AbandonDma(std::move(abandoned));
}

bool SocketTransport::FlushQueueLocked(
    Peer& peer, std::vector<std::unique_ptr<DmaOp>>& done) {
  while (!peer.queue.empty()) {
    OutMessage& out = *peer.queue.front();
    while (!out.cursor.done()) {
      const ssize_t w =
          WriteSome(peer.fd, out.cursor.iov.data() + out.cursor.index,
                    out.cursor.count());
      if (w < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
          return true;
        }
        return false;
      }
      out.cursor.Advance(static_cast<size_t>(w));
    }
    if (out.op != nullptr) done.push_back(std::move(out.op));
    peer.queue.pop_front();
    queued_.fetch_sub(1, std::memory_order_relaxed);
  }
  return true;
}

bool SocketTransport::FlushQueues() {
  if (queued_.load(std::memory_order_relaxed) == 0) return false;
  bool any = false;
  for (Peer* p : live_) {
    std::vector<std::unique_ptr<DmaOp>> done;
    bool ok = true;
    int err = 0;
    {
      std::unique_lock<std::mutex> lock(p->send_mu, std::try_to_lock);
      if (!lock.owns_lock() || p->queue.empty()) continue;
      const size_t before = p->queue.size();
      ok = FlushQueueLocked(*p, done);
      err = errno;
      any |= p->queue.size() != before;
    }
    for (auto& d : done) host_->CompleteDma(std::move(d));
    if (!ok) Lose(*p, Broken(ErrnoText(err)));
  }
  return any;
}

void SocketTransport::Put(std::unique_ptr<DmaOp> op) {
  WireHeader h = PutHeader(*op);
  const std::vector<uint32_t>& clock = op->check_clock;
  // A contiguous destination needs no layout: it is `value` bytes from
  // `dst_offset`. Checked mode reports the view as the issuer wrote it.
  const bool layout =
      !IsPacked(op->dst_layout, op->elem_bytes) || !clock.empty();
  h.has_layout = layout ? 1 : 0;
  h.check_words = static_cast<int32_t>(clock.size());
  const size_t clock_bytes = clock.size() * sizeof(uint32_t);
  // The head on the stack when it is small (always, outside checked mode).
  constexpr size_t kStackHead = kWireHeaderBytes + sizeof(ViewLayout);
  std::byte stack_head[kStackHead];
  std::vector<std::byte> heap_head;
  const size_t head_bytes =
      kWireHeaderBytes + (layout ? sizeof(ViewLayout) : 0) + clock_bytes;
  std::byte* head = stack_head;
  if (head_bytes > kStackHead) {
    heap_head.resize(head_bytes);
    head = heap_head.data();
  }
  std::memcpy(head, &h, kWireHeaderBytes);
  if (layout) {
    std::memcpy(head + kWireHeaderBytes, &op->dst_layout, sizeof(ViewLayout));
  }
  if (clock_bytes > 0) {
    std::memcpy(head + head_bytes - clock_bytes, clock.data(), clock_bytes);
  }
  IoCursor payload;
  std::vector<std::byte> packed;
  std::byte* src = const_cast<std::byte*>(op->src);
  if (op->event.bytes > 0) {
    if (IsPacked(op->src_layout, op->elem_bytes)) {
      payload.iov.push_back({src, static_cast<size_t>(op->event.bytes)});
    } else if (!AppendRuns(src, op->src_layout, op->elem_bytes, payload.iov)) {
      packed.resize(op->event.bytes);
      CopyPlan(op->src_layout, Packed(op->src_layout, op->elem_bytes),
               op->elem_bytes)
          .CopyAll(op->src, packed.data());
      payload.iov.push_back({packed.data(), packed.size()});
    }
  }
  Peer* peer = peers_[host_->RankOf(h.dst_device)].get();
  Send(*peer, std::span<const std::byte>(head, head_bytes), std::move(payload),
       std::move(packed), std::move(op));
}

void SocketTransport::Signal(int target_device, int64_t sem_offset, int64_t inc,
                             std::span<const uint32_t> check_clock) {
  WireHeader h = SignalHeader(target_device, sem_offset, inc);
  h.check_words = static_cast<int32_t>(check_clock.size());
  Peer& peer = *peers_[host_->RankOf(target_device)];
  if (check_clock.empty()) {  // The header alone, from the stack.
    Send(peer,
         std::span<const std::byte>(reinterpret_cast<const std::byte*>(&h),
                                    kWireHeaderBytes),
         IoCursor{}, {}, nullptr);
    return;
  }
  std::vector<std::byte> head(kWireHeaderBytes +
                              check_clock.size() * sizeof(uint32_t));
  std::memcpy(head.data(), &h, kWireHeaderBytes);
  std::memcpy(head.data() + kWireHeaderBytes, check_clock.data(),
              check_clock.size() * sizeof(uint32_t));
  Send(peer, head, IoCursor{}, {}, nullptr);
}

void SocketTransport::SendToAll(WireKind kind, int64_t value) {
  WireHeader h{};
  h.kind = kind;
  h.value = value;
  const auto* bytes = reinterpret_cast<const std::byte*>(&h);
  for (Peer* p : live_) {
    if (p->lost.load()) continue;
    Send(*p, std::span<const std::byte>(bytes, kWireHeaderBytes), IoCursor{},
         {}, nullptr);
  }
}

void SocketTransport::BroadcastAbort(const std::string& reason) {
  WireHeader h{};
  h.kind = WireKind::kAbort;
  const std::string cut =
      reason.substr(0, static_cast<size_t>(kMaxReasonBytes));
  h.inline_bytes = static_cast<int32_t>(cut.size());
  std::vector<std::byte> head(kWireHeaderBytes + cut.size());
  std::memcpy(head.data(), &h, kWireHeaderBytes);
  std::memcpy(head.data() + kWireHeaderBytes, cut.data(), cut.size());
  for (Peer* p : live_) {
    if (!p->lost.load()) Send(*p, head, IoCursor{}, {}, nullptr);
  }
}

void SocketTransport::SendCallNote(
    int rank, int src_device, std::span<const int64_t, kCallNoteWords> words) {
  Peer* peer = peers_[rank].get();
  if (peer == nullptr || peer->lost.load()) return;
  WireHeader h{};
  h.kind = WireKind::kCallNote;
  h.src_device = src_device;
  h.inline_bytes = kCallNoteWireBytes;
  std::vector<std::byte> head(kWireHeaderBytes + kCallNoteWireBytes);
  std::memcpy(head.data(), &h, kWireHeaderBytes);
  std::memcpy(head.data() + kWireHeaderBytes, words.data(), kCallNoteWireBytes);
  Send(*peer, head, IoCursor{}, {}, nullptr);
}

bool SocketTransport::Fill(Peer& peer) {
  if (peer.lost.load(std::memory_order_relaxed) || peer.fd < 0) return false;
  if (peer.begin == peer.end) {
    peer.begin = peer.end = 0;
  } else if (peer.end == peer.buffer.size()) {
    // Make room: the unparsed bytes move to the front.
    std::memmove(peer.buffer.data(), peer.buffer.data() + peer.begin,
                 peer.end - peer.begin);
    peer.end -= peer.begin;
    peer.begin = 0;
  }
  const ssize_t n = recv(peer.fd, peer.buffer.data() + peer.end,
                         peer.buffer.size() - peer.end, MSG_DONTWAIT);
  if (n > 0) {
    peer.end += static_cast<size_t>(n);
    return true;
  }
  if (n == 0) {
    if (!peer.goodbye) Lose(peer, Broken(""));
    // After its goodbye nothing more comes: stop reading it.
    return false;
  }
  if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    Lose(peer, Broken(ErrnoText(errno)));
  }
  return false;
}

void SocketTransport::FinishPayload(Peer& peer) {
  const WireHeader& h = peer.header;
  if (!peer.staging.empty()) {
    CopyPlan(Packed(peer.target.dst_layout, h.elem_bytes),
             peer.target.dst_layout, h.elem_bytes)
        .CopyAll(peer.staging.data(), peer.target.dst);
    peer.staging.clear();
    peer.staging.shrink_to_fit();
  }
  if (!peer.clock.empty()) {
    host_->OnCheckClock(h.dst_device, h.src_device, h.sem_offset, peer.clock,
                        h.check_seq, h.dst_offset, &peer.target.dst_layout,
                        h.elem_bytes);
  }
  CellAdd(peer.target.cell, h.value);  // The data is in place.
}

bool SocketTransport::ParseMessage(Peer& peer) {
  // Step 1: a whole header and its extras in the buffer.
  const size_t avail = peer.end - peer.begin;
  if (avail < kWireHeaderBytes) return false;
  WireHeader h;
  std::memcpy(&h, peer.buffer.data() + peer.begin, kWireHeaderBytes);
  const int64_t extras = WireExtrasBytes(h);
  // Only an abort's reason and a call note travel after the header.
  const bool trails =
      h.kind == WireKind::kAbort || h.kind == WireKind::kCallNote;
  const int64_t trailer = trails ? h.inline_bytes : 0;
  if (extras < 0 || trailer > kMaxReasonBytes ||
      (!trails && h.inline_bytes != 0) ||
      (h.kind == WireKind::kCallNote && trailer != kCallNoteWireBytes)) {
    Lose(peer,
         absl::StrCat("carried a malformed message (", h.check_words,
                      " clock words, ", h.inline_bytes, " payload bytes)"));
    return false;
  }
  const size_t head_bytes = kWireHeaderBytes + extras + trailer;
  if (avail < head_bytes) {
    if (head_bytes > peer.buffer.size()) peer.buffer.resize(head_bytes);
    return false;
  }
  const std::byte* after = peer.buffer.data() + peer.begin + kWireHeaderBytes;
  peer.begin += head_bytes;
  // Step 2: control messages.
  switch (h.kind) {
    case WireKind::kAbort:
      host_->Abort(std::string(reinterpret_cast<const char*>(after), trailer),
                   /*notify_peers=*/false);
      return true;
    case WireKind::kCallNote: {
      std::array<int64_t, kCallNoteWords> words;
      std::memcpy(words.data(), after, kCallNoteWireBytes);
      host_->OnCallNote(h.src_device, words);
      return true;
    }
    case WireKind::kFlush:
      peer.flushed = std::max(peer.flushed, h.value);
      return true;
    case WireKind::kGoodbye:
      peer.goodbye = true;
      return true;
    default:
      break;
  }
  // Step 3: where it lands; a signal moves its semaphore.
  ViewLayout sent_layout;
  if (h.has_layout == 1) std::memcpy(&sent_layout, after, sizeof(ViewLayout));
  absl::StatusOr<WireTarget> target =
      ResolveWireTarget(*host_, rank_, peer.rank, h, &sent_layout);
  if (!target.ok()) {
    // The stream cannot be trusted past a bad message: stop reading it.
    peer.lost.store(true);
    host_->Abort(std::string(target.status().message()),
                 /*notify_peers=*/true);
    return false;
  }
  const std::span<const uint32_t> clock(
      reinterpret_cast<const uint32_t*>(
          after + (h.has_layout == 1 ? sizeof(ViewLayout) : 0)),
      static_cast<size_t>(h.check_words));
  if (h.kind == WireKind::kSignal) {
    if (!clock.empty()) {
      host_->OnCheckClock(h.dst_device, -1, h.dst_offset, clock, 0, 0, nullptr,
                          0);
    }
    CellAdd(target->cell, h.value);
    return true;
  }
  // Step 4: a put's payload follows: read it straight into the view's runs
  // (or a staging buffer).
  peer.header = h;
  peer.target = *target;
  peer.clock.assign(clock.begin(), clock.end());
  peer.payload = IoCursor{};
  if (h.value > 0) {
    const ViewLayout& dst = target->dst_layout;
    if (IsPacked(dst, h.elem_bytes)) {
      peer.payload.iov.push_back({target->dst, static_cast<size_t>(h.value)});
    } else if (!AppendRuns(target->dst, dst, h.elem_bytes, peer.payload.iov)) {
      peer.staging.resize(h.value);
      peer.payload.iov.push_back({peer.staging.data(), peer.staging.size()});
    }
  }
  peer.payload_left = h.value;
  peer.in_payload = true;
  receiving_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool SocketTransport::ReceiveFrom(Peer& peer) {
  // Step 1: nothing more from a lost peer.
  if (peer.lost.load(std::memory_order_relaxed)) {
    if (peer.in_payload) {  // It never completes.
      peer.in_payload = false;
      receiving_.fetch_sub(1, std::memory_order_relaxed);
    }
    return false;
  }
  bool did = false;
  for (;;) {
    // Step 2: inside a put's payload: the bytes buffered with its header,
    // then straight from the socket; the put lands once all are in.
    if (peer.in_payload) {
      if (peer.payload_left > 0) {
        const size_t buffered = peer.end - peer.begin;
        if (buffered > 0) {
          // What came with the header: copied out of the buffer.
          size_t take = std::min<size_t>(buffered, peer.payload_left);
          peer.payload_left -= take;
          const std::byte* from = peer.buffer.data() + peer.begin;
          peer.begin += take;
          while (take > 0) {
            iovec& v = peer.payload.iov[peer.payload.index];
            const size_t n = std::min(take, v.iov_len);
            std::memcpy(v.iov_base, from, n);
            from += n;
            take -= n;
            peer.payload.Advance(n);
          }
        } else if (peer.payload_left >= kDirectReadBytes) {
          // The rest goes straight into the destination.
          const ssize_t n =
              readv(peer.fd, peer.payload.iov.data() + peer.payload.index,
                    peer.payload.count());
          if (n > 0) {
            peer.payload.Advance(static_cast<size_t>(n));
            peer.payload_left -= n;
          } else {
            if (n == 0) {
              Lose(peer, Broken(""));
            } else if (errno != EAGAIN && errno != EWOULDBLOCK &&
                       errno != EINTR) {
              Lose(peer, Broken(ErrnoText(errno)));
            }
            return did;
          }
        } else if (!Fill(peer)) {
          return did;
        }
        did = true;
        if (peer.payload_left > 0) continue;
      }
      peer.in_payload = false;
      receiving_.fetch_sub(1, std::memory_order_relaxed);
      FinishPayload(peer);
      did = true;
      continue;
    }
    // Step 3: the next message, reading more when it is not all buffered.
    if (peer.lost.load(std::memory_order_relaxed)) return did;
    if (ParseMessage(peer)) {
      did = true;
      continue;
    }
    if (peer.lost.load(std::memory_order_relaxed) || peer.goodbye) return did;
    if (!Fill(peer)) return did;
  }
}

bool SocketTransport::ReceiveLocked() {
  bool did = false;
  if (live_.size() <= 2) {
    for (Peer* p : live_) did |= ReceiveFrom(*p);
    return did;
  }
  // Many peers: one poll(2) finds those with bytes, instead of a recv(2)
  // each. Buffered bytes and payloads in progress are looked at regardless.
  std::vector<pollfd> fds;
  fds.reserve(live_.size());
  for (Peer* p : live_) fds.push_back({p->fd, POLLIN, 0});
  poll(fds.data(), fds.size(), 0);
  for (size_t i = 0; i < live_.size(); ++i) {
    Peer& p = *live_[i];
    if (fds[i].revents != 0 || p.begin != p.end) did |= ReceiveFrom(p);
  }
  return did;
}

bool SocketTransport::Progress() {
  bool did = FlushQueues();
  std::unique_lock<std::mutex> lock(recv_mu_, std::try_to_lock);
  if (lock.owns_lock()) did |= ReceiveLocked();
  return did;
}

bool SocketTransport::Poll() {
  progress_.DevicePolled();
  progress_.DeviceEntered();
  const bool did = Progress();
  progress_.DeviceLeft();
  return did;
}

void SocketTransport::ProgressMain() {
  // While devices poll they move everything: this thread only sleeps on its
  // eventfd. Otherwise it sleeps in poll(2) on the sockets (for bytes to
  // read, and for room where a queue waits), so that it costs a core only
  // while traffic moves. How long, is `progress_`'s.
  std::vector<pollfd> fds;
  while (!stopping_.load(std::memory_order_acquire)) {
    const bool devices_polling = progress_.DevicesPolling();
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    if (!devices_polling) {
      for (Peer* p : live_) {
        if (p->lost.load(std::memory_order_relaxed) || p->goodbye) continue;
        short events = POLLIN;
        {
          std::lock_guard<std::mutex> lock(p->send_mu);
          if (!p->queue.empty()) events |= POLLOUT;
        }
        fds.push_back({p->fd, events, 0});
      }
    }
    const int64_t us = ProgressPolicy::WaitUs(devices_polling, HasPending(),
                                              /*watching=*/true);
    const timespec timeout{us / 1'000'000, (us % 1'000'000) * 1'000};
    ppoll(fds.data(), fds.size(), &timeout, nullptr);
    if (fds[0].revents != 0) {
      uint64_t count;
      [[maybe_unused]] ssize_t n = read(wake_fd_, &count, sizeof(count));
    }
    if (stopping_.load(std::memory_order_acquire)) break;
    if (progress_.DevicesPolling()) continue;
    bool moved = false;
    while (Progress() && !progress_.DevicesPolling()) moved = true;
    if (ProgressPolicy::YieldToDeviceInside(moved,
                                            /*watching=*/fds.size() > 1)) {
      sched_yield();
    }
  }
}

std::string SocketTransport::PeersWhere(
    const std::function<bool(const Peer&)>& pred) const {
  std::vector<int> ranks;
  for (const Peer* p : live_) {
    if (pred(*p)) ranks.push_back(p->rank);
  }
  return absl::StrJoin(ranks, ", ");
}

bool SocketTransport::ProgressUntil(const Deadline& deadline,
                                    const std::function<bool()>& done) {
  for (;;) {
    FlushQueues();
    {
      std::lock_guard<std::mutex> lock(recv_mu_);
      ReceiveLocked();
      if (done()) return true;
    }
    if (deadline.Expired()) return false;
    // Sleep until a socket has something, briefly.
    std::vector<pollfd> fds;
    for (Peer* p : live_) {
      if (!p->lost.load() && !p->goodbye) fds.push_back({p->fd, POLLIN, 0});
    }
    poll(fds.data(), fds.size(), 1);
  }
}

absl::Status SocketTransport::Quiesce(absl::Duration timeout) {
  int64_t epoch;
  {
    std::lock_guard<std::mutex> lock(recv_mu_);
    epoch = ++flush_epoch_;
  }
  SendToAll(WireKind::kFlush, epoch);
  const auto flushed = [&] {
    if (queued_.load() > 0) return false;
    for (Peer* p : live_) {
      if (!p->lost.load() && p->flushed < epoch) return false;
    }
    return true;
  };
  if (ProgressUntil(Deadline::After(timeout), flushed)) {
    const std::string lost =
        PeersWhere([](const Peer& p) { return p.lost.load(); });
    if (lost.empty()) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat("recovery on rank ", rank_,
                                               ": the connection to rank(s) ",
                                               lost, " is lost"));
  }
  const std::string reason = absl::StrCat(
      "recovery on rank ", rank_, ": rank(s) ",
      PeersWhere([&](const Peer& p) { return p.flushed < epoch; }),
      " did not flush their traffic within ", absl::FormatDuration(timeout),
      " (dead, stuck, or in another call)");
  processes_->MarkPeersLost(reason);
  return absl::DeadlineExceededError(reason);
}

absl::Status SocketTransport::Shutdown() {
  if (shut_down_) return absl::OkStatus();
  shut_down_ = true;
  stopping_.store(true, std::memory_order_release);
  Wake();
  thread_.join();
  // A goodbye behind this process's last message; then every peer's.
  SendToAll(WireKind::kGoodbye, 0);
  const absl::Duration timeout = host_->shutdown_timeout();
  const auto all_said = [&] {
    if (queued_.load() > 0) return false;
    for (Peer* p : live_) {
      if (!p->lost.load() && !p->goodbye) return false;
    }
    return true;
  };
  const bool done = ProgressUntil(Deadline::After(timeout), all_said);
  for (Peer* p : live_) shutdown(p->fd, SHUT_RDWR);
  if (done) return absl::OkStatus();
  const std::string reason = absl::StrCat(
      "TCP transport shutdown on rank ", rank_, ": rank(s) ",
      PeersWhere([](const Peer& p) { return !p.lost && !p.goodbye; }),
      " did not finish within ", absl::FormatDuration(timeout),
      " (dead, stuck, or still in another call)");
  processes_->MarkPeersLost(reason);
  return absl::DeadlineExceededError(reason);
}

bool HostHasRdmaDevice() {
  DIR* dir = opendir("/sys/class/infiniband");
  if (dir == nullptr) return false;
  bool any = false;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') any = true;
  }
  closedir(dir);
  return any;
}

namespace {

// The IPv4 address to listen on (see kSocketInterfaceEnv).
absl::StatusOr<in_addr> ListenAddress(bool one_machine) {
  const std::optional<std::string> wanted_env =
      base_internal::EnvString(config::kSocketInterface);
  const char* wanted = wanted_env.has_value() ? wanted_env->c_str() : nullptr;
  in_addr addr{};
  if ((wanted == nullptr || *wanted == '\0') && one_machine) {
    addr.s_addr = htonl(INADDR_LOOPBACK);
    return addr;
  }
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return absl::InternalError(
        absl::StrCat("getifaddrs failed: ", ErrnoText(errno)));
  }
  std::optional<in_addr> found;
  for (ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if (!(i->ifa_flags & IFF_UP)) continue;
    const bool named = wanted != nullptr && *wanted != '\0';
    // Unnamed: not a loopback, nor a bridge or tunnel that containers and
    // virtual machines add (they do not reach other hosts).
    const absl::string_view name = i->ifa_name;
    const bool virtual_bridge = absl::StartsWith(name, "docker") ||
                                absl::StartsWith(name, "virbr") ||
                                absl::StartsWith(name, "veth");
    if (named ? name != wanted
              : (i->ifa_flags & IFF_LOOPBACK) != 0 || virtual_bridge) {
      continue;
    }
    found = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr;
  }
  freeifaddrs(list);
  if (found) return *found;
  if (wanted != nullptr && *wanted != '\0') {
    return absl::InvalidArgumentError(
        absl::StrCat(kSocketInterfaceEnv, "=", wanted,
                     " names no interface that is up with an IPv4 address"));
  }
  return absl::UnavailableError(
      absl::StrCat("no network interface is up with an IPv4 address; name "
                   "one with ",
                   kSocketInterfaceEnv));
}

// What /proc/sys/net/ipv4/`name` holds, without its line break.
std::string ProcNetIpv4(const char* name) {
  std::string text;
  if (FILE* f =
          std::fopen(absl::StrCat("/proc/sys/net/ipv4/", name).c_str(), "r")) {
    char line[512];
    if (std::fgets(line, sizeof(line), f) != nullptr) text = line;
    std::fclose(f);
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) {
    text.pop_back();
  }
  return text;
}

// The congestion control to set on every connection, or empty to keep the
// kernel's default. CUBIC unless asked otherwise: the kernel's default here
// was BBR, whose pacing held exchanges of 1-16 MiB over one connection each
// way to about half the rate at random times, Open MPI's connections too
// (`mpirun -np 2 --mca btl self,tcp socket-exchange-probe --rounds 3
// --congestion bbr|cubic`).
absl::StatusOr<std::string> CongestionControl(const TcpCongestion& asked) {
  constexpr char kDefault[] = "cubic";
  if (asked.name == "system") return std::string();
  const std::string name = asked.name.empty() ? kDefault : asked.name;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool set = fd >= 0 && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION,
                                         name.data(), name.size()) == 0;
  const int err = errno;
  if (fd >= 0) close(fd);
  if (set) return name;
  if (asked.name.empty()) {
    MESHDMA_LOG(kInfo, kLogTransport, "TCP transport: the kernel refused ",
                kDefault, " (", ErrnoText(err), "); its default ",
                ProcNetIpv4("tcp_congestion_control"), " stays");
    return std::string();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      asked.source, "=", name, ": the kernel refused it (", ErrnoText(err),
      "); this process may set ", ProcNetIpv4("tcp_allowed_congestion_control"),
      ", or \"system\" keeps the kernel's default"));
}

// Sets `congestion` (unless empty) on a socket before it listens or
// connects, so that the connection starts under it; a socket accepted from a
// listener starts under the listener's. Set on a connection that had started
// under the kernel's default BBR, CUBIC left a KV-cache transfer of 16 MiB
// after an idle gap taking 2-3 times as long at random: the receiver got one
// 64 KiB segment at a time at a rising rate, as from a paced sender
// (`mpirun -np 2 --mca btl self,tcp -x MESHDMA_FORCE_INTERHOST=1
// meshdma-bench-kv --seq_min 16 --seq_max 1024`). Refused only if the kernel
// changed its mind since CongestionControl: the connection keeps the default.
void SetCongestion(int fd, const std::string& congestion) {
  if (fd < 0 || congestion.empty()) return;
  setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, congestion.data(),
             congestion.size());
}

// Reads or writes exactly `n` bytes of a blocking socket before `deadline`.
bool ExactIo(int fd, void* data, size_t n, bool write_it,
             const Deadline& deadline) {
  auto* at = static_cast<std::byte*>(data);
  while (n > 0) {
    pollfd p{fd, static_cast<short>(write_it ? POLLOUT : POLLIN), 0};
    const int64_t left_ms = deadline.RemainingNanos() / 1'000'000;
    if (poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 1000))) <= 0) {
      if (deadline.Expired()) return false;
      continue;
    }
    const ssize_t k = write_it ? send(fd, at, n, MSG_NOSIGNAL | MSG_DONTWAIT)
                               : recv(fd, at, n, MSG_DONTWAIT);
    if (k == 0 && !write_it) return false;
    if (k < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      return false;
    }
    at += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

class FdCloser {
 public:
  explicit FdCloser(std::vector<int>& fds) : fds_(fds) {}
  ~FdCloser() {
    if (!released_) {
      for (int fd : fds_) {
        if (fd >= 0) close(fd);
      }
    }
  }
  void Release() { released_ = true; }

 private:
  std::vector<int>& fds_;
  bool released_ = false;
};

// Step 1 of MakeSocketTransport: a listening socket on `addr`, any port,
// running `congestion`; `*mine` becomes "address:port".
absl::StatusOr<int> Listen(const in_addr& addr,
                           const absl::StatusOr<std::string>& congestion,
                           int size, std::string* mine) {
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (congestion.ok()) SetCongestion(listener, *congestion);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr = addr;
  sa.sin_port = 0;
  socklen_t len = sizeof(sa);
  if (listener >= 0 &&
      bind(listener, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0 &&
      listen(listener, size) == 0 &&
      getsockname(listener, reinterpret_cast<sockaddr*>(&sa), &len) == 0) {
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &sa.sin_addr, text, sizeof(text));
    *mine = absl::StrCat(text, ":", ntohs(sa.sin_port));
    return listener;
  }
  const int err = errno;
  if (listener >= 0) close(listener);
  return SocketError("cannot listen on a TCP port", err, size - 1);
}

// Step 3: a connection to every lower rank, at the addresses `all` holds,
// each greeted with this rank's Hello, into `fds`. The listener's backlog
// takes the connection before that rank accepts it, so nobody waits in a
// cycle.
absl::Status ConnectToLowerRanks(int rank, int size,
                                 const std::vector<std::string>& all,
                                 const std::string& congestion,
                                 const Deadline& deadline,
                                 std::vector<int>& fds) {
  for (int r = 0; r < rank; ++r) {
    std::pair<std::string, std::string> hp =
        absl::StrSplit(all[r], absl::MaxSplits(':', 1));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    int port = 0;
    if (inet_pton(AF_INET, hp.first.c_str(), &sa.sin_addr) != 1 ||
        !absl::SimpleAtoi(hp.second, &port)) {
      return absl::InternalError(
          absl::StrCat("TCP transport: rank ", r, " sent address ", all[r]));
    }
    sa.sin_port = htons(static_cast<uint16_t>(port));
    for (;;) {
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        return SocketError(absl::StrCat("TCP transport on rank ", rank,
                                        ": no socket to connect to rank ", r),
                           errno, size - 1);
      }
      SetCongestion(fd, congestion);
      if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) {
        fds[r] = fd;
        break;
      }
      const int err = errno;
      close(fd);
      if (deadline.Expired()) {
        return absl::DeadlineExceededError(absl::StrCat(
            "TCP transport on rank ", rank, ": cannot connect to rank ", r,
            " at ", all[r], ": ", ErrnoText(err), " (", kSocketInterfaceEnv,
            " names the interface to listen on; MESHDMA_REMOTE_TRANSPORT=mpi "
            "takes MPI's path instead)"));
      }
      usleep(10'000);
    }
    SetNonBlocking(fds[r]);
    Hello hello{kHelloMagic, rank};
    if (!ExactIo(fds[r], &hello, sizeof(hello), true, deadline)) {
      return absl::UnavailableError(
          absl::StrCat("TCP transport on rank ", rank, ": rank ", r, " at ",
                       all[r], " did not take the connection"));
    }
  }
  return absl::OkStatus();
}

// Step 4: the connections of every higher rank on `listener`, each known by
// its Hello, into `fds`; others and duplicates are closed and ignored.
absl::Status AcceptHigherRanks(int listener, int rank, int size,
                               const Deadline& deadline, absl::Duration timeout,
                               std::vector<int>& fds) {
  SetNonBlocking(listener);
  for (int accepted = 0; accepted < size - 1 - rank;) {
    pollfd p{listener, POLLIN, 0};
    poll(&p, 1, 100);
    const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    const int accept_err = errno;
    if (fd < 0 && (accept_err == EMFILE || accept_err == ENFILE)) {
      return SocketError(
          absl::StrCat("TCP transport on rank ", rank,
                       ": cannot accept the connections of higher ranks"),
          accept_err, size - 1);
    }
    if (fd < 0) {
      if (deadline.Expired()) {
        std::vector<int> missing;
        for (int r = rank + 1; r < size; ++r) {
          if (fds[r] < 0) missing.push_back(r);
        }
        return absl::DeadlineExceededError(absl::StrCat(
            "TCP transport on rank ", rank, ": rank(s) ",
            absl::StrJoin(missing, ", "), " did not connect within ",
            absl::FormatDuration(timeout)));
      }
      continue;
    }
    SetNonBlocking(fd);
    Hello hello{};
    if (!ExactIo(fd, &hello, sizeof(hello), false, deadline) ||
        hello.magic != kHelloMagic || hello.rank <= rank ||
        hello.rank >= size || fds[hello.rank] >= 0) {
      close(fd);  // Not one of ours, or a duplicate: ignored.
      continue;
    }
    fds[hello.rank] = fd;
    ++accepted;
  }
  return absl::OkStatus();
}

// Step 5: what the connections run, as the kernel reports it: one name, or
// each connection's where they differ.
std::string RunningCongestion(const std::vector<int>& fds) {
  std::map<std::string, std::vector<int>> ranks_by_name;
  for (size_t r = 0; r < fds.size(); ++r) {
    char name[32] = {};
    socklen_t len = sizeof(name) - 1;
    if (fds[r] >= 0 &&
        getsockopt(fds[r], IPPROTO_TCP, TCP_CONGESTION, name, &len) == 0) {
      ranks_by_name[name].push_back(static_cast<int>(r));
    }
  }
  if (ranks_by_name.size() == 1) return ranks_by_name.begin()->first;
  if (ranks_by_name.empty()) return ProcNetIpv4("tcp_congestion_control");
  std::vector<std::string> parts;
  for (const auto& [name, ranks] : ranks_by_name) {
    parts.push_back(
        absl::StrCat(name, " (to rank ", absl::StrJoin(ranks, ", "), ")"));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace

absl::Status CheckTcpCongestion(const TcpCongestion& congestion) {
  if (congestion.name.empty()) return absl::OkStatus();
  return CongestionControl(congestion).status();
}

absl::StatusOr<std::unique_ptr<PolledTransport>> MakeSocketTransport(
    TransportHost* host, ProcessGroup& processes, bool one_machine,
    absl::Duration timeout, const TcpCongestion& asked,
    std::string* running_congestion) {
  const int rank = processes.rank();
  const int size = processes.size();
  // Step 1: listen. Every process takes part in the exchange of step 2, so
  // that one's failure to find an address fails all of them alike instead
  // of leaving them waiting.
  absl::StatusOr<in_addr> addr = ListenAddress(one_machine);
  absl::StatusOr<std::string> congestion = CongestionControl(asked);
  if (addr.ok() && !congestion.ok()) addr = congestion.status();
  int listener = -1;
  std::string mine;
  if (addr.ok()) {
    absl::StatusOr<int> listening = Listen(*addr, congestion, size, &mine);
    if (listening.ok()) {
      listener = *listening;
    } else {
      addr = listening.status();
    }
  }
  // Step 2: every process's address.
  absl::StatusOr<std::vector<std::string>> all = processes.AllGather(mine);
  if (!all.ok() || !addr.ok()) {
    if (listener >= 0) close(listener);
    const absl::Status& why = !addr.ok() ? addr.status() : all.status();
    return absl::Status(why.code(), absl::StrCat("TCP transport on rank ", rank,
                                                 ": ", why.message()));
  }
  std::vector<std::string> failed;
  for (int r = 0; r < size; ++r) {
    if ((*all)[r].empty()) failed.push_back(absl::StrCat(r));
  }
  if (!failed.empty()) {
    close(listener);
    return absl::UnavailableError(
        absl::StrCat("TCP transport: rank(s) ", absl::StrJoin(failed, ", "),
                     " could not listen (each of them says why)"));
  }
  // Steps 3 and 4: connect to the lower ranks, accept the higher ones.
  const Deadline deadline = Deadline::After(timeout);
  std::vector<int> fds(size, -1);
  FdCloser closer(fds);
  absl::Status connected =
      ConnectToLowerRanks(rank, size, *all, *congestion, deadline, fds);
  if (connected.ok()) {
    connected = AcceptHigherRanks(listener, rank, size, deadline, timeout, fds);
  }
  close(listener);
  if (!connected.ok()) return connected;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    const int one = 1;
    setsockopt(fds[r], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    // Buffer sizes stay the kernel's (autotuned): fixed 1 and 4 MiB
    // buffers were no faster for puts of 256 KiB and 2 MiB.
  }
  closer.Release();
  // Step 5: the congestion control the connections run.
  std::string running = RunningCongestion(fds);
  MESHDMA_LOG(kInfo, kLogTransport, "rank ", rank, ": TCP transport on ", mine,
              " connected to ", size - 1, " peers (congestion control ",
              running, ")");
  *running_congestion = std::move(running);
  return std::make_unique<SocketTransport>(host, &processes, rank,
                                           std::move(fds));
}

}  // namespace meshdma::dma_internal
