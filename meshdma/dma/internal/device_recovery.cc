// A device's hang state (what it waits on, what it last sent, what it has in
// flight), the error of a wait that timed out, and its reset after a failed
// Run.
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "meshdma/dma/internal/device.h"
#include "meshdma/dma/internal/runtime_impl.h"
#include "meshdma/dma/internal/wait_policy.h"

namespace meshdma::dma_internal {

DeviceHangState Device::HangState() {
  DeviceHangState s;
  s.device = global_index_;
  hang_notes_.Fill(
      s, [this](Semaphore sem) { return SemaphoreName(sem); },
      [this](Semaphore sem) {
        return CellAt(sem.heap_offset())->count.load(std::memory_order_relaxed);
      });
  s.inflight = DescribeInflight();
  return s;
}

std::string Device::BlockedOn() { return hang_notes_.BlockedOn(); }

absl::Status Device::TimeoutError(SemaphoreCell* cell, int64_t value,
                                  WaitKind kind, Semaphore sem,
                                  int64_t since_ns) {
  const std::string mesh = runtime_->MeshHangReport(global_index_, since_ns);
  return absl::DeadlineExceededError(absl::StrCat(
      WaitVerb(kind), " on ", Name(), " timed out after ",
      absl::FormatDuration(runtime_->wait_timeout()), " on ",
      DescribeSemaphore(sem), ": expected >= ", value, ", current ",
      cell->count.load(),
      ". DMAs in flight from this device: ", DescribeInflight(),
      ". Local devices:\n", runtime_->DescribeLocalDevices(),
      mesh.empty() ? "\n(the mesh-wide report is printed by the process that "
                     "timed out first)"
                   : absl::StrCat("\n", mesh)));
}

void Device::ResetAfterFailure(int64_t zero_top, int64_t zero_bottom) {
  // Step 1: the heap, zeroed and empty as at start-up. Late DMAs and signals
  // of the failed Run may have landed in memory already freed (and zeroed),
  // and device-barrier or collective-id cells may hold counts nobody
  // consumed.
  heap_.ResetAfterFailure(zero_top, zero_bottom);
  // Step 2: the rest of the Run's state.
  run_exit_.clear();
  run_end_.clear();
  barrier_epoch_ = 0;
  in_device_barrier_ = false;
  // Step 3: diagnostics that describe the failed Run.
  hang_notes_.Reset();
}

}  // namespace meshdma::dma_internal
