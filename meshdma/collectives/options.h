// Options shared by meshdma's collectives (collectives/collectives.h).
#ifndef MESHDMA_COLLECTIVES_OPTIONS_H_
#define MESHDMA_COLLECTIVES_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace meshdma {

// The reduction of `psum` and friends. `kMean` is the sum divided by the
// group size; on integer types the division truncates toward zero.
enum class ReduceOp { kSum, kMax, kMin, kMean };
absl::string_view ReduceOpName(ReduceOp op);  // "sum", "max", ...
// Whether `op` is one of the enumerators above. Every collective rejects any
// other value (an integer cast to the enum) with InvalidArgument naming it.
constexpr bool IsValidReduceOp(ReduceOp op) {
  return static_cast<int>(op) >= 0 &&
         static_cast<int>(op) <= static_cast<int>(ReduceOp::kMean);
}

// How a collective moves data around its group.
enum class CollectiveAlgorithm {
  // The planner chooses, by the ordered rules that `CollectivePathRules`
  // prints (docs/architecture.md, "The plan"). In short: small calls take
  // the group's channel (one exchange, no entry barrier); `psum` and
  // `psum_scatter` run kOneShot up to `one_shot_max_bytes`, above it kDirect
  // when every member can address every other's heap, else kHierarchical
  // when the group spans hosts that each hold the same number of its
  // devices, else kRing on two devices and kBidirectionalRing on more.
  // `all_gather`: kDirect when every member is addressable, else
  // kHierarchical on such groups, else kRing. `all_to_all`: kDirect when
  // every member is addressable, else one DMA push per peer (kHierarchical
  // only on request). `ppermute`: one DMA per pair.
  kAuto,
  // One ring in group order: each device sends to the next and receives from
  // the previous; n - 1 steps per phase.
  kRing,
  // Two rings in opposite directions, each carrying half of every block.
  kBidirectionalRing,
  // All-reduce only: every device pushes its whole input to every peer and
  // reduces the n inputs locally (in group order, so that every device gets
  // the same bits). Two hops of latency; scratch of n times the input.
  kOneShot,
  // Groups that span hosts (all-reduce, reduce-scatter, all-gather,
  // all-to-all): the fast shared-memory links inside a host do most of the work
  // and each
  // device crosses hosts with 1/m of the data (m devices per host), all m
  // devices of a host in parallel. All-reduce: (1) reduce-scatter inside
  // each host, (2) all-reduce of part i among the hosts' local devices i,
  // (3) all-gather inside each host. Reduce-scatter: (1) inside, (2) among
  // the hosts. All-gather: (1) among the hosts, (2) inside. Needs the same
  // number of the group's devices on every host; otherwise (one host, or
  // uneven hosts) the flat kRing / kBidirectionalRing runs instead. Scratch
  // is that of the rings, except reduce-scatter's, which packs the input by
  // local index into scratch of the input's size. All-to-all: (1) inside
  // each host, member j gets every block bound for local index j on any
  // host, (2) among the hosts one DMA per host carries the blocks of all m
  // members, so a device sends H - 1 messages between hosts instead of
  // m(H - 1); two extra local copies, so kAuto does not choose it (measured
  // slower than direct pushes on simulated hosts).
  kHierarchical,
  // All-reduce, reduce-scatter, all-gather and all-to-all on one host
  // (dma/peer_view.h): device r reads segment r of every member's input in
  // place, reduces it, and stores it into every member's output
  // (reduce-scatter: its own; all-gather: r stores its block into every
  // output; all-to-all: r stores block j of its input into member j's
  // output). One read and one write per byte, no scratch; a kernel entry
  // barrier, then one signal to each peer when done. Needs every member
  // addressable by loads and stores and checked mode off; otherwise the flat
  // kRing / kBidirectionalRing runs instead (all-to-all: one DMA push per
  // peer). On threads of one process peers read a reduction's input where it
  // is, whatever memory holds it. Between processes, a private input (not in
  // the symmetric heap) is first copied for the peers: a psum copies the
  // segments its peers read into its own output and they read them there; a
  // psum_scatter stores each peer's segment into that peer's scratch, up to
  // kDirectPrivateScatterMaxBytes (collectives/internal/path_rules.h; rings
  // above).
  kDirect,
};
absl::string_view CollectiveAlgorithmName(CollectiveAlgorithm a);
// Whether `a` is one of the enumerators above; every collective rejects any
// other value with InvalidArgument naming it.
constexpr bool IsValidCollectiveAlgorithm(CollectiveAlgorithm a) {
  return static_cast<int>(a) >= 0 &&
         static_cast<int>(a) <= static_cast<int>(CollectiveAlgorithm::kDirect);
}

// The rule table by which every collective chooses its path (the channel,
// a kernel and its algorithm): its thresholds, then its rules in the order
// they are tried, one a line. `meshdma-info` prints it.
std::string CollectivePathRules();

struct CollectiveOptions {
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::kAuto;
  // Ring reduction steps move partial sums through this many scratch slots
  // per ring direction, each of `chunk_bytes`; a receiver hands a slot back
  // to its sender by signalling the sender's REGULAR capacity semaphore.
  // Scratch is therefore at most 2 directions x `num_buffers` x
  // `chunk_bytes` x 2 (receive slots, and send staging where the partials
  // cannot live in the output), whatever the message size.
  int64_t chunk_bytes = 256 << 10;
  int num_buffers = 2;
  // The hierarchical all-reduce's step between hosts (its lanes) cuts its
  // ring pieces to at least this many bytes instead of `chunk_bytes`, and on
  // two hosts takes one exchange (one-shot) for parts up to it. Between hosts
  // each piece is an MPI message, and one above MPI's eager size waits a
  // round trip for its receiver (the rendezvous), so pieces sized for shared
  // memory pay that round trip eight times per MiB. 1 MiB was measured
  // against 256 KiB and 2 MiB over TCP: the ring in 1 MiB pieces took
  // 0.54-0.79x the time of 256 KiB pieces from 1 to 16 MiB (2 processes as
  // 2 hosts, `mpirun -np 2 --mca btl self,tcp -x MESHDMA_FORCE_INTERHOST=1
  // meshdma-bench --collective all_reduce -b 1M -e 16M -f 2 --algo ring
  // --chunk-bytes C`).
  int64_t lane_chunk_bytes = 1 << 20;
  // kAuto picks kOneShot for all-reduce inputs up to this many bytes.
  int64_t one_shot_max_bytes = 16 << 10;
  // Before moving data, each device compares the collective, element type,
  // element count and reduction of its ring predecessor with its own (one
  // extra neighbour signal) and fails with both descriptions if they differ,
  // instead of hanging on a byte count that never arrives. The one-shot
  // reductions send that signal with their first DMAs (no extra round); a
  // kernel over the whole mesh compares the call in its entry barrier's
  // signals instead (docs/semantics.md §5).
  bool check_peers = true;
};

}  // namespace meshdma

#endif  // MESHDMA_COLLECTIVES_OPTIONS_H_
