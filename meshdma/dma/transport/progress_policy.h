// The progress policy of a transport to other hosts (`PolledTransport`):
// when its progress thread polls, yields or sleeps. Its messages move only
// while some thread polls: a device spinning in a wait, or the transport's
// progress thread, which covers the time when no device polls (every device
// computing, or sleeping in a long wait). The policy is the one place that
// decides from what the devices tell it (they poll, send, stop to sleep) and
// what the transport and its host report (traffic outstanding, devices
// asleep in waits, peers on other hosts). A transport carries its decisions
// out with its own means of sleeping: the sockets' poll(2), a condition
// variable beside MPI.
//
// The figures and why, measured on 2 cores with 2 processes:
// - a device that polled or sent within kDevicesPollingNs counts as
//   polling, and the progress thread then stays off the transport's lock and
//   the core: its wake-ups took the core from sending devices (`mpirun -np 2
//   --mca btl self,tcp -x MESHDMA_FORCE_INTERHOST=1 meshdma-bench
//   --collective OP -b 256K -e 16M -f 2 -w 20`);
// - while devices poll it looks again after kStandByUs, or kPendingStandByUs
//   with traffic outstanding (how late it takes over from a device that sent,
//   then computes; at 50 us there were about two wake-ups per 512 KiB
//   message over TCP);
// - a device that stops polling to sleep wakes it at once (`DeviceSleeping`).
#ifndef MESHDMA_DMA_TRANSPORT_PROGRESS_POLICY_H_
#define MESHDMA_DMA_TRANSPORT_PROGRESS_POLICY_H_

#include <atomic>
#include <cstdint>
#include <functional>

#include "meshdma/base/deadline.h"
#include "meshdma/dma/transport/transport.h"

namespace meshdma::dma_internal {

class ProgressPolicy {
 public:
  // A device that polled or sent this recently counts as polling.
  static constexpr int64_t kDevicesPollingNs = 50'000;
  // Polls per reading of the clock in `DevicePolled`: a spinning wait polls
  // every few hundred nanoseconds, and a reading costs tens of nanoseconds
  // on a virtual machine.
  static constexpr int kPollsPerNote = 16;
  // While devices poll: how long the progress thread waits before it looks
  // again, without and with traffic outstanding.
  static constexpr int64_t kStandByUs = 1'000;
  static constexpr int64_t kPendingStandByUs = 250;
  // While no device polls, for a thread that sleeps on the transport's own
  // arrivals (the sockets' poll(2)): how long before it looks anyway.
  static constexpr int64_t kWatchingUs = 100'000;

  // `host` says whether devices sleep in waits and whether peers are on
  // other hosts; it outlives the policy.
  explicit ProgressPolicy(TransportHost* host) : host_(host) {}
  ProgressPolicy(const ProgressPolicy&) = delete;
  ProgressPolicy& operator=(const ProgressPolicy&) = delete;

  // How the transport wakes its progress thread (`DeviceSleeping`). Set once,
  // before any device polls.
  void SetWake(std::function<void()> wake) { wake_ = std::move(wake); }

  // --- What devices tell it, from their threads.
  // A device polls the transport (cheap: one poll in kPollsPerNote reads the
  // clock). Noted before the poll tries the transport's lock: a device that
  // finds the progress thread inside still makes it leave the transport to
  // the devices instead of competing for the lock and a core.
  void DevicePolled() {
    thread_local int polls_to_note = 0;
    if (--polls_to_note < 0) {
      polls_to_note = kPollsPerNote - 1;
      DeviceSent();
    }
  }
  // A device sent: it progresses the transport when it waits, and until then
  // (copying, reducing) counts as polling.
  void DeviceSent() {
    last_device_poll_ns_.store(base_internal::MonotonicNanos(),
                               std::memory_order_relaxed);
  }
  // A device is inside a write or a poll of the transport, which may run for
  // hundreds of microseconds: it counts as polling until `DeviceLeft`.
  void DeviceEntered() {
    devices_inside_.fetch_add(1, std::memory_order_relaxed);
  }
  void DeviceLeft() { devices_inside_.fetch_sub(1, std::memory_order_relaxed); }
  // A device that polled in a wait stops to sleep: nobody may be polling now,
  // so the progress thread is woken to look at once.
  void DeviceSleeping();

  // --- What the progress thread does.
  // True while a device polls (or did within kDevicesPollingNs): it, not the
  // progress thread, moves the traffic.
  bool DevicesPolling() const;
  // How long the progress thread waits for a wake-up before it looks again:
  // kWatchingUs while no device polls and the thread sleeps on the
  // transport's own arrivals (`watching`); else kStandByUs, or
  // kPendingStandByUs with traffic outstanding (`pending`).
  static int64_t WaitUs(bool devices_polling, bool pending, bool watching);
  // After a round of progress that moved nothing, `idle` such rounds in a
  // row, by a thread that cannot sleep on the transport's arrivals (MPI).
  struct Next {
    enum Action { kPoll, kYieldThenPoll, kSleep } action;
    int64_t sleep_us = 0;  // For kSleep.
  };
  Next AfterIdleRound(int idle, bool pending, bool shutdown,
                      bool devices_polling) const;

  // --- When a thread finds the transport's lock taken.
  // A device's poll that finds another thread progressing the transport
  // yields the core where an idle poll of the library under it would have
  // (`PolledTransport::PollYieldsWhenIdle`): waiting devices then yield
  // once per poll either way.
  static bool YieldOnBusyPoll(bool poll_yields_when_idle) {
    return poll_yields_when_idle;
  }
  // The progress thread woke while it watched the connections (`watching`)
  // and moved nothing: bytes are there, but a device that just started
  // polling holds the lock; it gets the core.
  static bool YieldToDeviceInside(bool moved, bool watching) {
    return !moved && watching;
  }

 private:
  TransportHost* const host_;
  std::function<void()> wake_;
  std::atomic<int64_t> last_device_poll_ns_{0};
  std::atomic<int> devices_inside_{0};
};

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_TRANSPORT_PROGRESS_POLICY_H_
