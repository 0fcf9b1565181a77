// Notices at once when another process of the launch that runs on this
// machine exits, however it exits (a crash, SIGKILL, `_exit`), so that the
// launch fails now, naming that process, instead of at the wait timeout.
//
// Linux tells a process's exit through a pidfd (`pidfd_open`, Linux 5.3),
// which poll(2) reports readable once the process is gone: one thread
// sleeps in poll(2) on every watched process and costs nothing while they
// live. A process is watched only where its identity is certain: its pid
// names, on this machine, the process whose start time it reported
// (`ProcessIdentity`), so a pid of another pid namespace, or one reused by
// another process, is never taken for it. Not watched: processes on other
// machines (a transport that reaches them notices a lost connection; TCP's
// does), processes this one cannot name that way, and any process on a
// kernel without pidfds. Their loss is still found, at the latest when a
// wait times out. A stopped process (SIGSTOP) has not exited: only the wait
// timeout ends a wait on it.
#ifndef MESHDMA_DMA_INTERNAL_PEER_WATCH_H_
#define MESHDMA_DMA_INTERNAL_PEER_WATCH_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <thread>
#include <vector>

namespace meshdma::dma_internal {

// Who a process is on its machine: its pid, and when it started (clock
// ticks after boot, /proc/<pid>/stat), which tells it apart from a later
// process given the same pid.
struct ProcessIdentity {
  int64_t pid = 0;
  uint64_t start_ticks = 0;

  // Process `pid` of this machine as /proc shows it; start_ticks 0 where
  // /proc does not say (no such process, no /proc).
  static ProcessIdentity Of(int64_t pid);
  // This process's identity.
  static ProcessIdentity Self();
};

class PeerWatch {
 public:
  struct Peer {
    int rank = 0;
    ProcessIdentity identity;
  };
  // Called, on the watch's thread, for the first watched process that
  // exits, and for no other.
  using ExitFn = std::function<void(int rank, int64_t pid)>;

  // True where the kernel offers pidfds, without which nothing is watched.
  static bool Supported();
  // Watches those of `peers` whose identity it can confirm on this machine
  // (see the header comment). Null when there is none to watch.
  static std::unique_ptr<PeerWatch> Start(std::span<const Peer> peers,
                                          ExitFn on_exit);
  // Stops watching: once it returns, `on_exit` is not running and will not
  // run.
  ~PeerWatch();

  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // The ranks watched, in the order given.
  const std::vector<int>& watched_ranks() const { return ranks_; }

 private:
  PeerWatch() = default;
  void Main();

  std::vector<int> ranks_;
  std::vector<int64_t> pids_;
  std::vector<int> pidfds_;
  int stop_fd_ = -1;  // An eventfd: written to stop the thread.
  ExitFn on_exit_;
  std::thread thread_;
};

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_INTERNAL_PEER_WATCH_H_
