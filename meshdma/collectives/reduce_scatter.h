// Reduce-scatter: `psum_scatter` (and the other reductions) over mesh axes.
//
// Every device of a group passes the same number `count` of elements; the
// reduction over the group is split into n segments, [count*i/n,
// count*(i+1)/n) for the member at position i, and member i receives its
// segment in `output` (so counts the group size does not divide give
// segments that differ by one element; `ScatterSegment` says which). Each
// member may allocate exactly its own segment as `output`: when `output` is
// symmetric, the call pads the heap to the end of the largest segment, so
// what follows lands at the same offset everywhere (docs/semantics.md §1).
// `output` may be any contiguous memory: peers push partial sums into the
// call's own bounded scratch and only this device writes `output`. Types and
// algorithms are those of `all_reduce` (collectives/all_reduce.h); in place
// means `output` is the segment of `input` that this device keeps.
#ifndef MESHDMA_COLLECTIVES_REDUCE_SCATTER_H_
#define MESHDMA_COLLECTIVES_REDUCE_SCATTER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "meshdma/collectives/options.h"
#include "meshdma/dma/array_ref.h"

namespace meshdma {

absl::Status reduce_scatter(ReduceOp op, const ArrayRef& input,
                            const ArrayRef& output,
                            const std::vector<std::string>& axes,
                            const CollectiveOptions& options = {});

inline absl::Status psum_scatter(const ArrayRef& input, const ArrayRef& output,
                                 const std::vector<std::string>& axes,
                                 const CollectiveOptions& options = {}) {
  return reduce_scatter(ReduceOp::kSum, input, output, axes, options);
}

// {offset, size} of the segment of `count` elements that position `index` of
// a group of `group_size` receives.
inline std::pair<int64_t, int64_t> ScatterSegment(int64_t count, int group_size,
                                                  int index) {
  const int64_t b = count * index / group_size;
  return {b, count * (index + 1) / group_size - b};
}

}  // namespace meshdma

#endif  // MESHDMA_COLLECTIVES_REDUCE_SCATTER_H_
