#include "meshdma/dma/kernel.h"

#include "absl/strings/str_cat.h"
#include "meshdma/base/logging.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/internal/device.h"
#include "meshdma/dma/internal/runtime_impl.h"

namespace meshdma {
namespace {

// What a timeout in an entry barrier usually means.
absl::Status ExplainEntryTimeout(absl::Status s) {
  if (s.ok() || s.code() != absl::StatusCode::kDeadlineExceeded) return s;
  return absl::Status(
      s.code(),
      absl::StrCat(
          "entry barrier: every device of the mesh must enter the kernel (a "
          "kernel that only some devices call, or whose semaphores serve only "
          "local copies, runs with entry_barrier = false): ",
          s.message()));
}

absl::Status EntryBarrier(dma_internal::Device& d) {
  return ExplainEntryTimeout(d.Barrier());
}

}  // namespace

absl::Status RunKernel(const KernelOptions& options,
                       absl::FunctionRef<absl::Status()> body) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("RunKernel"));
  if (options.collective_id.has_value() &&
      (*options.collective_id < 0 ||
       *options.collective_id >= kMaxCollectiveIds)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel '", options.name, "' on ", d->Name(), ": collective_id ",
        *options.collective_id, " is outside [0, ", kMaxCollectiveIds, ")"));
  }
  Observer* obs = d->runtime()->observer();
  if (obs) obs->OnKernelBegin(d->global_index(), options.name);
  MESHDMA_LOG(kTrace, kLogDma, d->Name(), ": kernel '", options.name,
              "' begins");
  d->PushScope(options.name, options.collective_id);
  absl::Status s = options.entry_barrier ? EntryBarrier(*d) : absl::OkStatus();
  if (s.ok()) s = body();
  absl::Status exit = d->PopScope();
  if (obs) obs->OnKernelEnd(d->global_index(), options.name);
  MESHDMA_LOG(kTrace, kLogDma, d->Name(), ": kernel '", options.name,
              "' ends: ", s.ok() ? exit.ToString() : s.ToString());
  if (!s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("kernel '", options.name, "': ", s.message()));
  }
  return exit;
}

absl::StatusOr<Semaphore> get_barrier_semaphore() {
  MESHDMA_ASSIGN_OR_RETURN(
      dma_internal::Device * d,
      dma_internal::RequireDevice("get_barrier_semaphore"));
  std::optional<int> id = d->collective_id();
  if (!id.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("get_barrier_semaphore on ", d->Name(),
                     ": the running kernel has no collective_id (set "
                     "KernelOptions::collective_id)"));
  }
  return Semaphore(dma_internal::kCollectiveCellsOffset + *id * kSemaphoreBytes,
                   SemaphoreType::kBarrier);
}

absl::Status device_barrier() {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("device_barrier"));
  return d->Barrier();
}

absl::StatusOr<bool> device_barrier_compare(uint64_t value) {
  MESHDMA_ASSIGN_OR_RETURN(
      dma_internal::Device * d,
      dma_internal::RequireDevice("device_barrier_compare"));
  absl::StatusOr<bool> same = d->BarrierComparing(value);
  if (!same.ok()) return ExplainEntryTimeout(same.status());
  return same;
}

}  // namespace meshdma
