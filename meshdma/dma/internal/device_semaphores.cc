// A device's semaphore verbs: signal, read and wait (the waits follow the
// policy of wait_policy.h).
#include "absl/strings/str_cat.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/check/race_checker.h"
#include "meshdma/dma/internal/device.h"
#include "meshdma/dma/internal/runtime_impl.h"
#include "meshdma/dma/internal/wait_policy.h"

namespace meshdma::dma_internal {

absl::Status Device::Signal(Semaphore sem, int64_t inc,
                            std::optional<int> target_global) {
  MESHDMA_RETURN_IF_ERROR(CheckSemaphore(sem, "semaphore_signal"));
  if (sem.type() == SemaphoreType::kDma) {
    return absl::InvalidArgumentError(absl::StrCat(
        "semaphore_signal on ", Name(), ": ", DescribeSemaphore(sem),
        " counts bytes and only DMAs add to it"));
  }
  if (inc < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("semaphore_signal on ", Name(), ": increment ", inc,
                     " of ", DescribeSemaphore(sem), " must be >= 1"));
  }
  const int target = target_global.value_or(global_index_);
  if (Observer* obs = runtime_->observer()) {
    obs->OnSignal(global_index_, target, sem, inc);
  }
  // A message to another process carries the clock as it was at the signal.
  std::vector<uint32_t> check_clock;
  if (RaceChecker* rc = runtime_->race_checker()) {
    if (!runtime_->IsLocalDevice(target)) {
      check_clock = rc->ClockOf(global_index_);
    }
    rc->OnSignal(global_index_, target, sem.heap_offset());
  }
  hang_notes_.NoteSent(target, sem.heap_offset());
  if (target == global_index_) {
    CellAdd(CellAt(sem.heap_offset()), inc);
  } else {
    runtime_->TransportTo(target)->Signal(target, sem.heap_offset(), inc,
                                          check_clock);
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Device::Read(Semaphore sem) {
  MESHDMA_RETURN_IF_ERROR(CheckSemaphore(sem, "semaphore_read"));
  return CellAt(sem.heap_offset())->count.load(std::memory_order_acquire);
}

absl::Status Device::Wait(Semaphore sem, int64_t value, WaitKind kind) {
  MESHDMA_RETURN_IF_ERROR(CheckSemaphore(sem, WaitVerb(kind)));
  const bool dma_wait =
      kind == WaitKind::kDmaSend || kind == WaitKind::kDmaRecv;
  if (dma_wait != (sem.type() == SemaphoreType::kDma)) {
    return absl::InvalidArgumentError(absl::StrCat(
        WaitVerb(kind), " on ", Name(), ": ", DescribeSemaphore(sem),
        dma_wait ? " is not a DMA semaphore"
                 : " is a DMA semaphore; wait on it through its copy "
                   "descriptor (wait_send / wait_recv)"));
  }
  if (value < 0 || (!dma_wait && value == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(WaitVerb(kind), " on ", Name(), ": value ", value, " for ",
                     DescribeSemaphore(sem), " must be >= 1"));
  }
  if (value == 0) return absl::OkStatus();  // A zero-byte DMA.
  Observer* obs = runtime_->observer();
  if (obs) {
    obs->OnWaitBegin(
        global_index_, kind, sem, value,
        CellAt(sem.heap_offset())->count.load(std::memory_order_relaxed));
  }
  absl::Status s = WaitCell(CellAt(sem.heap_offset()), value, kind, sem);
  if (s.ok()) {
    if (RaceChecker* rc = runtime_->race_checker()) {
      rc->OnWaitEnd(global_index_, sem.heap_offset());
    }
  }
  if (obs) obs->OnWaitEnd(global_index_, kind, sem, value, s.ok());
  return s;
}

absl::Status Device::WaitCell(SemaphoreCell* cell, int64_t value, WaitKind kind,
                              Semaphore sem) {
  if (CellTryConsume(cell, value)) return absl::OkStatus();
  // Steps 1 and 2 of the wait policy (wait_policy.h): the queued copies,
  // then the spin.
  CellWaiter waiter(*runtime_, cell, value);
  if (waiter.HelpQueuedCopies() || waiter.Spin()) return absl::OkStatus();
  // Step 3: asleep, and blocked as hang reports tell.
  hang_notes_.Block(WaitVerb(kind), sem, value,
                    absl::StrCat(WaitVerb(kind), " on ", DescribeSemaphore(sem),
                                 " for ", value));
  absl::Status s;
  switch (waiter.Sleep()) {
    case SleepOutcome::kConsumed:
      break;
    case SleepOutcome::kAborted:
      s = absl::AbortedError(absl::StrCat(
          WaitVerb(kind), " on ", Name(), " for ", DescribeSemaphore(sem),
          " abandoned: ", runtime_->abort_reason()));
      break;
    case SleepOutcome::kTimedOut:
      s = TimeoutError(cell, value, kind, sem, waiter.start_ns());
      break;
  }
  hang_notes_.Unblock();
  return s;
}

}  // namespace meshdma::dma_internal
