// The watch over the other processes of this machine: it reports the first
// that exits, once, and never a process whose identity it cannot confirm.
#include "meshdma/dma/internal/peer_watch.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace meshdma::dma_internal {
namespace {

using std::chrono::steady_clock;

// A child process that lives until it is killed; reaped on destruction.
class Child {
 public:
  Child() : pid_(fork()) {
    if (pid_ == 0) {
      for (;;) pause();
    }
  }
  ~Child() {
    Kill();
    waitpid(pid_, nullptr, 0);
  }
  void Kill() { kill(pid_, SIGKILL); }
  ProcessIdentity Identity() const { return ProcessIdentity::Of(pid_); }

 private:
  const pid_t pid_;
};

// What the watch reported: calls, and the last rank and pid.
struct Report {
  std::atomic<int> calls{0};
  std::atomic<int> rank{-1};
  std::atomic<int64_t> pid{-1};
  PeerWatch::ExitFn Fn() {
    return [this](int r, int64_t p) {
      rank = r;
      pid = p;
      ++calls;
    };
  }
  bool WaitForCall(std::chrono::seconds limit) const {
    const auto end = steady_clock::now() + limit;
    while (calls.load() == 0 && steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return calls.load() > 0;
  }
};

// Who a process is: its pid and its start time, from /proc.
TEST(ProcessIdentityTest, NamesProcessesOfThisMachine) {
  const ProcessIdentity self = ProcessIdentity::Self();
  EXPECT_EQ(self.pid, getpid());
  EXPECT_GT(self.start_ticks, 0u);
  EXPECT_EQ(ProcessIdentity::Of(getpid()).start_ticks, self.start_ticks);
  // No such process: /proc does not say.
  EXPECT_EQ(ProcessIdentity::Of(1 << 30).start_ticks, 0u);
}

TEST(PeerWatchTest, ReportsTheFirstExitOnce) {
  if (!PeerWatch::Supported()) GTEST_SKIP() << "this kernel has no pidfds";
  Child first, second;
  Report report;
  const std::vector<PeerWatch::Peer> peers = {{3, first.Identity()},
                                              {5, second.Identity()}};
  std::unique_ptr<PeerWatch> watch = PeerWatch::Start(peers, report.Fn());
  ASSERT_NE(watch, nullptr);
  EXPECT_EQ(watch->watched_ranks(), (std::vector<int>{3, 5}));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(report.calls.load(), 0) << "reported a live process";
  second.Kill();
  ASSERT_TRUE(report.WaitForCall(std::chrono::seconds(10)));
  EXPECT_EQ(report.rank.load(), 5);
  EXPECT_EQ(report.pid.load(), peers[1].identity.pid);
  first.Kill();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  watch.reset();
  EXPECT_EQ(report.calls.load(), 1);
}

TEST(PeerWatchTest, StopsWithoutReporting) {
  if (!PeerWatch::Supported()) GTEST_SKIP() << "this kernel has no pidfds";
  Child child;
  Report report;
  const std::vector<PeerWatch::Peer> peers = {{1, child.Identity()}};
  std::unique_ptr<PeerWatch> watch = PeerWatch::Start(peers, report.Fn());
  ASSERT_NE(watch, nullptr);
  const auto before = steady_clock::now();
  watch.reset();
  EXPECT_LT(steady_clock::now() - before, std::chrono::seconds(5));
  child.Kill();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(report.calls.load(), 0);
}

// A pid whose start time is not the one published names another process
// (a reused pid, or a pid of another namespace): it is not watched.
TEST(PeerWatchTest, IgnoresProcessesItCannotConfirm) {
  Child child;
  ProcessIdentity wrong = child.Identity();
  ASSERT_GT(wrong.start_ticks, 0u);
  wrong.start_ticks += 1;
  Report report;
  const std::vector<PeerWatch::Peer> peers = {
      {1, wrong},
      {2, ProcessIdentity{child.Identity().pid, 0}},  // Could not tell.
      {3, ProcessIdentity::Of(1 << 30)}};             // No such process.
  EXPECT_EQ(PeerWatch::Start(peers, report.Fn()), nullptr);
  EXPECT_EQ(PeerWatch::Start({}, report.Fn()), nullptr);
}

}  // namespace
}  // namespace meshdma::dma_internal
