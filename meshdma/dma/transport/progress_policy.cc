// When a polled transport's progress thread polls, yields or sleeps
// (progress_policy.h).
#include "meshdma/dma/transport/progress_policy.h"

#include <algorithm>

namespace meshdma::dma_internal {

void ProgressPolicy::DeviceSleeping() {
  last_device_poll_ns_.store(0, std::memory_order_relaxed);
  if (wake_) wake_();
}

bool ProgressPolicy::DevicesPolling() const {
  return devices_inside_.load(std::memory_order_relaxed) > 0 ||
         base_internal::MonotonicNanos() -
                 last_device_poll_ns_.load(std::memory_order_relaxed) <
             kDevicesPollingNs;
}

int64_t ProgressPolicy::WaitUs(bool devices_polling, bool pending,
                               bool watching) {
  if (!devices_polling && watching) return kWatchingUs;
  return pending ? kPendingStandByUs : kStandByUs;
}

ProgressPolicy::Next ProgressPolicy::AfterIdleRound(
    int idle, bool pending, bool shutdown, bool devices_polling) const {
  // Step 1: poll again while somebody needs the traffic and no device polls
  // for it: yielding the core between rounds after the first 50, for up to
  // 2000 rounds.
  // On one host nothing but control messages comes this way: a waiting
  // device is woken through shared memory, and every wake-up of this thread
  // would take a core from a device (2 cores, 2 devices).
  const bool remote = host_->RemotePeers();
  const bool needed =
      pending || (remote && host_->DevicesWaiting()) || shutdown;
  if (needed && !devices_polling && idle < 2000) {
    return {idle > 50 ? Next::kYieldThenPoll : Next::kPoll};
  }
  // Step 2: sleep: long on one host; briefly while devices poll; else
  // backing off from 10 us to 500 us as idle rounds add up, so that an idle
  // launch does not burn a core.
  const int64_t us = !remote           ? 2'000
                     : devices_polling ? 50
                                       : std::min<int64_t>(500, idle * 5 + 5);
  return {Next::kSleep, us};
}

}  // namespace meshdma::dma_internal
