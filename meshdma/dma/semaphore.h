// REGULAR, DMA and BARRIER semaphores (docs/semantics.md §3-5).
//
// A `Semaphore` is a handle: an offset in the symmetric heap plus a type. Like
// every symmetric allocation it names the same semaphore on every device, so
// `semaphore_signal(sem, 1, peer)` adds to `peer`'s copy of `sem`.
//
// - REGULAR: counted signals. `semaphore_signal` adds (locally or on a peer);
//   `semaphore_wait(sem, v)` blocks until the local count >= v, then
//   subtracts v; `semaphore_read` returns a snapshot of the local count.
// - DMA: counts bytes. Only DMAs add to it and only DMA waits
//   (`wait_send`, `wait_recv`) consume it; signalling or `semaphore_wait` on
//   one is an error.
// - BARRIER: the per-kernel semaphore chosen by a collective id
//   (`get_barrier_semaphore`, dma/kernel.h); signalled and waited like a
//   REGULAR one.
//
// Waits never block forever: after the runtime's wait timeout they return
// DeadlineExceeded with a diagnostic (device, semaphore, expected and current
// counts, DMAs in flight, what every local device is blocked on).
#ifndef MESHDMA_DMA_SEMAPHORE_H_
#define MESHDMA_DMA_SEMAPHORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshdma/topology/mesh.h"

namespace meshdma {

enum class SemaphoreType { kRegular, kDma, kBarrier };
absl::string_view SemaphoreTypeName(SemaphoreType type);  // "REGULAR", ...
// Whether `type` is one of the enumerators (not a cast integer).
constexpr bool IsValidSemaphoreType(SemaphoreType type) {
  return type == SemaphoreType::kRegular || type == SemaphoreType::kDma ||
         type == SemaphoreType::kBarrier;
}

// A handle is checked where it enters a verb: it must name a live semaphore
// of its type on the calling device (allocated there in an open scope, or the
// BARRIER semaphore of `get_barrier_semaphore`). A handle forged from another
// offset or type, or one whose scope has closed, is InvalidArgument. Counts
// saturate at INT64_MAX instead of wrapping.
class Semaphore {
 public:
  Semaphore() = default;
  Semaphore(int64_t heap_offset, SemaphoreType type)
      : offset_(heap_offset), type_(type) {}
  bool valid() const { return offset_ >= 0; }
  int64_t heap_offset() const { return offset_; }
  SemaphoreType type() const { return type_; }
  std::string ToString() const;  // "REGULAR semaphore @4096"

 private:
  int64_t offset_ = -1;
  SemaphoreType type_ = SemaphoreType::kRegular;
};

// `n` semaphores of one type, contiguous in the heap.
class SemaphoreArray {
 public:
  SemaphoreArray() = default;
  SemaphoreArray(int64_t heap_offset, SemaphoreType type, int size)
      : offset_(heap_offset), type_(type), size_(size) {}
  int size() const { return size_; }
  SemaphoreType type() const { return type_; }
  // The i-th semaphore; an index outside [0, size) is an error.
  absl::StatusOr<Semaphore> at(int i) const;
  // Unchecked: the caller knows 0 <= i < size().
  Semaphore operator[](int i) const;

 private:
  int64_t offset_ = -1;
  SemaphoreType type_ = SemaphoreType::kRegular;
  int size_ = 0;
};

// Bytes of symmetric heap one semaphore occupies (a cache line).
inline constexpr int64_t kSemaphoreBytes = 64;

// Adds `inc` (>= 1) to `sem` on this device, or on `device_id` (resolved on
// the current mesh per docs/semantics.md §2).
absl::Status semaphore_signal(Semaphore sem, int64_t inc = 1);
absl::Status semaphore_signal(Semaphore sem, int64_t inc,
                              const DeviceId& device_id,
                              DeviceIdType id_type = DeviceIdType::kMesh);
// Blocks until the local count >= `value` (>= 1), then subtracts `value`.
absl::Status semaphore_wait(Semaphore sem, int64_t value = 1);
// A snapshot of the local count.
absl::StatusOr<int64_t> semaphore_read(Semaphore sem);

}  // namespace meshdma

#endif  // MESHDMA_DMA_SEMAPHORE_H_
