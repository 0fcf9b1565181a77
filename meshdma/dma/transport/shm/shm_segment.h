// A POSIX shared-memory segment holding one process's device heaps, so that
// processes on the same host write straight into each other's heaps.
//
// Segments are private to the job: named with a tag drawn by rank 0 for this
// launch, created with owner-only permissions (0600) and O_EXCL. The runtime
// unlinks every name as soon as all same-host peers have mapped it, so no
// segment outlives the job however it ends; an exit before that point still
// unlinks through the destructor or the process's exit handler.
#ifndef MESHDMA_DMA_TRANSPORT_SHM_SHM_SEGMENT_H_
#define MESHDMA_DMA_TRANSPORT_SHM_SHM_SEGMENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace meshdma::dma_internal {

class ShmSegment {
 public:
  // "/meshdma-<tag>-<rank>".
  static std::string NameFor(uint64_t job_tag, int rank);
  // Creates and maps a new zero-filled segment of `bytes`.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Create(std::string name,
                                                            size_t bytes);
  // Maps a peer's existing segment, which must be `bytes` long.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Open(std::string name,
                                                          size_t bytes);
  ~ShmSegment();

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  // Removes the name (the mapping stays valid). Owner only; idempotent.
  void Unlink();

 private:
  ShmSegment(std::string name, std::byte* data, size_t size, bool owner)
      : name_(std::move(name)), data_(data), size_(size), owner_(owner) {}
  std::string name_;
  std::byte* data_;
  size_t size_;
  bool owner_;
  bool unlinked_ = false;
};

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_TRANSPORT_SHM_SHM_SEGMENT_H_
