// The wait policy: how a device thread waits for memory that another thread,
// process or host will write. A semaphore wait goes through three phases, in
// order (`CellWaiter`):
//   1. it runs the copies still queued on the copy engine (very likely the
//      one awaited), so that a wait right after `start()` costs what an
//      eager copy costs;
//   2. it spins, polling the transport to other hosts, until `spin_ns` pass
//      in which that transport moved nothing;
//   3. it sleeps on the cell's futex in slices, counted among the sleeping
//      devices so that a progress thread polls for it, until the count
//      arrives, the launch aborts or the wait timeout passes.
// Flag and counter waits (`SpinUntil`) poll memory that has no futex: they
// spin, then yield the core after `spin_ns`.
#ifndef MESHDMA_DMA_INTERNAL_WAIT_POLICY_H_
#define MESHDMA_DMA_INTERNAL_WAIT_POLICY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "meshdma/base/deadline.h"
#include "meshdma/dma/internal/call_note.h"
#include "meshdma/dma/internal/runtime_impl.h"
#include "meshdma/dma/internal/semaphore_cell.h"
#include "meshdma/dma/observer.h"

namespace meshdma::dma_internal {

// The verb that names a wait of `kind` ("wait_recv", "device barrier",
// ...): in its errors, its hang note and its timeline events.
absl::string_view WaitVerb(WaitKind kind);

// How a phase-3 wait ended.
enum class SleepOutcome { kConsumed, kAborted, kTimedOut };

// One wait for `value` on `cell`, by the calling device thread of `runtime`.
// Each phase returns once the value was consumed (a true or kConsumed), or
// hands over to the next.
class CellWaiter {
 public:
  CellWaiter(RuntimeImpl& runtime, SemaphoreCell* cell, int64_t value)
      : runtime_(runtime), cell_(cell), value_(value) {}

  // Phase 1: true when the value was consumed between queued copies.
  bool HelpQueuedCopies();
  // Phase 2: true when the value was consumed while spinning. Starts the
  // wait's clock (`start_ns`), from which the timeout counts.
  bool Spin();
  // Phase 3, after `Spin`: sleeps until the value is consumed, the launch
  // aborts or the wait timeout (counted from `start_ns`) passes. A wait
  // blocked for half the timeout publishes this process's hang state, so
  // that whichever process times out first can see it.
  SleepOutcome Sleep();
  int64_t start_ns() const { return start_ns_; }

 private:
  RuntimeImpl& runtime_;
  SemaphoreCell* const cell_;
  const int64_t value_;
  int64_t start_ns_ = 0;
};

// Spins (then yields) until `ready()`; Aborted when the runtime aborts,
// DeadlineExceeded "<verb> on <device> timed out after T: <detail>" at the
// wait timeout, where `device()` is the waiter's name and `what()` names
// the memory awaited (both called only for an error: a wait that ends
// builds no string). For waits that poll memory (flags, counters).
template <typename Device, typename What, typename Ready, typename Timeout>
absl::Status SpinUntil(RuntimeImpl& runtime, absl::string_view verb,
                       Device device, What what, Ready ready,
                       Timeout timeout_detail) {
  // Most waits end within a few polls: the clock is first read after 1024
  // of them, where the spin window and the deadline start.
  int64_t start = -1, slow_check_ns = 0;
  std::optional<base_internal::Deadline> deadline;
  const bool yield = runtime.oversubscribed();
  for (int i = 0;; ++i) {
    if (ready()) return absl::OkStatus();
    if (yield) {
      std::this_thread::yield();
    } else {
      CpuRelax();
    }
    if ((i & 1023) != 1023) continue;
    if (start < 0) {
      start = base_internal::MonotonicNanos();
      deadline.emplace(start, runtime.wait_timeout());
    }
    if (runtime.aborted() || SlowWaitFails(runtime, start, slow_check_ns)) {
      return absl::AbortedError(
          absl::StrCat(verb, " on ", device(), " for ", what(),
                       " abandoned: ", runtime.abort_reason()));
    }
    if (deadline->RemainingNanos() == 0) {
      return absl::DeadlineExceededError(
          absl::StrCat(verb, " on ", device(), " timed out after ",
                       absl::FormatDuration(runtime.wait_timeout()), ": ",
                       timeout_detail()));
    }
    // Past the spin window, give the core to the writer (2 cores may be
    // shared by more threads than that).
    if (base_internal::MonotonicNanos() - start > runtime.spin_ns()) {
      std::this_thread::yield();
    }
  }
}

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_INTERNAL_WAIT_POLICY_H_
