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
#include "meshdma/collectives/reduce_scatter.h"
#include "meshdma/dma/check.h"
#include "meshdma/dma/symmetric_memory.h"

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

// The one-shot reduction kernel, for all-reduce (`whole`: every peer gets
// my whole input) and reduce-scatter (member j gets segment j of my input,
// `ScatterSegment`):
//   step 0: when `check`ed, signal the call's signature to the next member
//           (`SendSignature`); after step 1, compare the previous member's
//           with mine (`ReceiveSignature`), so that a member making another
//           call (another collective, size or type) is an error at once;
//   step 1: stage a 64-byte header (the signature, when checked) and what
//           member j gets, and push it into row r of member j's scratch
//           [n, 64 + largest segment]: one DMA per peer, all on one send
//           and one receive semaphore (`whole`: staged once, in my own row,
//           which no peer writes);
//   step 2: wait until the n-1 rows for me have arrived and my pushes have
//           been read (one wait each: the byte counts add up);
//   step 3: compare every peer's header with mine;
//   step 4: reduce the rows in group order into `out` (my own part of `in`
//           stands for row r).
// The signal of step 0 travels while the rows do, so the check costs no
// extra round trip; the headers of step 3 compare every member, not just the
// ring neighbours.
template <typename T>
absl::Status OneShotReduce(absl::string_view name, const Group& g, ReduceOp op,
                           const ArrayRef& in, const ArrayRef& out,
                           int64_t signature, bool check, bool whole) {
  const int n = g.size(), r = g.index;
  const int64_t count = in.num_elements();
  constexpr int64_t elem = static_cast<int64_t>(sizeof(T));
  const int64_t header = check ? kOneShotHeaderBytes : 0;
  // Member j's part of my input, in elements: [begin, begin + len).
  auto part = [&](int j) -> std::pair<int64_t, int64_t> {
    if (whole) return {0, count};
    const auto [begin, len] = ScatterSegment(count, n, j);
    return {begin, len};
  };
  const int64_t row = header + (whole ? count : (count + n - 1) / n) * elem;
  if (whole && row == 0) return absl::OkStatus();
  // Step 0: the neighbour check's first half, before anything that depends
  // on the call's size (docs/semantics.md §6).
  if (check) MESHDMA_RETURN_IF_ERROR(SendSignature(g, signature));
  MESHDMA_ASSIGN_OR_RETURN(
      SemaphoreArray sems,
      AllocateSemaphoreArray(SemaphoreType::kDma, 2, "one-shot"));
  const Semaphore send_sem = sems[0], recv_sem = sems[1];
  MESHDMA_ASSIGN_OR_RETURN(
      ArrayRef scratch,
      AllocateSymmetric(DType::kU8, {(whole ? n : 2 * n) * row}));
  // Step 1. A row's bytes: the header, then the part (checked mode records
  // the staging copy's read and write).
  auto stage = [&](int j, int64_t at) {
    const auto [begin, len] = part(j);
    const ArrayRef staged = Range(scratch, at, header + len * elem);
    if (RaceCheckingEnabled()) {
      AnnotateRead(Range(in, begin, len), "one-shot staging read");
      AnnotateWrite(staged, "one-shot staging write");
    }
    if (check) std::memcpy(staged.data(), &signature, sizeof(signature));
    std::memcpy(staged.data() + header, in.data() + begin * elem, len * elem);
    return staged;
  };
  int64_t sent_bytes = 0;
  const ArrayRef mine = whole ? stage(r, r * row) : ArrayRef();
  for (int k = 1; k < n; ++k) {
    const int j = (r + k) % n;
    const ArrayRef src = whole ? mine : stage(j, (n + j) * row);
    if (src.size_bytes() == 0) continue;
    MESHDMA_RETURN_IF_ERROR(
        RemoteCopy(src, Range(scratch, r * row, src.size_bytes()), send_sem,
                   recv_sem, g.members[j])
            .start());
    sent_bytes += src.size_bytes();
  }
  // Step 0's second half: a peer making another call may never send the
  // bytes waited for below.
  if (check) MESHDMA_RETURN_IF_ERROR(ReceiveSignature(name, g, signature));
  // Step 2 (wait-only descriptors of the total byte counts).
  const auto [my_begin, my_len] = part(r);
  const int64_t in_bytes = header + my_len * elem;  // Per peer, to me.
  const ArrayRef all_in = Range(scratch, 0, (n - 1) * in_bytes);
  MESHDMA_RETURN_IF_ERROR(
      RemoteCopy(all_in, all_in, send_sem, recv_sem, g.Peer(whole ? 1 : -1))
          .wait_recv());
  const ArrayRef all_out = Range(scratch, 0, sent_bytes);
  MESHDMA_RETURN_IF_ERROR(
      RemoteCopy(all_out, all_out, send_sem, recv_sem, g.Peer(1)).wait_send());
  // Steps 3 and 4.
  const std::byte* rows = scratch.data();
  if (check) {
    MESHDMA_RETURN_IF_ERROR(CheckRowSignatures(name, g, signature, rows, row));
  }
  AnnotateReduceRows(
      g, Range(in, my_begin, my_len),
      [&](int i) { return Range(scratch, i * row, in_bytes); }, out);
  ReduceRows<T>(op, g, in.data_as<const T>() + my_begin, rows, row, header,
                out.data_as<T>(), my_len);
  return absl::OkStatus();
}

// One-shot reduction over the group's channel (channel.h), for all-reduce
// (every member sends its whole input to every peer) and reduce-scatter
// (member j gets segment j):
//   step 1: push `part(j)` of my input to every member j
//           (Channel::Exchange, steps 1-3);
//   step 2: reduce, in group order, the n copies of my `out.num_elements()`
//           elements into the contiguous `out`; `mine` (my own part) stands
//           for my row.
// `part(j)` returns {first byte, byte count} of what member j gets; parts
// and `mine` lie in `input`. `channel` is the group's (Channel::For).
template <typename T, typename Part>
absl::Status ChannelReduce(Channel* channel, absl::string_view name,
                           const Group& g, ReduceOp op, int64_t signature,
                           const ArrayRef& input, Part part, const T* mine,
                           const ArrayRef& out) {
  return channel->ExchangeWithAll(name, g, signature, &input, &out, part,
                                  out.size_bytes(), [&](const std::byte* rows) {
                                    // The rows' reads and `out`'s write are the
                                    // channel's to record.
                                    ReduceRows<T>(
                                        op, g, mine, rows, channel->row_bytes(),
                                        Channel::kHeaderBytes, out.data_as<T>(),
                                        out.num_elements());
                                  });
}

}  // namespace meshdma::collectives_internal

#endif  // MESHDMA_COLLECTIVES_INTERNAL_ONE_SHOT_H_
