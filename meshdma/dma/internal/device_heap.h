// A device's symmetric heap: where each allocation lies, the stack of kernel
// scopes that free it, the persistent memory of a Run, and the records of the
// semaphores they hold (which handles are live, and their names in errors).
// It keeps its free memory zero: a closing scope zeroes what it frees, so an
// allocation starts zeroed without being touched. It knows nothing of DMAs,
// meshes or the race checker: `Device` drains its DMAs before a scope closes
// and tells the checker what was taken and freed.
//
// Layout, the same on every device: the reserved cells (device barrier,
// collective ids), the call note, then the scopes' allocations growing up
// from `kReservedHeapBytes`, and persistent memory growing down from the end.
#ifndef MESHDMA_DMA_INTERNAL_DEVICE_HEAP_H_
#define MESHDMA_DMA_INTERNAL_DEVICE_HEAP_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/dma/internal/allocation_log.h"
#include "meshdma/dma/internal/semaphore_cell.h"
#include "meshdma/dma/semaphore.h"

namespace meshdma::dma_internal {

// Device-barrier cells: two sets (alternate barriers) of one cell per
// dissemination round, so a cell holds at most one signal at a time.
inline constexpr int kMaxBarrierRounds = 16;
inline constexpr int kBarrierCells = 2 * kMaxBarrierRounds;
inline constexpr int64_t kBarrierCellsOffset = 0;
inline constexpr int64_t kCollectiveCellsOffset =
    kBarrierCellsOffset + kBarrierCells * kSemaphoreBytes;
// Then the device's call note (call_note.h), one line.
inline constexpr int64_t kCallNoteOffset =
    kCollectiveCellsOffset + 64 * kSemaphoreBytes;
inline constexpr int64_t kCallNoteBytes = 64;
inline constexpr int64_t kReservedHeapBytes = kCallNoteOffset + kCallNoteBytes;

class DeviceHeap {
 public:
  // An allocation of `count` semaphores of `type` at heap `offset`.
  struct SemaphoreRecord {
    int64_t offset;
    int count;
    SemaphoreType type;
    std::string name;
  };
  // What a closing scope freed: [begin, end) of the heap.
  struct Freed {
    int64_t begin;
    int64_t end;
    std::string kernel_name;
  };

  // `owner` names the device in errors ("device 3 (rank 1, local 1)");
  // [base, base + bytes) is zero.
  DeviceHeap(std::string owner, std::byte* base, int64_t bytes);

  std::byte* base() const { return base_; }
  int64_t bytes() const { return bytes_; }
  // The scopes' allocations are [kReservedHeapBytes, top), persistent
  // memory [persistent_bottom, bytes).
  int64_t top() const { return top_; }
  int64_t persistent_bottom() const { return persistent_bottom_; }
  int64_t bytes_free() const { return persistent_bottom_ - top_; }
  SemaphoreCell* CellAt(int64_t offset) const {
    return reinterpret_cast<SemaphoreCell*>(base_ + offset);
  }
  // The allocations of the current Run, in order; `ResetLog` at its start.
  const AllocationLog& allocations() const { return log_; }
  void ResetLog() { log_.Reset(); }

  // --- Scopes. The number open, the innermost's kernel name ("" outside
  // every scope), and the innermost collective id of any.
  int depth() const { return static_cast<int>(scopes_.size()); }
  absl::string_view kernel_name() const {
    return scopes_.empty() ? absl::string_view() : scopes_.back().kernel_name;
  }
  std::optional<int> collective_id() const;
  void PushScope(std::string kernel_name, std::optional<int> collective_id);
  // Appends to `problems` each semaphore of the innermost scope whose count
  // is not 0 ("'recv' DMA semaphore @14336 (count 2) is 2, expected 0").
  void CheckScopeSemaphores(std::vector<std::string>& problems) const;
  // Closes the innermost scope: with `zero`, quiesces its semaphores and
  // zeroes the bytes it allocated (only the 64-byte lines not zero already);
  // without, leaves them for a recovery to zero. Requires an open scope.
  Freed PopScope(bool zero);

  // --- Allocation in the innermost scope, from the top, 64-byte aligned.
  // Errors name the owner, the request and the bytes left.
  absl::StatusOr<ArrayRef> Allocate(DType dtype,
                                    std::span<const int64_t> shape);
  // `count` semaphores of `type` named `name`; their heap offset.
  absl::StatusOr<int64_t> AllocateSemaphores(SemaphoreType type, int count,
                                             absl::string_view name);
  // Raises the top to `offset` (rounded up to 64) when it is lower, with no
  // record in the allocation log.
  absl::Status PadTo(int64_t offset);

  // --- Persistent memory, from the end down, outside every scope.
  absl::StatusOr<ArrayRef> AllocatePersistent(DType dtype,
                                              std::span<const int64_t> shape,
                                              absl::string_view name);
  absl::StatusOr<int64_t> AllocatePersistentSemaphores(SemaphoreType type,
                                                       int count,
                                                       absl::string_view name);
  // As CheckScopeSemaphores, for the persistent semaphores.
  void CheckPersistentSemaphores(std::vector<std::string>& problems) const;
  // Quiesces the persistent semaphores, zeroes and releases the memory.
  void ZeroPersistent();

  // --- Recovery. The heap used since the last reset: [0, touched_top) and
  // [touched_bottom, bytes).
  int64_t touched_top() const { return touched_top_; }
  int64_t touched_bottom() const { return touched_bottom_; }
  // Zeroes [0, zero_top) (the reserved part included) and
  // [zero_bottom, bytes), and forgets every scope and persistent allocation.
  void ResetAfterFailure(int64_t zero_top, int64_t zero_bottom);

  // --- Semaphore records. The live record holding `offset`: persistent
  // when the offset is persistent memory, else of an open scope (the
  // innermost first); null when none.
  const SemaphoreRecord* FindSemaphore(int64_t offset) const;
  // "'recv' DMA semaphore @14336": the name the allocation gave (or the
  // reserved cell's), its type and offset.
  std::string SemaphoreName(Semaphore sem) const;
  // SemaphoreName plus the current count.
  std::string DescribeSemaphore(Semaphore sem) const;

 private:
  struct Scope {
    int64_t heap_mark;
    std::string kernel_name;
    std::optional<int> collective_id;
    std::vector<SemaphoreRecord> semaphores;
    AllocationLog::Mark allocations;  // The sequence when the scope opened.
  };

  absl::Status Exhausted(absl::string_view request, int64_t needed) const;
  void CheckZero(const std::vector<SemaphoreRecord>& records,
                 std::vector<std::string>& problems) const;

  const std::string owner_;
  std::byte* const base_;
  const int64_t bytes_;
  int64_t top_ = kReservedHeapBytes;
  int64_t persistent_bottom_;
  int64_t touched_top_ = kReservedHeapBytes;
  int64_t touched_bottom_;
  std::vector<Scope> scopes_;
  std::vector<SemaphoreRecord> persistent_semaphores_;
  // The persistent record `FindSemaphore` matched last, tried first: a
  // channel checks the same few semaphores on every call. Only a hint; the
  // record is checked like any other.
  mutable size_t persistent_hint_ = 0;
  AllocationLog log_;
};

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_INTERNAL_DEVICE_HEAP_H_
