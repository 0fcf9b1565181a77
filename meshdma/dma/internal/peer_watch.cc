#include "meshdma/dma/internal/peer_watch.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "meshdma/base/thread_name.h"

namespace meshdma::dma_internal {
namespace {

// Field 22 of /proc/<pid>/stat (the start time, in clock ticks after boot);
// 0 when the process is gone or the file cannot be read.
uint64_t StartTicks(int64_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!in || !std::getline(in, line)) return 0;
  // The command name (field 2) is in parentheses and may hold spaces and
  // parentheses itself: the fields after it start after the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(line.substr(close + 1));
  std::string field;
  // Fields 3 (state) to 22 (start time).
  for (int f = 3; f <= 22; ++f) {
    if (!(fields >> field)) return 0;
  }
  uint64_t ticks = 0;
  return absl::SimpleAtoi(field, &ticks) ? ticks : 0;
}

// A pidfd for `pid`, or -1 (no such process here, or no pidfds).
int OpenPidfd(int64_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace

ProcessIdentity ProcessIdentity::Of(int64_t pid) {
  return {pid, StartTicks(pid)};
}

ProcessIdentity ProcessIdentity::Self() { return Of(getpid()); }

bool PeerWatch::Supported() {
  const int fd = OpenPidfd(getpid());
  if (fd < 0) return false;
  close(fd);
  return true;
}

std::unique_ptr<PeerWatch> PeerWatch::Start(std::span<const Peer> peers,
                                            ExitFn on_exit) {
  std::unique_ptr<PeerWatch> watch(new PeerWatch());
  for (const Peer& p : peers) {
    if (p.identity.start_ticks == 0) continue;  // It could not tell.
    // The pidfd first, then the check: a pidfd names one process for good,
    // so if the start time read after opening it matches, the pidfd is
    // that process's (had it exited first, its pid would now be another
    // process's, with another start time, or nobody's).
    const int fd = OpenPidfd(p.identity.pid);
    if (fd < 0) continue;
    if (StartTicks(p.identity.pid) != p.identity.start_ticks) {
      close(fd);
      continue;
    }
    watch->ranks_.push_back(p.rank);
    watch->pids_.push_back(p.identity.pid);
    watch->pidfds_.push_back(fd);
  }
  if (watch->pidfds_.empty()) return nullptr;
  watch->stop_fd_ = eventfd(0, EFD_CLOEXEC);
  if (watch->stop_fd_ < 0) return nullptr;  // The destructor closes the rest.
  watch->on_exit_ = std::move(on_exit);
  watch->thread_ = std::thread([w = watch.get()] { w->Main(); });
  base_internal::NameThread(watch->thread_, "meshdma-watch");
  return watch;
}

PeerWatch::~PeerWatch() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(stop_fd_, &one, sizeof(one));
    thread_.join();
  }
  for (int fd : pidfds_) close(fd);
  if (stop_fd_ >= 0) close(stop_fd_);
}

void PeerWatch::Main() {
  std::vector<pollfd> fds;
  fds.push_back({stop_fd_, POLLIN, 0});
  for (int fd : pidfds_) fds.push_back({fd, POLLIN, 0});
  for (;;) {
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;  // Cannot watch: the wait timeout still ends waits.
    }
    if (fds[0].revents != 0) return;  // Stopped.
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) {
        on_exit_(ranks_[i - 1], pids_[i - 1]);
        return;  // The first exit fails the launch; nothing more to tell.
      }
    }
  }
}

}  // namespace meshdma::dma_internal
