#include "meshdma/dma/internal/copy_plan.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "meshdma/base/checked_math.h"

namespace meshdma::dma_internal {

ViewLayout ViewLayout::Of(const ArrayRef& ref) {
  ViewLayout v;
  v.rank = ref.rank();
  const int64_t elem = static_cast<int64_t>(DTypeSize(ref.dtype()));
  // An empty view's strides bound nothing (they need not even fit in bytes),
  // nor does the stride of a dimension of size 1, which an ArrayRef may hold
  // at any value: its byte extent, checked when it was made, fits in int64,
  // so only those may overflow here.
  const bool empty = ref.num_elements() == 0;
  for (int d = 0; d < v.rank; ++d) {
    v.shape[d] = ref.shape()[d];
    v.byte_strides[d] =
        empty ? 0
              : base_internal::CheckedMul(ref.strides()[d], elem).value_or(0);
  }
  return v;
}

ViewLayout ViewLayout::Contiguous(const ArrayRef& ref) {
  ViewLayout v;
  v.rank = ref.rank();
  int64_t stride = static_cast<int64_t>(DTypeSize(ref.dtype()));
  for (int d = v.rank - 1; d >= 0; --d) {
    v.shape[d] = ref.shape()[d];
    v.byte_strides[d] = stride;
    stride *= v.shape[d];
  }
  return v;
}

CopyPlan::CopyPlan(const ViewLayout& src, const ViewLayout& dst,
                   int64_t elem_bytes) {
  for (int o = 0; o < src.rank; ++o) {
    if (src.shape[o] == 0) {  // Nothing to copy.
      run_bytes_ = elem_bytes;
      num_runs_ = 0;
      return;
    }
  }
  // Grow the contiguous run from the innermost dimension outwards while both
  // views keep packing it densely.
  run_bytes_ = elem_bytes;
  int d = src.rank - 1;
  for (; d >= 0; --d) {
    if (src.shape[d] == 1) continue;
    if (src.byte_strides[d] != run_bytes_ || dst.byte_strides[d] != run_bytes_)
      break;
    run_bytes_ *= src.shape[d];
  }
  num_runs_ = 1;
  for (int o = 0; o <= d; ++o) {
    if (src.shape[o] == 1) continue;
    outer_shape_[outer_rank_] = src.shape[o];
    src_strides_[outer_rank_] = src.byte_strides[o];
    dst_strides_[outer_rank_] = dst.byte_strides[o];
    num_runs_ *= src.shape[o];
    ++outer_rank_;
  }
}

int64_t CopyPlan::NumChunks(int64_t chunk_bytes) const {
  const int64_t total = total_bytes();
  if (total <= chunk_bytes || chunk_bytes <= 0) return 1;
  const int64_t by_bytes = (total + chunk_bytes - 1) / chunk_bytes;
  // A multi-run copy is split on run boundaries.
  return num_runs_ == 1 ? by_bytes : std::min(by_bytes, num_runs_);
}

void CopyPlan::CopyChunk(const std::byte* src, std::byte* dst, int64_t chunk,
                         int64_t num_chunks) const {
  if (num_runs_ == 0) return;
  if (num_runs_ == 1) {
    // One long run: split its bytes, keeping chunk starts 64-byte aligned.
    int64_t per = (run_bytes_ + num_chunks - 1) / num_chunks;
    per = (per + 63) & ~int64_t{63};
    const int64_t begin = std::min(run_bytes_, chunk * per);
    const int64_t end = std::min(run_bytes_, begin + per);
    if (end > begin) {
      // memmove: a DMA whose views overlap must not be undefined behaviour
      // (its result is unspecified; docs/semantics.md §3).
      std::memmove(dst + begin, src + begin, end - begin);
    }
    return;
  }
  const int64_t per = (num_runs_ + num_chunks - 1) / num_chunks;
  const int64_t first = std::min(num_runs_, chunk * per);
  const int64_t last = std::min(num_runs_, first + per);
  CopyRuns(src, dst, first, last);
}

void CopyPlan::CopyRuns(const std::byte* src, std::byte* dst, int64_t first,
                        int64_t last) const {
  // Decompose `first` into an outer multi-index, then step it like an
  // odometer.
  std::array<int64_t, kMaxRank> idx{};
  int64_t rem = first;
  for (int d = outer_rank_ - 1; d >= 0; --d) {
    idx[d] = rem % outer_shape_[d];
    rem /= outer_shape_[d];
  }
  int64_t src_off = 0, dst_off = 0;
  for (int d = 0; d < outer_rank_; ++d) {
    src_off += idx[d] * src_strides_[d];
    dst_off += idx[d] * dst_strides_[d];
  }
  for (int64_t r = first; r < last; ++r) {
    std::memmove(dst + dst_off, src + src_off, run_bytes_);
    for (int d = outer_rank_ - 1; d >= 0; --d) {
      ++idx[d];
      src_off += src_strides_[d];
      dst_off += dst_strides_[d];
      if (idx[d] < outer_shape_[d]) break;
      src_off -= idx[d] * src_strides_[d];
      dst_off -= idx[d] * dst_strides_[d];
      idx[d] = 0;
    }
  }
}

}  // namespace meshdma::dma_internal
