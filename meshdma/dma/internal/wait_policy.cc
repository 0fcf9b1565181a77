#include "meshdma/dma/internal/wait_policy.h"

#include <algorithm>
#include <limits>

namespace meshdma::dma_internal {
namespace {

// After spinning, a wait sleeps in slices of this length, so that aborts and
// deadlines are noticed.
constexpr int64_t kSleepSliceNanos = 10'000'000;

int64_t TimeoutNanos(absl::Duration timeout) {
  return timeout == absl::InfiniteDuration()
             ? std::numeric_limits<int64_t>::max()
             : absl::ToInt64Nanoseconds(timeout);
}

}  // namespace

absl::string_view WaitVerb(WaitKind kind) {
  switch (kind) {
    case WaitKind::kSemaphore:
      return "semaphore_wait";
    case WaitKind::kDmaSend:
      return "wait_send";
    case WaitKind::kDmaRecv:
      return "wait_recv";
    case WaitKind::kBarrier:
      return "device barrier";
  }
  return "wait";
}

bool CellWaiter::HelpQueuedCopies() {
  // Messages to other hosts in flight are progressed between the chunks.
  CopyEngine* engine = runtime_.copy_engine();
  if (engine == nullptr) return false;
  while (engine->HelpOnce()) {
    if (CellTryConsume(cell_, value_)) return true;
    if (runtime_.RemotePending()) runtime_.PollRemote();
  }
  return false;
}

bool CellWaiter::Spin() {
  // Deadlines use the monotonic clock; an infinite wait timeout never expires.
  start_ns_ = base_internal::MonotonicNanos();
  // Oversubscribed, each turn yields the core: here, or inside the poll of
  // the transport to other processes where that yields when idle (MPI under
  // Open MPI's mpi_yield_when_idle). Yielding in both doubled the context
  // switches per turn: on 2 x 2 simulated hosts on 2 cores an 8-byte
  // ppermute between hosts took 8.4-9.3 us against 4.2-6.2 us
  // (`mpirun -np 4 --oversubscribe -x MESHDMA_HOSTS=2 meshdma-bench
  // --collective ppermute_call -b 8 -e 4K -f 8`).
  const bool yield = runtime_.oversubscribed() && !runtime_.RemotePollYields();
  // The spin ends after `spin_ns` in which the transport to other processes
  // moved nothing: a wait whose bytes keep arriving (a stream of puts from
  // another host) is not idle, and sleeping in it handed every later put to
  // the progress thread and its wake-ups (`mpirun -np 2 --mca btl self,tcp
  // -x MESHDMA_FORCE_INTERHOST=1 meshdma-bench-kv --seq_max 1024`). It ends at
  // the wait timeout, or once the launch is aborted, whatever moves.
  const int64_t spin_ns = runtime_.semaphore_spin_ns();
  const int64_t timeout_ns = TimeoutNanos(runtime_.wait_timeout());
  int64_t idle_since = start_ns_;
  bool moved = false;
  for (int i = 0;; ++i) {
    if (yield) {
      std::this_thread::yield();
    } else {
      CpuRelax();
    }
    if (CellTryConsume(cell_, value_)) return true;
    if (runtime_.PollRemote()) {
      if (CellTryConsume(cell_, value_)) return true;
      moved = true;
    }
    // Pure spinning: yielding here was measured to push waits past the spin
    // window into futex sleeps, whose wake-up costs tens of microseconds on
    // a virtual machine (32 KiB between threads: 53 us against 2.6 us).
    if ((i & 63) == 63) {
      const int64_t now = base_internal::MonotonicNanos();
      if (moved) idle_since = now;
      moved = false;
      if (now - idle_since > spin_ns || now - start_ns_ > timeout_ns ||
          runtime_.aborted()) {
        return false;
      }
    }
  }
}

SleepOutcome CellWaiter::Sleep() {
  // Step 1: count this device among the sleeping ones while it sleeps.
  runtime_.waiting_devices().fetch_add(1, std::memory_order_relaxed);
  struct Unregister {
    std::atomic<int>& count;
    ~Unregister() { count.fetch_sub(1, std::memory_order_relaxed); }
  } unregister{runtime_.waiting_devices()};
  bool published = false;
  const int64_t publish_after = TimeoutNanos(runtime_.wait_timeout() / 2);
  const base_internal::Deadline deadline(start_ns_, runtime_.wait_timeout());
  CopyEngine* engine = runtime_.copy_engine();
  int64_t slow_check_ns = 0;
  for (;;) {
    // Step 2: the value, an abort (or a peer's call note that shows the
    // value will never come), a queued copy to run, the hang board.
    if (CellTryConsume(cell_, value_)) return SleepOutcome::kConsumed;
    if (runtime_.aborted() ||
        SlowWaitFails(runtime_, start_ns_, slow_check_ns)) {
      return SleepOutcome::kAborted;
    }
    if (engine != nullptr && engine->HelpOnce()) continue;
    if (!published &&
        base_internal::MonotonicNanos() - start_ns_ > publish_after) {
      published = true;
      runtime_.PublishHangState();
    }
    const int64_t left = deadline.RemainingNanos();
    if (left == 0) return SleepOutcome::kTimedOut;
    // Step 3: while messages to or from other hosts are in flight, keep
    // progressing them here rather than sleeping: MPI moves a large message
    // only while somebody polls.
    if (runtime_.PollRemote() || runtime_.RemotePending()) {
      CpuRelax();
      continue;
    }
    // Step 4: sleep one slice.
    runtime_.RemoteDeviceSleeping();
    CellSleep(cell_, value_, std::min(kSleepSliceNanos, left));
  }
}

}  // namespace meshdma::dma_internal
