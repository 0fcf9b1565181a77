// A device's symmetric heap (device_heap.h): allocation, scopes and their
// zeroing on close, persistent memory, and the semaphore records.
#include "meshdma/dma/internal/device_heap.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "meshdma/base/checked_math.h"
#include "meshdma/base/status_macros.h"

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

DeviceHeap::DeviceHeap(std::string owner, std::byte* base, int64_t bytes)
    : owner_(std::move(owner)),
      base_(base),
      bytes_(bytes),
      persistent_bottom_(bytes),
      touched_bottom_(bytes) {}

absl::Status DeviceHeap::Exhausted(absl::string_view request,
                                   int64_t needed) const {
  return absl::ResourceExhaustedError(absl::StrCat(
      "symmetric heap of ", owner_, " exhausted: ", request, " needs ", needed,
      " bytes, ", persistent_bottom_ - top_, " of ", bytes_,
      " bytes left (raise RuntimeOptions::heap_bytes or "
      "MESHDMA_HEAP_BYTES)"));
}

void DeviceHeap::PushScope(std::string kernel_name,
                           std::optional<int> collective_id) {
  scopes_.push_back(
      Scope{top_, std::move(kernel_name), collective_id, {}, log_.mark()});
}

std::optional<int> DeviceHeap::collective_id() const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    if (it->collective_id.has_value()) return it->collective_id;
  }
  return std::nullopt;
}

absl::StatusOr<ArrayRef> DeviceHeap::Allocate(DType dtype,
                                              std::span<const int64_t> shape) {
  // Step 1: the request: rank, dtype, dimensions, an open scope.
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllocateSymmetric on ", owner_, ": rank ", shape.size(),
                     " exceeds the maximum ", kMaxRank));
  }
  if (!IsValidDType(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllocateSymmetric on ", owner_, ": invalid dtype ",
                     static_cast<int>(dtype), " for shape [",
                     absl::StrJoin(shape, ","), "]"));
  }
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("AllocateSymmetric on ", owner_, ": negative dimension ",
                       d, " in shape [", absl::StrJoin(shape, ","), "]"));
    }
  }
  if (scopes_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("AllocateSymmetric on ", owner_, ": no open scope"));
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
        absl::StrCat("AllocateSymmetric on ", owner_, ": shape ",
                     DTypeName(dtype), "[", absl::StrJoin(shape, ","),
                     "] has a size in bytes that overflows int64"));
  }
  const int64_t aligned = *padded & ~int64_t{63};
  if (aligned > persistent_bottom_ - top_) {
    return Exhausted(absl::StrCat("request ", DTypeName(dtype), "[",
                                  absl::StrJoin(shape, ","), "]"),
                     *bytes_or);
  }
  // Step 3: take it from the top of the scope's heap. Free memory is always
  // zero (scopes zero what they free), so the new array starts zeroed
  // without touching it here.
  const int64_t offset = top_;
  top_ += aligned;
  touched_top_ = std::max(touched_top_, top_);
  log_.NoteArray(offset, aligned, dtype, shape, /*persistent=*/false);
  return ArrayRef::Symmetric(base_ + offset, offset, dtype, shape);
}

absl::Status DeviceHeap::PadTo(int64_t offset) {
  if (scopes_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("PadSymmetricHeapTo on ", owner_, ": no open scope"));
  }
  const int64_t aligned =
      offset > bytes_ ? offset : (offset + 63) & ~int64_t{63};
  if (aligned <= top_) return absl::OkStatus();
  if (aligned > persistent_bottom_) {
    return Exhausted(absl::StrCat("padding to heap offset ", offset),
                     aligned - top_);
  }
  top_ = aligned;
  touched_top_ = std::max(touched_top_, top_);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> DeviceHeap::AllocateSemaphores(SemaphoreType type,
                                                       int count,
                                                       absl::string_view name) {
  if (!IsValidSemaphoreType(type)) {
    return absl::InvalidArgumentError(
        absl::StrCat("semaphore array '", name, "' on ", owner_,
                     ": invalid semaphore type ", static_cast<int>(type)));
  }
  if (count < 1) {
    return absl::InvalidArgumentError(absl::StrCat("semaphore array '", name,
                                                   "' on ", owner_, ": size ",
                                                   count, " must be >= 1"));
  }
  const int64_t shape[] = {count * kSemaphoreBytes};
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef bytes, Allocate(DType::kU8, shape));
  log_.MarkSemaphores(type, count);
  scopes_.back().semaphores.push_back(
      SemaphoreRecord{bytes.heap_offset(), count, type, std::string(name)});
  return bytes.heap_offset();
}

absl::StatusOr<ArrayRef> DeviceHeap::AllocatePersistent(
    DType dtype, std::span<const int64_t> shape, absl::string_view name) {
  int64_t bytes = static_cast<int64_t>(DTypeSize(dtype));
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && bytes > (int64_t{1} << 40) / d)) {
      return absl::InvalidArgumentError(
          absl::StrCat("AllocatePersistent('", name, "') on ", owner_,
                       ": bad shape [", absl::StrJoin(shape, ","), "]"));
    }
    bytes *= d;
  }
  const int64_t aligned = (bytes + 63) & ~int64_t{63};
  if (aligned > persistent_bottom_ - top_) {
    return Exhausted(absl::StrCat("persistent '", name, "' ", DTypeName(dtype),
                                  "[", absl::StrJoin(shape, ","), "]"),
                     bytes);
  }
  persistent_bottom_ -= aligned;
  touched_bottom_ = std::min(touched_bottom_, persistent_bottom_);
  log_.NoteArray(persistent_bottom_, aligned, dtype, shape,
                 /*persistent=*/true);
  // Persistent memory is zero when the Run starts (ZeroPersistent zeroes
  // what the previous Run used).
  return ArrayRef::Symmetric(base_ + persistent_bottom_, persistent_bottom_,
                             dtype, shape);
}

absl::StatusOr<int64_t> DeviceHeap::AllocatePersistentSemaphores(
    SemaphoreType type, int count, absl::string_view name) {
  if (count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("persistent semaphore array '", name, "' on ", owner_,
                     ": size ", count, " must be >= 1"));
  }
  const int64_t shape[] = {count * kSemaphoreBytes};
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef bytes,
                           AllocatePersistent(DType::kU8, shape, name));
  log_.MarkSemaphores(type, count);
  persistent_semaphores_.push_back(
      SemaphoreRecord{bytes.heap_offset(), count, type, std::string(name)});
  return bytes.heap_offset();
}

void DeviceHeap::CheckZero(const std::vector<SemaphoreRecord>& records,
                           std::vector<std::string>& problems) const {
  for (const SemaphoreRecord& rec : records) {
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

void DeviceHeap::CheckScopeSemaphores(
    std::vector<std::string>& problems) const {
  if (!scopes_.empty()) CheckZero(scopes_.back().semaphores, problems);
}

void DeviceHeap::CheckPersistentSemaphores(
    std::vector<std::string>& problems) const {
  CheckZero(persistent_semaphores_, problems);
}

void DeviceHeap::ZeroPersistent() {
  for (const SemaphoreRecord& rec : persistent_semaphores_) {
    for (int i = 0; i < rec.count; ++i) {
      CellQuiesce(CellAt(rec.offset + i * kSemaphoreBytes));
    }
  }
  persistent_semaphores_.clear();
  ZeroHeapRange(base_ + persistent_bottom_, bytes_ - persistent_bottom_);
  persistent_bottom_ = bytes_;
}

DeviceHeap::Freed DeviceHeap::PopScope(bool zero) {
  Scope& scope = scopes_.back();
  // Keep free memory zero: the next allocation starts from zeros. No signal
  // may still be finishing on a cell about to be zeroed.
  if (zero) {
    for (const SemaphoreRecord& rec : scope.semaphores) {
      for (int i = 0; i < rec.count; ++i) {
        CellQuiesce(CellAt(rec.offset + i * kSemaphoreBytes));
      }
    }
    ZeroWrittenLines(base_ + scope.heap_mark, top_ - scope.heap_mark);
  }
  Freed freed{scope.heap_mark, top_, std::move(scope.kernel_name)};
  top_ = scope.heap_mark;
  log_.Rewind(scope.allocations);
  scopes_.pop_back();
  return freed;
}

void DeviceHeap::ResetAfterFailure(int64_t zero_top, int64_t zero_bottom) {
  zero_top = std::clamp(zero_top, kReservedHeapBytes, bytes_);
  zero_bottom = std::clamp(zero_bottom, zero_top, bytes_);
  std::memset(base_, 0, zero_top);
  std::memset(base_ + zero_bottom, 0, bytes_ - zero_bottom);
  scopes_.clear();
  persistent_semaphores_.clear();
  top_ = kReservedHeapBytes;
  persistent_bottom_ = bytes_;
  touched_top_ = kReservedHeapBytes;
  touched_bottom_ = bytes_;
}

const DeviceHeap::SemaphoreRecord* DeviceHeap::FindSemaphore(
    int64_t offset) const {
  auto holds = [offset](const SemaphoreRecord& rec) {
    return offset >= rec.offset &&
           offset < rec.offset + rec.count * kSemaphoreBytes;
  };
  if (offset >= persistent_bottom_) {
    const std::vector<SemaphoreRecord>& records = persistent_semaphores_;
    if (persistent_hint_ < records.size() && holds(records[persistent_hint_])) {
      return &records[persistent_hint_];
    }
    for (size_t i = 0; i < records.size(); ++i) {
      if (!holds(records[i])) continue;
      persistent_hint_ = i;
      return &records[i];
    }
    return nullptr;
  }
  for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
    for (const SemaphoreRecord& rec : scope->semaphores) {
      if (holds(rec)) return &rec;
    }
  }
  return nullptr;
}

std::string DeviceHeap::SemaphoreName(Semaphore sem) const {
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

std::string DeviceHeap::DescribeSemaphore(Semaphore sem) const {
  return absl::StrCat(
      SemaphoreName(sem), " (count ",
      CellAt(sem.heap_offset())->count.load(std::memory_order_relaxed), ")");
}

}  // namespace meshdma::dma_internal
