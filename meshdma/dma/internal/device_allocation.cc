// A device's symmetric heap: allocation scopes, persistent memory, and the
// records of the semaphores they hold (which handles are live, and their
// names in errors).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "meshdma/base/checked_math.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/check/race_checker.h"
#include "meshdma/dma/internal/device.h"
#include "meshdma/dma/internal/runtime_impl.h"

namespace meshdma::dma_internal {
namespace {

// Zeroes [p, p + n) of a heap. The whole pages of a large range go back to
// the kernel instead of being written, which is as fast for a gigabyte as
// for a page and also returns their memory: MADV_REMOVE punches them out of
// a shared segment (every process's mapping then reads zeros),
// MADV_DONTNEED drops them from the private anonymous mapping of a process
// alone (the only other kind of heap; the kernel refuses MADV_REMOVE there).
void ZeroHeapRange(std::byte* p, int64_t n) {
  constexpr int64_t kReleaseBytes = int64_t{4} << 20;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin =
      (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) & ~(page - 1);
  if (n < kReleaseBytes || end <= begin) {
    std::memset(p, 0, n);
    return;
  }
  std::memset(p, 0, begin - reinterpret_cast<uintptr_t>(p));
  std::memset(reinterpret_cast<std::byte*>(end), 0,
              reinterpret_cast<uintptr_t>(p) + n - end);
  void* const middle = reinterpret_cast<void*>(begin);
  if (madvise(middle, end - begin, MADV_REMOVE) == 0) return;
  if (errno == EINVAL && madvise(middle, end - begin, MADV_DONTNEED) == 0) {
    return;
  }
  std::memset(middle, 0, end - begin);
}

// Whether the 64 bytes at `p` are all zero: four 16-byte loads OR-ed in
// registers (the compiler's vector extension, any ISA).
bool LineIsZero(const std::byte* p) {
  typedef uint64_t U2 __attribute__((vector_size(16)));
  U2 a, b, c, d;
  std::memcpy(&a, p, 16);
  std::memcpy(&b, p + 16, 16);
  std::memcpy(&c, p + 32, 16);
  std::memcpy(&d, p + 48, 16);
  const U2 x = (a | b) | (c | d);
  return (x[0] | x[1]) == 0;
}

// Zeroes [p, p + n) of a heap, writing only what is not zero already: per 4
// KiB block, from its first non-zero 64-byte line to its last. A kernel's
// scratch is often partly unused (a ring's second slot on 2 devices, a
// buffer sized for the largest call), and reading a clean line costs less
// than writing it: no write-back, and the cache keeps what it held. A block
// written throughout costs one line's read more than a plain memset.
void ZeroWrittenLines(std::byte* p, int64_t n) {
  constexpr int64_t kLine = 64, kBlock = 4096;
  if (n < 16 * kBlock) {
    std::memset(p, 0, n);
    return;
  }
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t end = std::min(n, b + kBlock);
    int64_t first = b;
    while (first + kLine <= end && LineIsZero(p + first)) first += kLine;
    if (first + kLine > end) {  // Clean up to a ragged tail, if any.
      std::memset(p + first, 0, end - first);
      continue;
    }
    int64_t last = end;
    while (last - kLine >= first + kLine && (last - b) % kLine == 0 &&
           LineIsZero(p + last - kLine)) {
      last -= kLine;
    }
    std::memset(p + first, 0, last - first);
  }
}

}  // namespace

void Device::PushScope(std::string kernel_name,
                       std::optional<int> collective_id) {
  scopes_.push_back(Scope{heap_top_,
                          std::move(kernel_name),
                          collective_id,
                          {},
                          allocations_.mark()});
}

std::optional<int> Device::collective_id() const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    if (it->collective_id.has_value()) return it->collective_id;
  }
  return std::nullopt;
}

absl::StatusOr<ArrayRef> Device::Allocate(DType dtype,
                                          std::span<const int64_t> shape) {
  // Step 1: the request: rank, dtype, dimensions, an open scope.
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllocateSymmetric on ", Name(), ": rank ", shape.size(),
                     " exceeds the maximum ", kMaxRank));
  }
  if (!IsValidDType(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllocateSymmetric on ", Name(), ": invalid dtype ",
                     static_cast<int>(dtype), " for shape [",
                     absl::StrJoin(shape, ","), "]"));
  }
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("AllocateSymmetric on ", Name(), ": negative dimension ",
                       d, " in shape [", absl::StrJoin(shape, ","), "]"));
    }
  }
  if (scopes_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("AllocateSymmetric on ", Name(), ": no open scope"));
  }
  // Step 2: elements, bytes and the 64-byte rounding, each checked for
  // overflow, and the room left.
  const std::optional<int64_t> elements = base_internal::CheckedProduct(shape);
  const std::optional<int64_t> bytes_or =
      elements.has_value()
          ? base_internal::CheckedMul(*elements,
                                      static_cast<int64_t>(DTypeSize(dtype)))
          : std::nullopt;
  const std::optional<int64_t> padded =
      bytes_or.has_value() ? base_internal::CheckedAdd(*bytes_or, 63)
                           : std::nullopt;
  if (!padded.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllocateSymmetric on ", Name(), ": shape ",
                     DTypeName(dtype), "[", absl::StrJoin(shape, ","),
                     "] has a size in bytes that overflows int64"));
  }
  const int64_t bytes = *bytes_or;
  const int64_t aligned = *padded & ~int64_t{63};
  if (aligned > persistent_bottom_ - heap_top_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "symmetric heap of ", Name(), " exhausted: request ", DTypeName(dtype),
        "[", absl::StrJoin(shape, ","), "] needs ", bytes, " bytes, ",
        persistent_bottom_ - heap_top_, " of ", heap_bytes_,
        " bytes left (raise RuntimeOptions::heap_bytes or "
        "MESHDMA_HEAP_BYTES)"));
  }
  // Step 3: take it from the top of the scope's heap.
  const int64_t offset = heap_top_;
  heap_top_ += aligned;
  touched_top_ = std::max(touched_top_, heap_top_);
  allocations_.NoteArray(offset, aligned, dtype, shape, /*persistent=*/false);
  if (RaceChecker* rc = runtime_->race_checker()) {
    rc->OnAllocate(global_index_, offset, aligned, scopes_.back().kernel_name);
  }
  // Free heap memory is always zero (scopes zero what they free), so the new
  // array starts zeroed without touching it here.
  return ArrayRef::Symmetric(heap_base_ + offset, offset, dtype, shape);
}

absl::Status Device::PadHeapTo(int64_t offset) {
  if (scopes_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("PadSymmetricHeapTo on ", Name(), ": no open scope"));
  }
  const int64_t aligned =
      offset > heap_bytes_ ? offset : (offset + 63) & ~int64_t{63};
  if (aligned <= heap_top_) return absl::OkStatus();
  if (aligned > persistent_bottom_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "symmetric heap of ", Name(), " exhausted: padding to heap offset ",
        offset, " needs ", aligned - heap_top_, " bytes, ",
        persistent_bottom_ - heap_top_, " of ", heap_bytes_,
        " bytes left (raise RuntimeOptions::heap_bytes or "
        "MESHDMA_HEAP_BYTES)"));
  }
  if (RaceChecker* rc = runtime_->race_checker()) {
    rc->OnAllocate(global_index_, heap_top_, aligned - heap_top_,
                   scopes_.back().kernel_name);
  }
  heap_top_ = aligned;
  touched_top_ = std::max(touched_top_, heap_top_);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Device::AllocateSemaphores(SemaphoreType type,
                                                   int count,
                                                   absl::string_view name) {
  if (!IsValidSemaphoreType(type)) {
    return absl::InvalidArgumentError(
        absl::StrCat("semaphore array '", name, "' on ", Name(),
                     ": invalid semaphore type ", static_cast<int>(type)));
  }
  if (count < 1) {
    return absl::InvalidArgumentError(absl::StrCat("semaphore array '", name,
                                                   "' on ", Name(), ": size ",
                                                   count, " must be >= 1"));
  }
  const int64_t shape[] = {count * kSemaphoreBytes};
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef bytes, Allocate(DType::kU8, shape));
  allocations_.MarkSemaphores(type, count);
  scopes_.back().semaphores.push_back(
      SemaphoreRecord{bytes.heap_offset(), count, type, std::string(name)});
  return bytes.heap_offset();
}

absl::StatusOr<ArrayRef> Device::AllocatePersistent(
    DType dtype, std::span<const int64_t> shape, absl::string_view name) {
  if (mesh_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("AllocatePersistent('",
                                                      name, "') on ", Name(),
                                                      " outside Runtime::Run"));
  }
  int64_t bytes = static_cast<int64_t>(DTypeSize(dtype));
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && bytes > (int64_t{1} << 40) / d)) {
      return absl::InvalidArgumentError(
          absl::StrCat("AllocatePersistent('", name, "') on ", Name(),
                       ": bad shape [", absl::StrJoin(shape, ","), "]"));
    }
    bytes *= d;
  }
  const int64_t aligned = (bytes + 63) & ~int64_t{63};
  if (aligned > persistent_bottom_ - heap_top_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "symmetric heap of ", Name(), " exhausted: persistent '", name, "' ",
        DTypeName(dtype), "[", absl::StrJoin(shape, ","), "] needs ", bytes,
        " bytes, ", persistent_bottom_ - heap_top_, " of ", heap_bytes_,
        " bytes left (raise RuntimeOptions::heap_bytes or "
        "MESHDMA_HEAP_BYTES)"));
  }
  persistent_bottom_ -= aligned;
  touched_bottom_ = std::min(touched_bottom_, persistent_bottom_);
  allocations_.NoteArray(persistent_bottom_, aligned, dtype, shape,
                         /*persistent=*/true);
  if (RaceChecker* rc = runtime_->race_checker()) {
    rc->OnAllocate(global_index_, persistent_bottom_, aligned,
                   absl::StrCat("persistent '", name, "'"));
  }
  // Persistent memory is zero when the Run starts (ReleasePersistent zeroes
  // what the previous Run used).
  return ArrayRef::Symmetric(heap_base_ + persistent_bottom_,
                             persistent_bottom_, dtype, shape);
}

absl::StatusOr<int64_t> Device::AllocatePersistentSemaphores(
    SemaphoreType type, int count, absl::string_view name) {
  if (count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("persistent semaphore array '", name, "' on ", Name(),
                     ": size ", count, " must be >= 1"));
  }
  const int64_t shape[] = {count * kSemaphoreBytes};
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef bytes,
                           AllocatePersistent(DType::kU8, shape, name));
  allocations_.MarkSemaphores(type, count);
  persistent_semaphores_.push_back(
      SemaphoreRecord{bytes.heap_offset(), count, type, std::string(name)});
  return bytes.heap_offset();
}

void Device::AtRunExit(std::function<absl::Status()> fn) {
  run_exit_.push_back(std::move(fn));
}

void Device::AtRunEnd(std::function<void()> fn) {
  run_end_.push_back(std::move(fn));
}

absl::Status Device::ReleasePersistent(bool run_hooks) {
  // Peers' slow waits see that this device's calls are over (call_note.h).
  call_note()->EndRun();
  std::vector<std::string> problems;
  for (auto it = run_exit_.rbegin(); run_hooks && it != run_exit_.rend();
       ++it) {
    absl::Status s = (*it)();
    if (!s.ok()) problems.push_back(std::string(s.message()));
  }
  run_exit_.clear();
  if (run_hooks && problems.empty()) {
    for (const SemaphoreRecord& rec : persistent_semaphores_) {
      for (int i = 0; i < rec.count; ++i) {
        const Semaphore sem(rec.offset + i * kSemaphoreBytes, rec.type);
        const int64_t count =
            CellAt(sem.heap_offset())->count.load(std::memory_order_acquire);
        if (count != 0) {
          problems.push_back(absl::StrCat(DescribeSemaphore(sem), " is ", count,
                                          ", expected 0"));
        }
      }
    }
  }
  for (auto it = run_end_.rbegin(); it != run_end_.rend(); ++it) (*it)();
  run_end_.clear();
  if (problems.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("persistent state of ", Name(),
                   " at the end of Run: ", absl::StrJoin(problems, "; ")));
}

void Device::ZeroPersistent() {
  for (const SemaphoreRecord& rec : persistent_semaphores_) {
    for (int i = 0; i < rec.count; ++i) {
      CellQuiesce(CellAt(rec.offset + i * kSemaphoreBytes));
    }
  }
  persistent_semaphores_.clear();
  ZeroHeapRange(heap_base_ + persistent_bottom_,
                heap_bytes_ - persistent_bottom_);
  persistent_bottom_ = heap_bytes_;
}

absl::Status Device::PopScope() {
  NewDmaEpoch();  // The scope's semaphores die.
  Scope& scope = scopes_.back();
  // Only DMAs started in this scope (or deeper) belong to it: an enclosing
  // kernel may legitimately have copies in flight around a nested one.
  const int depth = static_cast<int>(scopes_.size()) - 1;
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
  for (const SemaphoreRecord& rec : scope.semaphores) {
    for (int i = 0; i < rec.count; ++i) {
      const Semaphore sem(rec.offset + i * kSemaphoreBytes, rec.type);
      const int64_t count =
          CellAt(sem.heap_offset())->count.load(std::memory_order_acquire);
      if (count != 0) {
        violations.push_back(absl::StrCat(DescribeSemaphore(sem), " is ", count,
                                          ", expected 0"));
      }
    }
  }
  // Keep free memory zero: the next allocation starts from zeros. No signal
  // may still be finishing on a cell about to be zeroed. Once the Run has
  // failed (here, or anywhere), peers' late DMAs and signals may still land
  // here: the recovery zeroes the memory instead, after they have drained.
  if (violations.empty() && !runtime_->aborted()) {
    for (const SemaphoreRecord& rec : scope.semaphores) {
      for (int i = 0; i < rec.count; ++i) {
        CellQuiesce(CellAt(rec.offset + i * kSemaphoreBytes));
      }
    }
    ZeroWrittenLines(heap_base_ + scope.heap_mark, heap_top_ - scope.heap_mark);
  }
  if (RaceChecker* rc = runtime_->race_checker()) {
    rc->OnFree(global_index_, scope.heap_mark, heap_top_);
  }
  heap_top_ = scope.heap_mark;
  allocations_.Rewind(scope.allocations);
  const std::string kernel = scope.kernel_name;
  scopes_.pop_back();
  if (violations.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("exit contract of '", kernel, "' violated on ", Name(), ": ",
                   absl::StrJoin(violations, "; ")));
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
  if (off < 0 || off > heap_bytes_ - kSemaphoreBytes ||
      off % kSemaphoreBytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        verb, " on ", Name(), ": ", sem.ToString(),
        " is not a semaphore of a heap of ", heap_bytes_, " bytes"));
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
  // Step 3: a live allocation: persistent, else of an open scope (the
  // innermost first).
  auto holds = [off](const SemaphoreRecord& rec) {
    return off >= rec.offset && off < rec.offset + rec.count * kSemaphoreBytes;
  };
  auto matched = [&](const SemaphoreRecord& rec) -> absl::Status {
    if (rec.type != sem.type()) {
      return absl::InvalidArgumentError(
          absl::StrCat(verb, " on ", Name(), ": ", sem.ToString(), " names ",
                       DescribeSemaphore(Semaphore(off, rec.type)),
                       ", allocated as ", SemaphoreTypeName(rec.type)));
    }
    return absl::OkStatus();
  };
  auto check_in = [&](const std::vector<SemaphoreRecord>& records,
                      size_t* hint) -> std::optional<absl::Status> {
    if (hint != nullptr && *hint < records.size() && holds(records[*hint])) {
      return matched(records[*hint]);
    }
    for (size_t i = 0; i < records.size(); ++i) {
      if (!holds(records[i])) continue;
      if (hint != nullptr) *hint = i;
      return matched(records[i]);
    }
    return std::nullopt;
  };
  if (off >= persistent_bottom_) {
    if (auto s = check_in(persistent_semaphores_, &persistent_hint_)) {
      return *s;
    }
  } else {
    for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
      if (auto s = check_in(scope->semaphores, nullptr)) return *s;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      verb, " on ", Name(), ": ", sem.ToString(),
      " is not a live semaphore (not allocated, or its scope has closed)"));
}

std::string Device::SemaphoreName(Semaphore sem) const {
  const int64_t off = sem.heap_offset();
  std::string name;
  auto find_in = [&](const std::vector<SemaphoreRecord>& records) {
    for (const SemaphoreRecord& rec : records) {
      const int64_t end = rec.offset + rec.count * kSemaphoreBytes;
      if (off >= rec.offset && off < end) {
        name = rec.count == 1
                   ? absl::StrCat("'", rec.name, "' ")
                   : absl::StrCat("'", rec.name, "'[",
                                  (off - rec.offset) / kSemaphoreBytes, "] ");
      }
    }
  };
  for (const Scope& scope : scopes_) find_in(scope.semaphores);
  find_in(persistent_semaphores_);
  if (off >= kBarrierCellsOffset && off < kCollectiveCellsOffset) {
    name =
        absl::StrCat("'device barrier round ",
                     (off - kBarrierCellsOffset) / kSemaphoreBytes / 2, "' ");
  } else if (off >= kCollectiveCellsOffset && off < kCallNoteOffset) {
    name = absl::StrCat("'collective id ",
                        (off - kCollectiveCellsOffset) / kSemaphoreBytes, "' ");
  }
  return absl::StrCat(name, SemaphoreTypeName(sem.type()), " semaphore @", off);
}

std::string Device::DescribeSemaphore(Semaphore sem) const {
  return absl::StrCat(
      SemaphoreName(sem), " (count ",
      CellAt(sem.heap_offset())->count.load(std::memory_order_relaxed), ")");
}

}  // namespace meshdma::dma_internal
