// What a device records for diagnostics as it runs: the wait it is blocked
// in, and the semaphore it last sent to each device. Read by other threads
// (a timeout's report, the hang board), written by the device's thread.
#ifndef MESHDMA_DMA_INTERNAL_HANG_NOTES_H_
#define MESHDMA_DMA_INTERNAL_HANG_NOTES_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "meshdma/dma/check/hang_report.h"
#include "meshdma/dma/semaphore.h"

namespace meshdma::dma_internal {

class HangNotes {
 public:
  // For a device of a launch of `num_devices` devices.
  explicit HangNotes(int num_devices);

  // A semaphore (or a DMA's receive semaphore) was sent to `target`, now.
  void NoteSent(int target, int64_t sem_offset);
  // The device blocks in `verb` (a string literal) until `sem` holds
  // `value`; `line` is what `BlockedOn` says meanwhile.
  void Block(absl::string_view verb, Semaphore sem, int64_t value,
             std::string line);
  void Unblock();
  // The line given to `Block`, or "running (not blocked)".
  std::string BlockedOn() const;
  // Fills `state`'s wait (naming the semaphore with `name_of` and reading
  // its count with `count_of`) and its last-sent columns.
  void Fill(DeviceHangState& state,
            absl::FunctionRef<std::string(Semaphore)> name_of,
            absl::FunctionRef<int64_t(Semaphore)> count_of) const;
  // Forgets every note (recovery after a failed Run).
  void Reset();

 private:
  mutable std::mutex blocked_mu_;
  std::string blocked_on_;  // Empty while not blocked.
  absl::string_view blocked_verb_;
  Semaphore blocked_sem_;
  int64_t blocked_value_ = 0;
  // Per target device: the semaphore last sent there and when; -1 and 0
  // when none.
  const int num_devices_;
  std::unique_ptr<std::atomic<int64_t>[]> last_sent_sem_;
  std::unique_ptr<std::atomic<int64_t>[]> last_sent_ns_;
};

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_INTERNAL_HANG_NOTES_H_
