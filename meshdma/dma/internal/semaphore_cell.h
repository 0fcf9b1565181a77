// The in-memory representation of a semaphore: one cache line of the
// symmetric heap. The same layout is used for REGULAR, DMA and BARRIER
// semaphores; the handle carries the type. Cells are updated with atomics so
// that a peer in another process on the same host can signal through shared
// memory, and waiters sleep on a futex word beside the count.
#ifndef MESHDMA_DMA_INTERNAL_SEMAPHORE_CELL_H_
#define MESHDMA_DMA_INTERNAL_SEMAPHORE_CELL_H_

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>

namespace meshdma::dma_internal {

struct alignas(64) SemaphoreCell {
  std::atomic<int64_t> count;
  std::atomic<uint32_t>
      wake_seq;  // Futex word: bumped by signals with waiters.
  std::atomic<uint32_t> sleepers;  // Threads asleep (or about to be) on it.
  // Signals under way: a signaller still reads `sleepers` and bumps
  // `wake_seq` after its count is visible, so the owner may free (zero or
  // reuse) the cell only when this is 0 (CellQuiesce).
  std::atomic<uint32_t> signallers;
};
static_assert(sizeof(SemaphoreCell) == 64);
static_assert(std::atomic<int64_t>::is_always_lock_free);

// Adds `inc` (>= 0) to the count with release order (the data a signal
// covers is visible to whoever observes the new count) and wakes sleepers.
// The count saturates at INT64_MAX rather than wrap to a negative value. The
// wake is a syscall only when someone sleeps.
inline void CellAdd(SemaphoreCell* cell, int64_t inc) {
  cell->signallers.fetch_add(1, std::memory_order_seq_cst);
  int64_t c = cell->count.load(std::memory_order_relaxed);
  while (!cell->count.compare_exchange_weak(
      c, c > INT64_MAX - inc ? INT64_MAX : c + inc, std::memory_order_seq_cst,
      std::memory_order_relaxed)) {
  }
  if (cell->sleepers.load(std::memory_order_seq_cst) != 0) {
    cell->wake_seq.fetch_add(1, std::memory_order_seq_cst);
    // Shared (not FUTEX_PRIVATE) so that waiters in other processes wake.
    syscall(SYS_futex, &cell->wake_seq, FUTEX_WAKE, INT_MAX, nullptr, nullptr,
            0);
  }
  cell->signallers.fetch_sub(1, std::memory_order_release);
}

// Waits until no signal is under way on the cell. The owner calls it before
// it zeroes or reuses a cell whose count it has consumed: a signaller whose
// count was visible may still be reading `sleepers` or bumping `wake_seq`,
// and its late wake would otherwise land in the next allocation. Every such
// signaller registered before its count became visible, so once the owner
// has seen the count, it sees the signaller here too. The window is a few
// instructions and at most one syscall; a signaller that stays in it for a
// second is in a process that died or stopped there, and is not waited for.
inline void CellQuiesce(SemaphoreCell* cell) {
  timespec start{};
  for (int64_t spins = 0; cell->signallers.load(std::memory_order_acquire) != 0;
       ++spins) {
    if (spins % 1024 != 1023) {
      __builtin_ia32_pause();
      continue;
    }
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (spins == 1023) start = now;
    if (now.tv_sec - start.tv_sec > 1) return;
    sched_yield();
  }
}

// If count >= value, subtracts `value` atomically and returns true.
inline bool CellTryConsume(SemaphoreCell* cell, int64_t value) {
  int64_t c = cell->count.load(std::memory_order_acquire);
  while (c >= value) {
    if (cell->count.compare_exchange_weak(c, c - value,
                                          std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
      return true;
    }
  }
  return false;
}

// Sleeps until the cell is signalled or `timeout_ns` passes, unless the
// count already reaches `value`. Spurious returns are allowed; the caller
// loops. Lost wake-ups are impossible: the sleeper registers itself and reads
// `wake_seq` before its final check, and a signaller that adds after that
// check sees the sleeper and bumps `wake_seq`, which makes FUTEX_WAIT return.
inline void CellSleep(SemaphoreCell* cell, int64_t value, int64_t timeout_ns) {
  cell->sleepers.fetch_add(1, std::memory_order_seq_cst);
  const uint32_t seq = cell->wake_seq.load(std::memory_order_seq_cst);
  if (cell->count.load(std::memory_order_seq_cst) < value) {
    timespec ts{static_cast<time_t>(timeout_ns / 1000000000),
                static_cast<long>(timeout_ns % 1000000000)};
    syscall(SYS_futex, &cell->wake_seq, FUTEX_WAIT, seq, &ts, nullptr, 0);
  }
  cell->sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

inline void CpuRelax() { __builtin_ia32_pause(); }

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_INTERNAL_SEMAPHORE_CELL_H_
