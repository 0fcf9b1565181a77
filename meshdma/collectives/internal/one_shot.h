// The receiving half shared by the one-shot algorithms (all-reduce and
// reduce-scatter): n rows of scratch, row i pushed by member i as a 64-byte
// header (the caller's call signature, when checked) followed by its data;
// this member's own contribution stays in place and stands for row `g.index`.
#ifndef MESHDMA_COLLECTIVES_INTERNAL_ONE_SHOT_H_
#define MESHDMA_COLLECTIVES_INTERNAL_ONE_SHOT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/internal/channel.h"
#include "meshdma/collectives/internal/common.h"
#include "meshdma/collectives/internal/reduce.h"
#include "meshdma/dma/check.h"

namespace meshdma::collectives_internal {

inline constexpr int64_t kOneShotHeaderBytes = 64;

// Step 3: every peer's header must carry my signature.
inline absl::Status CheckRowSignatures(absl::string_view name, const Group& g,
                                       int64_t signature, const std::byte* rows,
                                       int64_t row_bytes) {
  for (int i = 0; i < g.size(); ++i) {
    if (i == g.index) continue;
    int64_t theirs;
    std::memcpy(&theirs, rows + i * row_bytes, sizeof(theirs));
    MESHDMA_RETURN_IF_ERROR(
        CompareSignatures(name, g, signature, theirs, g.members[i]));
  }
  return absl::OkStatus();
}

// Step 4: `out[k] = reduce_i row_i[k]` over the members in group order, with
// `mine` for my own row; `header` bytes precede each row's data.
template <typename T>
void ReduceRows(ReduceOp op, const Group& g, const T* mine,
                const std::byte* rows, int64_t row_bytes, int64_t header,
                T* out, int64_t count) {
  auto row = [&](int i) {
    return i == g.index
               ? mine
               : reinterpret_cast<const T*>(rows + i * row_bytes + header);
  };
  // Two members: one pass straight into `out`, as in ReduceMany, without
  // building its list of sources: 70 instructions fewer of the 1,330 of an
  // 8-byte all-reduce on one host (bench/instructions_per_call.sh).
  if (g.size() == 2) {
    CombineArrays<Acc<T>>(op, row(0), row(1), out, count, 2);
    return;
  }
  // Group sizes are bounded by the channel and ring paths' own limits; keep
  // the pointers on the stack for the common sizes.
  const T* small[64];
  std::vector<const T*> large;
  const T** sources = small;
  if (g.size() > 64) {
    large.resize(g.size());
    sources = large.data();
  }
  for (int i = 0; i < g.size(); ++i) sources[i] = row(i);
  ReduceMany<T>(op, sources, g.size(), out, count);
}

// Checked mode (dma/check.h): `ReduceRows` reads `mine` and each peer's row
// `row_of(i)`, and writes `out`, through raw pointers; this records those
// accesses so that the waits before the reduction are checked to order them.
template <typename RowOf>
void AnnotateReduceRows(const Group& g, const ArrayRef& mine, RowOf row_of,
                        const ArrayRef& out) {
  if (!RaceCheckingEnabled()) return;
  AnnotateRead(mine, "reduction read of own input");
  for (int i = 0; i < g.size(); ++i) {
    if (i != g.index) AnnotateRead(row_of(i), "reduction read of a row");
  }
  AnnotateWrite(out, "reduction write of output");
}

// One-shot reduction over the group's channel (channel.h), for all-reduce
// (every member sends its whole input to every peer) and reduce-scatter
// (member j gets segment j):
//   step 1: push `part(j)` of my input to every member j
//           (Channel::Exchange, steps 1-3);
//   step 2: reduce, in group order, the n copies of my `out.num_elements()`
//           elements into the contiguous `out`; `mine` (my own part) stands
//           for my row.
// `part(j)` returns {first byte, byte count} of what member j gets.
// `channel` is the group's (Channel::For).
template <typename T, typename Part>
absl::Status ChannelReduce(Channel* channel, absl::string_view name,
                           const Group& g, ReduceOp op, int64_t signature,
                           Part part, const T* mine, const ArrayRef& out) {
  return channel->ExchangeWithAll(
      name, g, signature, part, out.size_bytes(), [&](const std::byte* rows) {
        // The rows' reads are the channel's to record.
        if (RaceCheckingEnabled())
          AnnotateWrite(out, "reduction write of output");
        ReduceRows<T>(op, g, mine, rows, channel->row_bytes(),
                      Channel::kHeaderBytes, out.data_as<T>(),
                      out.num_elements());
      });
}
template <typename T, typename Part>
absl::Status ChannelReduce(absl::string_view name, const Group& g, ReduceOp op,
                           int64_t signature, Part part, const T* mine,
                           const ArrayRef& out) {
  MESHDMA_ASSIGN_OR_RETURN(Channel * channel, Channel::For(g));
  return ChannelReduce<T>(channel, name, g, op, signature, part, mine, out);
}

}  // namespace meshdma::collectives_internal

#endif  // MESHDMA_COLLECTIVES_INTERNAL_ONE_SHOT_H_
