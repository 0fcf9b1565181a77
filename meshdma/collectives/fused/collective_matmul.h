// Collective matmuls: a matrix product fused with the collective that feeds
// or follows it, so that the communication of one block overlaps the product
// of another (the "collective matmul" decomposition used for tensor
// parallelism).
//
// All-gather matmul. x is sharded by rows over the ring axis (device i holds
// rows block i, [m/n, k]); w is local ([k, n_out], replicated or one
// column shard of a larger weight). out = all_gather(x) @ w, [m, n_out]. At
// step s a device multiplies the x block that started s places to its left
// into rows block (i - s) mod n of `out` while the DMA forwards that block to
// its right neighbour. Semaphores as in ring attention: `send`, `recv[2]`,
// and a REGULAR `free` from the right neighbour once its slot is consumed.
//
// Matmul reduce-scatter. x is sharded along the contraction ([m, k/n] on
// each device), w correspondingly ([k/n, n_out]); out = reduce_scatter(x @
// w) over rows: device i receives rows block i ([m/n, n_out]) of the sum
// over devices. An accumulator per rows block travels the ring: at step s
// device i computes its partial product for block (i - s - 1) mod n, adds
// the accumulator that arrived from its left and forwards the sum; at step
// n - 1 the block is its own and the sum is complete. The partial product of
// step s + 1 is computed while the sum of step s travels.
//
// Who moves the blocks (`options.transfer`, overlap.h). By DMA (`kDma`), as
// above. Read in place (`kPeerRead`): all-gather matmul multiplies the x
// block of the member s places to its left where that member keeps it (an
// entry barrier publishes every member's x; the members are threads of one
// process) and signals it at the end when done with it; matmul
// reduce-scatter adds its left neighbour's running sum straight from the
// neighbour's slot (any member of the same host). `kAuto`, the default,
// reads in place wherever the members allow it.
//
// Schedules (`options.schedule`). The ring above multiplies w once per rows
// block: a BLAS call reads (packs) all of w each time, so the ring reads w
// n times where one product of the whole rows reads it once. Where every
// member's symmetric memory can be loaded and stored (one host, checked mode
// off), `kOneProduct` runs the collective and one product instead:
// all-gather matmul stores each member's x block into every member's
// gathered x ([m, k], symmetric; collectives/internal/direct.h) and then
// multiplies it whole; matmul reduce-scatter multiplies x whole into a
// symmetric partial product ([m, n_out]) and each member sums its rows block
// of every member's partial product. Nothing overlaps: the collective costs
// its bytes once, where the ring costs n - 1 more passes over w. `kAuto`
// takes kOneProduct where it may run, the transfer is kAuto (a transfer
// asked for is the ring's), its buffer takes at most half the free
// symmetric heap, and w is at least the rows a member moves (all-gather
// matmul: n_out >= m/n, the ring's n - 1 passes over k x n_out against the
// gather's over m/n x k; matmul reduce-scatter: k >= m/n, against the sums'
// over m/n x n_out), else the ring. Every member's answer is gathered (one
// word each) before the kernel: members whose shapes fall on both sides of
// the test get InvalidArgument naming the member, where they would enter
// different kernels. The modes keep their
// meaning in kOneProduct: kSequential runs as kOverlapped (nothing to
// overlap), kComputeOnly multiplies the zero gathered x, or sums the
// member's own partial products, kCommunicationOnly runs the collective.
#ifndef MESHDMA_COLLECTIVES_FUSED_COLLECTIVE_MATMUL_H_
#define MESHDMA_COLLECTIVES_FUSED_COLLECTIVE_MATMUL_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "meshdma/collectives/fused/overlap.h"
#include "meshdma/dma/array_ref.h"

namespace meshdma {

// The schedule of a collective matmul (above).
enum class CollectiveMatmulSchedule {
  kAuto,
  // Per rows block, each block's transfer overlapping another's product.
  kRing,
  // The collective, then one product. FailedPrecondition, naming the
  // kernel, where some member's memory cannot be reached (another host,
  // checked mode); InvalidArgument with FusedTransfer::kDma.
  kOneProduct,
};

absl::string_view CollectiveMatmulScheduleName(
    CollectiveMatmulSchedule schedule);

struct CollectiveMatmulOptions {
  std::string axis = "x";
  OverlapMode mode = OverlapMode::kOverlapped;
  // Unset: MESHDMA_FUSED_TRANSFER, else FusedTransfer::kAuto.
  std::optional<FusedTransfer> transfer;
  // Unset: MESHDMA_COLLECTIVE_MATMUL_SCHEDULE, else kAuto.
  std::optional<CollectiveMatmulSchedule> schedule;
};

// x f32 [m/n, k], w f32 [k, n_out], out f32 [m, n_out] (contiguous). Call on
// every device of the current mesh; one kernel with an entry barrier.
absl::Status AllGatherMatmul(const ArrayRef& x, const ArrayRef& w,
                             const ArrayRef& out,
                             const CollectiveMatmulOptions& options = {});

// x f32 [m, k/n], w f32 [k/n, n_out], out f32 [m/n, n_out] (contiguous).
absl::Status MatmulReduceScatter(const ArrayRef& x, const ArrayRef& w,
                                 const ArrayRef& out,
                                 const CollectiveMatmulOptions& options = {});

}  // namespace meshdma

#endif  // MESHDMA_COLLECTIVES_FUSED_COLLECTIVE_MATMUL_H_
