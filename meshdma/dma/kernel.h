// Kernel scope: entry barrier, barrier semaphore and exit contract
// (docs/semantics.md §5). `pallas_call` (kernels/) builds on this;
// communication code may use it directly.
//
// `RunKernel(options, body)` on every device of the current mesh:
//   1. opens an allocation scope for the kernel's scratch and semaphores;
//   2. unless `options.entry_barrier` is false, waits until every device of
//      the mesh has entered (a dissemination barrier over reserved
//      semaphores), so no peer pushes into scratch that does not exist yet;
//   3. runs `body`;
//   4. checks the exit contract: every semaphore allocated in the scope is
//      back to 0 and every DMA this device started has completed. (The
//      barrier semaphore of a collective id outlives the call, as in Pallas:
//      a neighbour that already entered the next call may have signalled it.) A
//      violation is FailedPrecondition naming the device, the kernel, the
//      semaphore and its count, and the DMAs in flight;
//   5. closes the scope (after draining this device's own DMAs, so a failing
//      body never leaves a copy writing into freed memory).
#ifndef MESHDMA_DMA_KERNEL_H_
#define MESHDMA_DMA_KERNEL_H_

#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "meshdma/dma/semaphore.h"

namespace meshdma {

inline constexpr int kMaxCollectiveIds = 64;

struct KernelOptions {
  std::string name = "kernel";
  // The device barrier at entry (Pallas inserts one unless told to skip it).
  bool entry_barrier = true;
  // Enables `get_barrier_semaphore()` in the body; 0 <= id < 64.
  std::optional<int> collective_id;
};

absl::Status RunKernel(const KernelOptions& options,
                       absl::FunctionRef<absl::Status()> body);

// The BARRIER semaphore of the running kernel's `collective_id`. An error
// outside a kernel or when the kernel has no collective id.
absl::StatusOr<Semaphore> get_barrier_semaphore();

// Blocks until every device of the current mesh has called it as often
// (dissemination barrier over reserved semaphores; no MPI call).
absl::Status device_barrier();

// `device_barrier` that also compares `value` across the mesh, in the same
// signals: true when every device passed the same value, false on every
// device when some differ (compared as a 30-bit fingerprint: a difference
// goes unseen with probability 2^-30). For a kernel run with
// `entry_barrier = false` that checks at entry that every device makes the
// same call (the collectives' kernels): one round instead of the entry
// barrier's and a check's. Symmetric allocations that differ are an error,
// as for the entry barrier.
absl::StatusOr<bool> device_barrier_compare(uint64_t value);

}  // namespace meshdma

#endif  // MESHDMA_DMA_KERNEL_H_
