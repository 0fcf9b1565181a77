// A device's allocation verbs over its heap (device_heap.h): each also tells
// the race checker what it took or freed; a closing scope first drains the
// DMAs started in it; persistent memory only inside a Run; the semaphore
// checks every verb makes; and the functions run at the end of a Run.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/check/race_checker.h"
#include "meshdma/dma/internal/device.h"
#include "meshdma/dma/internal/runtime_impl.h"

namespace meshdma::dma_internal {

void Device::NoteAllocated(int64_t offset, int64_t bytes,
                           absl::string_view what) {
  if (RaceChecker* rc = runtime_->race_checker()) {
    rc->OnAllocate(global_index_, offset, bytes, what);
  }
}

absl::StatusOr<ArrayRef> Device::Allocate(DType dtype,
                                          std::span<const int64_t> shape) {
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef ref, heap_.Allocate(dtype, shape));
  NoteAllocated(ref.heap_offset(), heap_.top() - ref.heap_offset(),
                heap_.kernel_name());
  return ref;
}

absl::Status Device::PadHeapTo(int64_t offset) {
  const int64_t top = heap_.top();
  MESHDMA_RETURN_IF_ERROR(heap_.PadTo(offset));
  if (heap_.top() > top) {
    NoteAllocated(top, heap_.top() - top, heap_.kernel_name());
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Device::AllocateSemaphores(SemaphoreType type,
                                                   int count,
                                                   absl::string_view name) {
  const int64_t top = heap_.top();
  MESHDMA_ASSIGN_OR_RETURN(int64_t offset,
                           heap_.AllocateSemaphores(type, count, name));
  NoteAllocated(offset, heap_.top() - top, heap_.kernel_name());
  return offset;
}

absl::StatusOr<ArrayRef> Device::AllocatePersistent(
    DType dtype, std::span<const int64_t> shape, absl::string_view name) {
  if (mesh_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("AllocatePersistent('",
                                                      name, "') on ", Name(),
                                                      " outside Runtime::Run"));
  }
  const int64_t bottom = heap_.persistent_bottom();
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef ref,
                           heap_.AllocatePersistent(dtype, shape, name));
  NoteAllocated(ref.heap_offset(), bottom - ref.heap_offset(),
                absl::StrCat("persistent '", name, "'"));
  return ref;
}

absl::StatusOr<int64_t> Device::AllocatePersistentSemaphores(
    SemaphoreType type, int count, absl::string_view name) {
  if (mesh_ == nullptr && count >= 1) {
    return absl::FailedPreconditionError(absl::StrCat("AllocatePersistent('",
                                                      name, "') on ", Name(),
                                                      " outside Runtime::Run"));
  }
  const int64_t bottom = heap_.persistent_bottom();
  MESHDMA_ASSIGN_OR_RETURN(
      int64_t offset, heap_.AllocatePersistentSemaphores(type, count, name));
  NoteAllocated(offset, bottom - offset,
                absl::StrCat("persistent '", name, "'"));
  return offset;
}

void Device::AtRunExit(std::function<absl::Status()> fn) {
  run_exit_.push_back(std::move(fn));
}

void Device::AtRunEnd(std::function<void()> fn) {
  run_end_.push_back(std::move(fn));
}

absl::Status Device::ReleasePersistent(bool run_hooks) {
  // Peers' slow waits see that this device's calls are over, on other hosts
  // too (call_note.h).
  call_note()->EndRun();
  PushCallNote(*runtime_, global_index_);
  std::vector<std::string> problems;
  for (auto it = run_exit_.rbegin(); run_hooks && it != run_exit_.rend();
       ++it) {
    absl::Status s = (*it)();
    if (!s.ok()) problems.push_back(std::string(s.message()));
  }
  run_exit_.clear();
  if (run_hooks && problems.empty()) heap_.CheckPersistentSemaphores(problems);
  for (auto it = run_end_.rbegin(); it != run_end_.rend(); ++it) (*it)();
  run_end_.clear();
  if (problems.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("persistent state of ", Name(),
                   " at the end of Run: ", absl::StrJoin(problems, "; ")));
}

void Device::ZeroPersistent() { heap_.ZeroPersistent(); }

absl::Status Device::PopScope() {
  // Step 1: the scope's semaphores die.
  NewDmaEpoch();
  // Step 2: drain the DMAs started in this scope (or deeper): only they
  // belong to it, an enclosing kernel may legitimately have copies in flight
  // around a nested one.
  const int depth = heap_.depth() - 1;
  std::vector<std::string> violations;
  if (num_inflight(depth) != 0) {
    violations.push_back(
        absl::StrCat("DMAs still in flight: ", DescribeInflight(depth)));
  }
  absl::Status drained = DrainInflight(depth);
  if (!drained.ok()) violations.push_back(std::string(drained.message()));
  if (RaceChecker* rc = runtime_->race_checker();
      rc != nullptr && drained.ok()) {
    rc->OnDrained(global_index_);
  }
  // Step 3: every semaphore back at 0.
  heap_.CheckScopeSemaphores(violations);
  // Step 4: free the scope, zeroed. Once the Run has failed (here, or
  // anywhere), peers' late DMAs and signals may still land in it: the
  // recovery zeroes the memory instead, after they have drained.
  const DeviceHeap::Freed freed =
      heap_.PopScope(/*zero=*/violations.empty() && !runtime_->aborted());
  if (RaceChecker* rc = runtime_->race_checker()) {
    rc->OnFree(global_index_, freed.begin, freed.end);
  }
  if (violations.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("exit contract of '", freed.kernel_name, "' violated on ",
                   Name(), ": ", absl::StrJoin(violations, "; ")));
}

absl::Status Device::CheckSemaphore(Semaphore sem,
                                    absl::string_view verb) const {
  // Step 1: the handle itself: allocated, of a type, a cell of the heap.
  if (!sem.valid()) {
    return absl::InvalidArgumentError(
        absl::StrCat(verb, " on ", Name(), ": semaphore was never allocated"));
  }
  const int64_t off = sem.heap_offset();
  if (!IsValidSemaphoreType(sem.type())) {
    return absl::InvalidArgumentError(
        absl::StrCat(verb, " on ", Name(), ": semaphore @", off,
                     " has invalid type ", static_cast<int>(sem.type())));
  }
  if (off < 0 || off > heap_.bytes() - kSemaphoreBytes ||
      off % kSemaphoreBytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        verb, " on ", Name(), ": ", sem.ToString(),
        " is not a semaphore of a heap of ", heap_.bytes(), " bytes"));
  }
  // Step 2: a handle is accepted only where it names a semaphore this device
  // knows: a device-barrier round inside `device_barrier`, the
  // per-collective-id BARRIER semaphore, or a live allocation of the same
  // type.
  if (off < kCollectiveCellsOffset) {
    if (in_device_barrier_) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        verb, " on ", Name(), ": ", sem.ToString(),
        " is a reserved device-barrier cell; use device_barrier()"));
  }
  if (off < kCallNoteOffset) {
    if (sem.type() == SemaphoreType::kBarrier) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(verb, " on ", Name(), ": ", sem.ToString(),
                     " is the reserved BARRIER semaphore of collective id ",
                     (off - kCollectiveCellsOffset) / kSemaphoreBytes,
                     "; get it from get_barrier_semaphore()"));
  }
  // Step 3: a live allocation of the same type.
  const DeviceHeap::SemaphoreRecord* rec = heap_.FindSemaphore(off);
  if (rec == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        verb, " on ", Name(), ": ", sem.ToString(),
        " is not a live semaphore (not allocated, or its scope has closed)"));
  }
  if (rec->type != sem.type()) {
    return absl::InvalidArgumentError(
        absl::StrCat(verb, " on ", Name(), ": ", sem.ToString(), " names ",
                     DescribeSemaphore(Semaphore(off, rec->type)),
                     ", allocated as ", SemaphoreTypeName(rec->type)));
  }
  return absl::OkStatus();
}

}  // namespace meshdma::dma_internal
