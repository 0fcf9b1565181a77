// The symmetric allocation check (docs/semantics.md §1): each device keeps a
// running hash of the heap offsets its symmetric allocations landed at (and
// the type of each semaphore allocation), a count, and a short log of the
// latest allocations to name them. Barriers compare the hashes across the
// mesh; when they differ, `DescribeDifference` names the first allocation
// whose size, kind or order differs.
#ifndef MESHDMA_DMA_INTERNAL_ALLOCATION_LOG_H_
#define MESHDMA_DMA_INTERNAL_ALLOCATION_LOG_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "meshdma/base/dtype.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/dma/semaphore.h"

namespace meshdma::dma_internal {

// One symmetric allocation, as the log keeps it (no strings: formatting
// happens only when a mismatch is reported).
struct AllocationRecord {
  int64_t index = 0;   // Position in this device's sequence for the Run.
  int64_t offset = 0;  // Heap offset.
  int64_t bytes = 0;   // Padded to 64.
  DType dtype = DType::kU8;
  int rank = 0;
  std::array<int64_t, kMaxRank> dims{};
  bool persistent = false;
  std::optional<SemaphoreType> semaphores;  // Set for semaphore arrays.
  int semaphore_count = 0;

  // "f32[1024] at heap offset 4096" or "3 DMA semaphores at heap offset ..".
  std::string ToString() const;
  // Same offset, padded size and kind (arrays of different element types
  // or shapes but the same padded size occupy the same bytes).
  bool SameLayout(const AllocationRecord& other) const;
};

class AllocationLog {
 public:
  // How many of the latest allocations are kept for messages.
  static constexpr int kKept = 32;

  // Forgets everything (a new Run).
  void Reset();
  // The sequence so far, and a return to it: a closing scope frees what was
  // allocated inside it, so only live allocations are compared (a nested
  // kernel that some devices run alone, such as decode's paged attention,
  // leaves nothing behind).
  struct Mark {
    uint64_t hash = 0;
    int64_t count = 0;
  };
  Mark mark() const { return {hash_.load(), count_.load()}; }
  void Rewind(const Mark& m);
  // Appends an array allocation and folds its offset into the hash.
  void NoteArray(int64_t offset, int64_t bytes, DType dtype,
                 std::span<const int64_t> shape, bool persistent);
  // Marks the latest allocation as `count` semaphores of `type`.
  void MarkSemaphores(SemaphoreType type, int count);

  // The hash of the sequence (its count included); 0 before any allocation.
  uint64_t hash() const { return hash_.load(); }
  int64_t count() const { return count_.load(); }
  // The kept records, oldest first (safe from other threads).
  std::vector<AllocationRecord> Snapshot() const;

  // Where two devices' sequences first differ in layout (offset, size, kind):
  // "allocation #3 is f32[1024] at heap offset 4096 on <mine_name> but
  // f32[2048] at heap offset 4096 on <theirs_name>", or a note that the
  // difference lies before the kept records.
  static std::string DescribeDifference(
      std::span<const AllocationRecord> mine, int64_t mine_count,
      const std::string& mine_name, std::span<const AllocationRecord> theirs,
      int64_t theirs_count, const std::string& theirs_name);

 private:
  void Mix(uint64_t v);

  // Written by the owning device only; atomic because a peer's barrier
  // error path reads them.
  std::atomic<uint64_t> hash_{0};
  std::atomic<int64_t> count_{0};
  mutable std::mutex mu_;  // Guards `kept_` (read by peers' error paths).
  std::vector<AllocationRecord> kept_;  // Ring of kKept, oldest at `next_`.
  size_t next_ = 0;
};

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_INTERNAL_ALLOCATION_LOG_H_
