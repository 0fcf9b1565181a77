// The progress policy of the transports between hosts, against its figures
// written out by hand: when devices count as polling, what a device that
// stops to sleep does, how long the progress thread waits, and what follows
// a round that moved nothing.
#include "meshdma/dma/transport/progress_policy.h"

#include <thread>

#include "gtest/gtest.h"

namespace meshdma::dma_internal {
namespace {

// A host whose answers the test sets.
class FakeHost : public TransportHost {
 public:
  std::byte* HeapBase(int) const override { return nullptr; }
  int64_t heap_bytes() const override { return 0; }
  int RankOf(int device) const override { return device; }
  bool IsLocalDevice(int) const override { return false; }
  void CompleteDma(std::unique_ptr<DmaOp>) override {}
  void AbandonDma(std::unique_ptr<DmaOp>) override {}
  void Abort(const std::string&, bool) override {}
  bool DevicesWaiting() const override { return waiting; }
  bool RemotePeers() const override { return remote; }
  absl::Duration wait_timeout() const override { return absl::Seconds(1); }
  absl::Duration shutdown_timeout() const override { return absl::Seconds(1); }
  bool aborted() const override { return false; }

  bool waiting = false;
  bool remote = true;
};

using Next = ProgressPolicy::Next;

void SleepPastTheWindow() {
  std::this_thread::sleep_for(
      std::chrono::nanoseconds(2 * ProgressPolicy::kDevicesPollingNs));
}

// True when `note_then_check` returned true once in 100 tries: a check
// right after a note can miss its 50 us window only when this thread lost
// its core in between, which a loaded machine does now and then, not 100
// times in a row.
template <typename F>
bool OnceOf100(F note_then_check) {
  for (int i = 0; i < 100; ++i) {
    if (note_then_check()) return true;
  }
  return false;
}

TEST(ProgressPolicyTest, ADeviceCountsAsPollingForAWhileAfterItSent) {
  FakeHost host;
  ProgressPolicy policy(&host);
  EXPECT_FALSE(policy.DevicesPolling());
  EXPECT_TRUE(OnceOf100([&] {
    policy.DeviceSent();
    return policy.DevicesPolling();
  }));
  SleepPastTheWindow();
  EXPECT_FALSE(policy.DevicesPolling());
  // Inside a long write or poll it counts however long it takes.
  policy.DeviceEntered();
  SleepPastTheWindow();
  EXPECT_TRUE(policy.DevicesPolling());
  policy.DeviceLeft();
  EXPECT_FALSE(policy.DevicesPolling());
}

TEST(ProgressPolicyTest, OnePollInSixteenNotesTheDevice) {
  FakeHost host;
  ProgressPolicy policy(&host);
  // On a thread of its own: its first poll notes, the next fifteen do not.
  std::thread([&] {
    policy.DevicePolled();
    EXPECT_TRUE(OnceOf100([&] {
      SleepPastTheWindow();
      for (int i = 1; i < ProgressPolicy::kPollsPerNote; ++i) {
        policy.DevicePolled();
      }
      EXPECT_FALSE(policy.DevicesPolling());
      policy.DevicePolled();
      return policy.DevicesPolling();
    }));
  }).join();
}

TEST(ProgressPolicyTest, ADeviceThatStopsToSleepWakesTheThread) {
  FakeHost host;
  ProgressPolicy policy(&host);
  int wakes = 0;
  policy.DeviceSleeping();  // No wake set yet: nothing to call.
  policy.SetWake([&] { ++wakes; });
  policy.DeviceSent();
  policy.DeviceSleeping();
  EXPECT_EQ(wakes, 1);
  EXPECT_FALSE(policy.DevicesPolling());
}

TEST(ProgressPolicyTest, HowLongTheThreadWaits) {
  EXPECT_EQ(ProgressPolicy::WaitUs(true, false, false), 1'000);
  EXPECT_EQ(ProgressPolicy::WaitUs(true, true, false), 250);
  EXPECT_EQ(ProgressPolicy::WaitUs(true, true, true), 250);
  EXPECT_EQ(ProgressPolicy::WaitUs(true, false, true), 1'000);
  EXPECT_EQ(ProgressPolicy::WaitUs(false, false, true), 100'000);
  EXPECT_EQ(ProgressPolicy::WaitUs(false, true, true), 100'000);
}

TEST(ProgressPolicyTest, WhenTheLockIsTaken) {
  // A device's poll yields where the library's idle poll would have.
  EXPECT_TRUE(ProgressPolicy::YieldOnBusyPoll(true));
  EXPECT_FALSE(ProgressPolicy::YieldOnBusyPoll(false));
  // The progress thread yields to a device only after a watch that found
  // bytes it could not move.
  EXPECT_TRUE(ProgressPolicy::YieldToDeviceInside(false, true));
  EXPECT_FALSE(ProgressPolicy::YieldToDeviceInside(true, true));
  EXPECT_FALSE(ProgressPolicy::YieldToDeviceInside(false, false));
}

TEST(ProgressPolicyTest, AfterARoundThatMovedNothing) {
  FakeHost host;
  ProgressPolicy policy(&host);
  // Traffic outstanding, nobody polling: poll again, yielding after 50.
  EXPECT_EQ(policy.AfterIdleRound(1, true, false, false).action, Next::kPoll);
  EXPECT_EQ(policy.AfterIdleRound(50, true, false, false).action, Next::kPoll);
  EXPECT_EQ(policy.AfterIdleRound(51, true, false, false).action,
            Next::kYieldThenPoll);
  // ... up to 2000 rounds, then back off to sleeps of at most 500 us.
  Next n = policy.AfterIdleRound(2000, true, false, false);
  EXPECT_EQ(n.action, Next::kSleep);
  EXPECT_EQ(n.sleep_us, 500);
  // Nothing needed: sleeps that grow with the idle rounds.
  n = policy.AfterIdleRound(1, false, false, false);
  EXPECT_EQ(n.action, Next::kSleep);
  EXPECT_EQ(n.sleep_us, 10);
  EXPECT_EQ(policy.AfterIdleRound(20, false, false, false).sleep_us, 105);
  // A device asleep in a wait, with peers on other hosts, is a need; a
  // shutdown is one too.
  host.waiting = true;
  EXPECT_EQ(policy.AfterIdleRound(1, false, false, false).action, Next::kPoll);
  host.waiting = false;
  EXPECT_EQ(policy.AfterIdleRound(1, false, true, false).action, Next::kPoll);
  // While devices poll they move it: 50 us naps.
  n = policy.AfterIdleRound(1, true, false, true);
  EXPECT_EQ(n.action, Next::kSleep);
  EXPECT_EQ(n.sleep_us, 50);
  // On one host only control messages come: 2 ms, and a sleeping device is
  // woken through shared memory, not by this thread.
  host.remote = false;
  host.waiting = true;
  n = policy.AfterIdleRound(1, false, false, false);
  EXPECT_EQ(n.action, Next::kSleep);
  EXPECT_EQ(n.sleep_us, 2'000);
}

}  // namespace
}  // namespace meshdma::dma_internal
