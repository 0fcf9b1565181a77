// A copy between two views of the same shape, normalised into "runs": the
// longest suffix of dimensions contiguous in both views becomes one memcpy of
// `run_bytes`, and the remaining outer dimensions are iterated. A copy can be
// split into chunks (ranges of runs, or byte ranges of a single long run) that
// different threads execute independently.
#ifndef MESHDMA_DMA_INTERNAL_COPY_PLAN_H_
#define MESHDMA_DMA_INTERNAL_COPY_PLAN_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "meshdma/dma/array_ref.h"

namespace meshdma::dma_internal {

// The layout of one side of a copy, in bytes, independent of any address.
struct ViewLayout {
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> byte_strides{};

  static ViewLayout Of(const ArrayRef& ref);
  static ViewLayout Contiguous(const ArrayRef& ref);  // Same shape, packed.
};

class CopyPlan {
 public:
  // `src` and `dst` have the same shape and element size `elem_bytes`.
  CopyPlan(const ViewLayout& src, const ViewLayout& dst, int64_t elem_bytes);

  int64_t total_bytes() const { return num_runs_ * run_bytes_; }
  // Number of chunks of about `chunk_bytes` (at least 1).
  int64_t NumChunks(int64_t chunk_bytes) const;
  // Copies chunk `chunk` of `num_chunks` from `src` to `dst` (base addresses
  // of element 0 of each view).
  void CopyChunk(const std::byte* src, std::byte* dst, int64_t chunk,
                 int64_t num_chunks) const;
  void CopyAll(const std::byte* src, std::byte* dst) const {
    CopyChunk(src, dst, 0, 1);
  }

 private:
  void CopyRuns(const std::byte* src, std::byte* dst, int64_t first,
                int64_t last) const;
  int64_t run_bytes_ = 0;
  int64_t num_runs_ = 0;
  int outer_rank_ = 0;
  std::array<int64_t, kMaxRank> outer_shape_{};
  std::array<int64_t, kMaxRank> src_strides_{};
  std::array<int64_t, kMaxRank> dst_strides_{};
};

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_INTERNAL_COPY_PLAN_H_
