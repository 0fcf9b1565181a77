// Checked mode's race detector (`MESHDMA_CHECK=races`,
// `RuntimeOptions::check`): vector clocks per device, carried by DMAs and
// semaphore signals, joined by waits; every tracked access to device memory
// is compared with the earlier overlapping accesses of other devices and
// DMAs. Two overlapping accesses, at least one a write, that no chain of
// signals and waits orders are a race. See docs/checked_mode.md.
//
// The device verbs call it directly (`RuntimeImpl::race_checker()` is null
// when checked mode is off, so the cost then is one branch per verb).
#ifndef MESHDMA_DMA_CHECK_RACE_CHECKER_H_
#define MESHDMA_DMA_CHECK_RACE_CHECKER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/dma/check/clock_mailbox.h"
#include "meshdma/dma/internal/copy_plan.h"

namespace meshdma::dma_internal {

struct DmaOp;

// Component d (< n) counts device d's program steps; component n + d counts
// the DMAs device d has issued.
using VectorClock = std::vector<uint32_t>;

class RaceChecker {
 public:
  // `on_race` receives each report's text (the trace event); may be empty.
  RaceChecker(int num_devices,
              std::function<void(int device, const std::string&)> on_race);
  ~RaceChecker();
  // Whether any runtime of this process checks races: one relaxed load, so
  // that code paths annotate nothing when checked mode is off.
  static bool AnyLive() {
    return live_checkers_.load(std::memory_order_relaxed) > 0;
  }

  // Between Runs (no device running): every device is ordered after every
  // access of the previous Run by the process barrier, so all state resets.
  void Reset();

  // Processes sharing a host: `own` receives the clocks of peers' signals
  // and DMAs aimed at this process's devices; `of_device[g]` is the mailbox
  // of device g's process when g is reached through shared memory, else
  // null. Starts a thread that drains `own` now and then, so that a full
  // mailbox never stalls a peer. Before any device runs.
  void AttachMailboxes(ClockMailbox* own, std::vector<ClockMailbox*> of_device);
  // Stops using the mailboxes (before their memory is unmapped).
  void DetachMailboxes();
  // Applies every clock posted to this process's mailbox so far. Any thread.
  void DrainMailbox();

  // A view of ordinary memory [lo, hi) was made (`ArrayRef::FromPointer`):
  // the bytes may have been freed and handed out again since their last
  // tracked access, an order the checker cannot see, so their history is
  // forgotten. Any thread; a no-op when checked mode is off.
  static void OnOrdinaryView(uintptr_t lo, uintptr_t hi);

  // --- Called on the device's own thread.
  void OnAllocate(int device, int64_t offset, int64_t bytes,
                  absl::string_view kernel);
  // The allocations in heap offsets [lo, hi) were freed.
  void OnFree(int device, int64_t lo, int64_t hi);
  // Records the source read, and prepares the destination write that
  // `OnDmaComplete` records; stamps `op` with the issuer's clock.
  void OnDmaStart(int device, absl::string_view kernel, DmaOp& op,
                  const ArrayRef& src, const ArrayRef& dst);
  void OnSignal(int device, int target_device, int64_t sem_offset);
  // A wait on `device`'s semaphore at `sem_offset` consumed its count.
  void OnWaitEnd(int device, int64_t sem_offset);
  // A signal (`dst_layout` null; `issuer` -1) or a DMA's data from another
  // process arrived at local device `target` with the sender's `clock`.
  void OnRemoteArrival(int target, int issuer, int64_t sem_offset,
                       std::span<const uint32_t> clock, uint32_t dma_seq,
                       int64_t dst_offset, const ViewLayout* dst_layout,
                       int64_t elem_bytes);
  // `device`'s clock, for a signal that a message carries.
  const VectorClock& ClockOf(int device);
  // `device` waited for all its DMAs to complete (a scope's drain).
  void OnDrained(int device);
  void OnAccess(int device, absl::string_view kernel, const ArrayRef& ref,
                bool write, absl::string_view what);

  // --- Any thread: `op`'s destination has been written; its semaphores are
  // about to move.
  void OnDmaComplete(const DmaOp& op);

  // The races found since the last call (a FailedPrecondition naming each),
  // or OK.
  absl::Status TakeReport();
  int64_t num_races() const;

 private:
  static inline std::atomic<int> live_checkers_{0};
  struct Access;
  struct DmaInfo;
  struct DeviceState;
  struct Shadow;

  DeviceState& state(int device) { return *devices_[device]; }
  std::shared_ptr<const VectorClock> Snapshot(DeviceState& d);
  std::string DescribeBuffer(int device, int64_t offset) const;
  // Records `a` over each byte run of `ref` in the shadow of `space`.
  void Record(int space, const ArrayRef& ref, const Access& a);
  void RecordRange(int space, int64_t lo, int64_t hi, const Access& a);
  void Report(int space, int64_t lo, int64_t hi, const Access& earlier,
              const Access& later);
  // Joins `clock` into the clock of `device`'s semaphore at `sem_offset`.
  void JoinSemaphore(int device, int64_t sem_offset, const VectorClock& clock);
  // What a DMA's completion tells the process of a same-host target.
  static ClockMessage ShmArrival(const DmaInfo& info, const DmaOp& op);
  // Forgets the accesses to bytes [lo, hi) of memory outside the heaps.
  void ForgetOrdinary(int64_t lo, int64_t hi);
  // The mailbox of `device`'s process when it is a same-host peer, or null.
  ClockMailbox* MailboxOf(int device) const {
    return mailbox_of_device_.empty() ? nullptr : mailbox_of_device_[device];
  }
  // Posts `m` to `box`; a dropped clock is reported once.
  void Post(ClockMailbox* box, const ClockMessage& m);

  const int n_;
  const std::function<void(int, const std::string&)> on_race_;
  std::vector<std::unique_ptr<DeviceState>> devices_;
  // One shadow per device heap, plus one (index n_) for memory outside the
  // symmetric heaps, keyed by address.
  std::vector<std::unique_ptr<Shadow>> shadows_;

  ClockMailbox* own_mailbox_ = nullptr;
  std::vector<ClockMailbox*> mailbox_of_device_;
  std::mutex drain_mu_;  // One drainer of `own_mailbox_` at a time.
  std::thread drainer_;
  std::atomic<bool> stop_drainer_{false};

  mutable std::mutex report_mu_;
  std::set<std::pair<std::string, std::string>> reported_sites_;
  std::vector<std::string> reports_;
  int64_t num_races_ = 0;
};

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_CHECK_RACE_CHECKER_H_
