// Single-copy collectives for groups whose members can all load and store
// each other's symmetric memory (one host, checked mode off; see
// dma/peer_view.h): `CollectiveAlgorithm::kDirect`.
//
// All-gather: member r stores its input into block r of every member's
// output, itself (no DMA, no copy worker). All-to-all: member r stores block
// j of its input into block r of member j's output.
//
// Member r owns segment r of the input ([count*r/n, count*(r+1)/n)). It
// reads that segment from every member's input through peer views, reduces
// it in group order in blocks that stay in L1, and stores each block into
// every member's output (all-reduce) or its own (reduce-scatter). Every
// payload byte is read once and written once per destination, as a `memcpy`
// would: no staging slot, no partial sums, no copy worker. Segments are
// disjoint, so an output may alias its input.
//
// Both run inside a kernel, after its entry barrier, which orders every
// member's writes of its input (and its last reads of its output) before any
// peer touches them. Then:
//   step 1: peer views of every member's input (and output);
//   step 2: reduce segment r into the outputs;
//   step 3: signal every peer's REGULAR `done` semaphore (a release that
//           publishes step 2's stores), then wait for the n - 1 signals of
//           the peers: each has finished reading my input and writing my
//           output, so the caller may reuse both when it returns.
// The caller has compared the signatures of both the input and the output
// with the peers' (same call, same symmetric offsets): members read each
// other's inputs at their own offset.
//
// Devices that are threads of one process read each other's inputs where
// they are, whatever memory holds them (dma/peer_view.h, contract 6): each
// member stores its input's address into a board (one symmetric line) before
// the entry barrier, which publishes it, and step 1 reads the peers' boards.
// A private input then needs no copy for the peers, and the inputs no common
// offset; step 3 keeps every input alive until all peers are done with it.
#ifndef MESHDMA_COLLECTIVES_INTERNAL_DIRECT_H_
#define MESHDMA_COLLECTIVES_INTERNAL_DIRECT_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/internal/common.h"
#include "meshdma/collectives/internal/path_rules.h"
#include "meshdma/collectives/internal/reduce.h"
#include "meshdma/collectives/options.h"
#include "meshdma/dma/peer_view.h"
#include "meshdma/dma/semaphore.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma::collectives_internal {

// The bit of a signature's `aux` (common.h) that says the call runs kDirect,
// and the one that says its private input is copied for the peers (through
// the output, all_reduce.cc; into their scratch, DirectReduceScatter):
// members must agree on both.
inline constexpr int kDirectAux = 8;
inline constexpr int kPrivateInputAux = 16;
// The bit that says a kDirect call reads the inputs where they are, through
// boards (threads of one process, above).
inline constexpr int kBoardInputsAux = 32;

// True when every member of `g` can be reached by peer views (which is
// false in checked mode).
absl::StatusOr<bool> DirectReaches(const Group& g);
// True when every member of `g` is a device of this process, checked mode
// off: a kDirect reduction then reads the inputs through boards (above).
absl::StatusOr<bool> SharesAddressSpace(const Group& g);
// True when the calling device can read any memory of every member of `g`:
// every member is a device of this process (`SharesAddressSpace`), and a
// kDirect reduction then reads a private input through boards (above).
absl::StatusOr<bool> ReadsPeerMemory(const Group& g);

// The call signature (common.h, `CallSignature`) of a reduction's kernel.
// With `direct_input` (kDirect runs) `aux` carries kDirectAux and the
// signature mixes the input's heap offset with the output's: members read
// each other's inputs at their own offsets, so inputs from different
// allocations must be an error, not wrong data.
int64_t ReductionSignature(CollectiveKind kind, DType dtype, int64_t count,
                           int aux, const ArrayRef* symmetric_output,
                           const ArrayRef* direct_input);

// The kernel of a reduction (all-reduce, reduce-scatter): `KernelFor` and
// `EnterKernel` (common.h) with the reduction's signature, then
// `body(one_shot_check, board)`. The one-shot kernel overlaps its own
// neighbour check with its first DMAs: `one_shot_check` says whether it
// must, which is where the entry barrier does not compare the call.
// `reads_peer_inputs` (kDirect, and kHierarchical with `HostDirect`) puts
// `in` in the signature, as ReductionSignature's `direct_input`;
// `private_input` says that the call copies a private input for the peers
// (kPrivateInputAux). With `publish_input` (kBoardInputsAux: kDirect on
// threads of one process, or the hierarchy's steps inside hosts that are one
// process each), `in`'s address goes on a board before the entry barrier and
// `board` is that board (`MemberInputs`); else it is null. `plan_bits`
// (`PlanBits`, common.h) go into the signature.
absl::Status RunReductionKernel(
    absl::string_view name, const Group& g, const CollectiveOptions& options,
    CollectiveAlgorithm algorithm, CollectiveKind kind, ReduceOp op,
    const ArrayRef& in, const ArrayRef* symmetric_output,
    bool reads_peer_inputs, bool private_input, bool publish_input,
    int plan_bits,
    absl::FunctionRef<absl::Status(bool one_shot_check, const ArrayRef* board)>
        body);

// Step 1: `a` (symmetric) as each member holds it, in group order.
absl::StatusOr<std::vector<ArrayRef>> MemberViews(const Group& g,
                                                  const ArrayRef& a);
// Member i's input as this device reads it: at `data` in this process;
// `device` is the member's logical id.
struct MemberInput {
  const std::byte* data = nullptr;
  int device = -1;
};
// Step 1 for the inputs of a reduction, in group order: member i's `own`
// input on this device; with a `board` (RunReductionKernel), each member's
// input where it is, as its board says; else each peer's `shared`
// (symmetric) through peer views.
absl::StatusOr<std::vector<MemberInput>> MemberInputs(const Group& g,
                                                      const ArrayRef& own,
                                                      const ArrayRef& shared,
                                                      const ArrayRef* board);

// Step 2: elements [begin, begin + count) of every member's input, reduced
// in group order into the `num_outs` outputs `outs` (each already at
// `begin`'s place) as ReduceMany does.
template <typename T>
absl::Status ReduceMembers(ReduceOp op, std::span<const MemberInput> inputs,
                           int64_t begin, int64_t count, T* const* outs,
                           int num_outs, bool stream) {
  const int n = static_cast<int>(inputs.size());
  std::vector<const T*> sources(n);
  for (int i = 0; i < n; ++i) {
    sources[i] = reinterpret_cast<const T*>(inputs[i].data) + begin;
  }
  ReduceMany<T>(op, sources.data(), n, outs, num_outs, count, stream);
  return absl::OkStatus();
}

// The `done` semaphore of step 3, allocated before step 2 (every member
// allocates it at the same point of the kernel).
absl::StatusOr<Semaphore> AllocateDone();
// Step 3.
absl::Status DirectFinish(const Group& g, Semaphore done);

// Out of place, reductions whose input has at least this many bytes per
// device store their outputs with streaming stores (reduce.h, `StreamStore`):
// the outputs no longer fit the caches beside the inputs, and skipping the
// read-for-ownership saves a third of the memory traffic. In place, the
// output lines were just read, so regular stores are cheaper. Measured with
// `mpirun -np 2 meshdma-bench --collective all_reduce|reduce_scatter -b 16K
// -e 64M -f 4`, builds with the threshold at 8 MiB and with streaming off.
inline constexpr int64_t kDirectStreamMinBytes = 8 << 20;
inline bool StreamOutputs(const ArrayRef& in, const ArrayRef& out) {
  const bool overlap = out.data() < in.data() + in.size_bytes() &&
                       in.data() < out.data() + out.size_bytes();
  return !overlap && in.size_bytes() >= kDirectStreamMinBytes;
}

// True when views `a` and `b` share a byte (strided views: their spans from
// the lowest to the highest byte they reach). A call whose input shares
// bytes with its output runs in place.
bool ViewsOverlap(const ArrayRef& a, const ArrayRef& b);

// The all-to-all streams from this many bytes stored per device (the
// all-gather from kDirectGatherStreamMinBytes, below). Two alternating rounds
// of `mpirun -np 2 meshdma-bench --collective all_to_all -b 4M -e 64M -f 2`,
// streaming against regular stores: 400-420 against 250-335 us at 8 MiB,
// 965-970 against 1140-1210 us at 16 MiB, 2290-2620 against 2980-3020 us at
// 32 MiB.
inline constexpr int64_t kDirectAllToAllStreamMinBytes = 16 << 20;

// From kDirectChunkMinStoredBytes stored per device (the L2 of one core),
// the all-gather and the all-to-all store kDirectChunkBytes of every block
// before the next kDirectChunkBytes: the all-gather's input chunk then stays
// in the cache for its n stores, so the input is read once, not n times,
// and the all-to-all's stores to its peers and to itself interleave. Three
// alternating rounds of `mpirun -np 2 meshdma-bench --collective all_gather
// -b 1M -e 64M -f 2`, whole blocks against 64 KiB chunks: 37-38 against
// 26-27 us at 2 MiB, 128-130 against 99-106 us at 8 MiB; the same for
// `--collective all_to_all`: 39-42 against 32-35 us at 2 MiB, 232-266
// against 183-197 us at 8 MiB. Up to 1 MiB, and where stores stream, the
// same within the rounds' spread.
inline constexpr int64_t kDirectChunkBytes = 64 << 10;
inline constexpr int64_t kDirectChunkMinStoredBytes = 1 << 20;
// In chunks, the all-gather's regular stores stay faster than streaming ones
// up to a larger size than the all-to-all's. `--collective all_gather -b 8M
// -e 128M -f 2`, regular against streaming stores, 2 processes (3 rounds
// against 4): 235-251 against 388-409 us at 16 MiB, 843-924 against 788-864
// us at 32 MiB; 2 processes of 2 devices (2 rounds): 600-641 against 783-787
// us at 16 MiB, 1843-1963 against 1618-1632 us at 32 MiB.
inline constexpr int64_t kDirectGatherStreamMinBytes = 32 << 20;

// All-reduce into the 1-D symmetric `out`, n >= 2: member r reads segment
// r of its own input from `own` (any memory), and of each peer's as
// `MemberInputs(g, own, shared, board)` finds it: through the board, or from
// that peer's `shared` (1-D symmetric, at my offset of it). For a symmetric
// input (or a board) `shared` is the input; a private input without a board
// (all_reduce.cc) is `own`, with the peers' segments of it copied into `out`
// before the kernel, so that `shared` is `out`. Either may alias `out`.
template <typename T>
absl::Status DirectAllReduce(const Group& g, ReduceOp op, const ArrayRef& own,
                             const ArrayRef& shared, const ArrayRef& out,
                             const ArrayRef* board) {
  const int n = g.size();
  MESHDMA_ASSIGN_OR_RETURN(std::vector<MemberInput> ins,
                           MemberInputs(g, own, shared, board));
  MESHDMA_ASSIGN_OR_RETURN(std::vector<ArrayRef> outs, MemberViews(g, out));
  MESHDMA_ASSIGN_OR_RETURN(Semaphore done, AllocateDone());
  const int64_t b = PartBegin(own.num_elements(), n, g.index);
  const int64_t e = PartBegin(own.num_elements(), n, g.index + 1);
  std::vector<T*> destinations(n);
  for (int i = 0; i < n; ++i) destinations[i] = outs[i].data_as<T>() + b;
  // A private input's segments were just copied into the outputs that
  // peers read them from, so those lines are wanted in the caches: no
  // streaming stores then. Three alternating rounds of `mpirun -np 2
  // meshdma-bench --collective all_reduce --input private -f 2` (-b 8M for
  // 8 MiB, -b 16M -e 64M above), streaming against regular stores (median
  // us): 1563 against 1180 at 8 MiB, 3313 against 2656 at 16 MiB, 6391
  // against 6113 at 32 MiB, 13283 against 12484 at 64 MiB.
  const bool stream = own.data() == shared.data() && StreamOutputs(own, out);
  MESHDMA_RETURN_IF_ERROR(
      ReduceMembers<T>(op, ins, b, e - b, destinations.data(), n, stream));
  return DirectFinish(g, done);
}

// Step 1' below: the bytes of one scratch row (the largest segment, whole
// cache lines), and the row that member `sender` writes on `receiver`.
int64_t SegmentRowBytes(const ArrayRef& in, int n);
inline int SegmentRow(int sender, int receiver) {
  return sender < receiver ? sender : sender - 1;
}
absl::StatusOr<ArrayRef> ShareSegments(const Group& g, const ArrayRef& in);

// Reduce-scatter of the 1-D `in` (n segments) into `mine` (segment r, any
// memory), n >= 2. A symmetric `in`, or any `in` with a `board`
// (RunReductionKernel), is read in place (steps 1-3 above). A private one
// without a board is shared by stores instead:
//   step 1': store segment j of my input into my row of member j's scratch
//            ([n - 1, SegmentRowBytes], symmetric, allocated here: a row per
//            peer, `SegmentRow`) through a peer view, signal member j's
//            REGULAR `ready`, and wait for the n - 1 signals of the peers: my
//            rows hold their segments r (`ShareSegments`);
//   step 2': reduce my own segment (from `in`) and the rows, in group
//            order, into `mine`.
// After step 1' no member touches another's memory, so no step 3.
template <typename T>
absl::Status DirectReduceScatter(const Group& g, ReduceOp op,
                                 const ArrayRef& in, const ArrayRef& mine,
                                 const ArrayRef* board) {
  const int n = g.size();
  const int64_t b = PartBegin(in.num_elements(), n, g.index);
  T* const destination = mine.data_as<T>();
  if (!in.is_symmetric() && board == nullptr) {
    std::vector<const T*> sources(n);
    MESHDMA_ASSIGN_OR_RETURN(const ArrayRef rows, ShareSegments(g, in));
    const int64_t row_bytes = SegmentRowBytes(in, n);
    for (int i = 0; i < n; ++i) {
      sources[i] = i == g.index
                       ? in.data_as<const T>() + b
                       : reinterpret_cast<const T*>(
                             rows.data() + SegmentRow(i, g.index) * row_bytes);
    }
    ReduceMany<T>(op, sources.data(), n, &destination, 1, mine.num_elements(),
                  StreamOutputs(in, mine));
    return absl::OkStatus();
  }
  MESHDMA_ASSIGN_OR_RETURN(std::vector<MemberInput> ins,
                           MemberInputs(g, in, in, board));
  MESHDMA_ASSIGN_OR_RETURN(Semaphore done, AllocateDone());
  MESHDMA_RETURN_IF_ERROR(ReduceMembers<T>(op, ins, b, mine.num_elements(),
                                           &destination, 1,
                                           StreamOutputs(in, mine)));
  return DirectFinish(g, done);
}

// All-gather of `in` (any memory, `count` elements) into block r of every
// member's 1-D symmetric `out` ([n * count]), n >= 2; steps 1-3 as above
// (step 1 for the outputs only), step 2 in chunks (above).
absl::Status DirectAllGather(const Group& g, const ArrayRef& in,
                             const ArrayRef& out);
// The same with blocks of any length: block i of `out` is the elements
// [begins[i], begins[i + 1]) (n + 1 offsets), `own` holds block r (or is
// it: then only the peers' copies are stored), and `done` is step 3's
// semaphore, allocated by the caller (`AllocateDone`) where the members'
// heaps still agree.
absl::Status DirectAllGather(const Group& g, const ArrayRef& own,
                             const ArrayRef& out,
                             std::span<const int64_t> begins, Semaphore done);
// Stores the `blocks` of my 1-D symmetric `out` ({begin, length} in
// elements) into the same places of every other member's `out`; steps 2-3
// as above, `done` as for the previous.
absl::Status DirectShareBlocks(
    const Group& g, const ArrayRef& out,
    std::span<const std::pair<int64_t, int64_t>> blocks, Semaphore done);

// All-to-all, n >= 2: member r stores `block(j)` (a view of its input, any
// memory) into `slot(peer_out_j, r)` of member j's output, itself; `out_of(j)`
// is member j's output as a symmetric view (members' outputs may differ in
// shape by one row of the split axis), `slot(o, r)` block r of an output
// view `o`. Steps 1-3 as above (step 1 for the outputs only). Strided
// blocks go first, each by a local DMA; then the contiguous ones, in chunks
// (above), with streaming stores from kDirectAllToAllStreamMinBytes of
// input.
absl::Status DirectAllToAll(
    const Group& g, const ArrayRef& in,
    const std::function<ArrayRef(int)>& block,
    const std::function<absl::StatusOr<ArrayRef>(int)>& out_of,
    const std::function<ArrayRef(const ArrayRef&, int)>& slot);

// All-to-all in place, n >= 2, where block j of every member's 1-D
// symmetric `out` is `block_bytes` long and holds what goes to member j
// (split and concatenated along the same axis, blocks byte ranges). Member
// r's block j and member j's block r trade places: each member swaps the
// first half (whole cache lines) of the pairs where it is the lower
// position and the second half where it is the higher, through a buffer of
// kDirectSwapChunkBytes that stays in L1. Every byte that crosses is read
// once and written once, and no byte of the member's own block moves: the
// traffic of the concurrent-copy bound. Steps 1-3 as above (step 1 for the
// outputs only).
absl::Status DirectSwapBlocks(const Group& g, const ArrayRef& out,
                              int64_t block_bytes);
inline constexpr int64_t kDirectSwapChunkBytes = 8 << 10;

}  // namespace meshdma::collectives_internal

#endif  // MESHDMA_COLLECTIVES_INTERNAL_DIRECT_H_
