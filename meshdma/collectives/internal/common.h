// Helpers shared by the collectives: the device group of a call, operand
// checks, the neighbour consistency check, and remote-copy shorthands.
#ifndef MESHDMA_COLLECTIVES_INTERNAL_COMMON_H_
#define MESHDMA_COLLECTIVES_INTERNAL_COMMON_H_

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshdma/collectives/options.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/semaphore.h"
#include "meshdma/topology/mesh.h"

namespace meshdma::collectives_internal {

// The devices one call of a collective talks to, as seen by the caller: the
// caller's ring over the call's axes (`members`, `index`, `Peer`) and what
// errors name.
struct Group : RingPosition {
  const Mesh* mesh = nullptr;
  int global_device = 0;
  std::span<const std::string> axes;  // The caller's; valid during the call.
  // "device 5 (position 1 of 4 along {x} of mesh {x: 4})", for errors only
  // (built on demand: the small-message path must not format strings).
  std::string Describe() const;
};

// The group of the calling device over `axes` on the current mesh. Errors
// (outside `Runtime::Run`, empty or unknown axes) name `collective`.
absl::StatusOr<Group> ResolveGroup(absl::string_view collective,
                                   std::span<const std::string> axes);

// `a` as a 1-D contiguous view; an error naming `collective` and `operand`
// when it is strided or empty-handed.
absl::StatusOr<ArrayRef> Flatten(const ArrayRef& a,
                                 absl::string_view collective,
                                 absl::string_view operand, const Group& group);

// Whether the members of `g` sit on more than one host of the launch (the
// same answer on every member).
bool SpansHosts(const Group& g);

// The calling device's symmetric heap in bytes (the same on every device of
// the launch); 0 off a device thread.
int64_t HeapBytes();

// An InvalidArgument error "<collective> on <device>: <message>".
absl::Status CollectiveError(absl::string_view collective, const Group& group,
                             absl::string_view message);

// The checks every collective makes at entry, right after `ResolveGroup`, of
// its arguments that are not operands: `options.algorithm` and, for the
// reductions, `*op` must be enumerators of their enums (not integers cast to
// them), and `options.chunk_bytes` and `options.num_buffers` at least 1.
// Otherwise InvalidArgument naming `collective`, the device, the argument and
// its value.
absl::Status CheckArguments(absl::string_view collective, const Group& group,
                            const CollectiveOptions& options,
                            const ReduceOp* op = nullptr);

// `output` must be in the symmetric heap so peers can push into it.
absl::Status RequireSymmetric(absl::string_view collective, const Group& group,
                              absl::string_view operand, const ArrayRef& a);

// For collectives whose members' outputs differ in size by design (the
// blocks of an uneven all_to_all, the segments of psum_scatter): when
// `output` is symmetric, pads this device's heap to the end of the largest
// member's output (`largest_bytes` from `output`'s offset), so that what the
// collective and its caller allocate next lands at the same offset on every
// member, without the caller padding (docs/semantics.md §1).
absl::Status PadToLargestOutput(const ArrayRef& output, int64_t largest_bytes);

// What the neighbour check compares.
enum class CollectiveKind : int {
  kPpermute = 1,
  kAllGather = 2,
  kReduceScatter = 3,
  kAllReduce = 4,
  kAllToAll = 5,
};

// The neighbour check: tells the next device of the ring what this call is
// and checks that the previous device is making the same call, as a 63-bit
// signature (`CallSignature`) sent as one signal on the kernel's BARRIER
// semaphore: kind, dtype, element count (mod about 2^24), `aux` in [0, 64),
// the plan (`PlanBits`, added by `WithPlan`) and the heap offset of
// `symmetric` (the output peers write into, when it must be symmetric), so that
// outputs allocated at different offsets are an error rather than writes into
// the wrong bytes. With `second` (a symmetric input that peers read in place,
// kDirect), the offset mixes both operands'. `EnterKernel` runs it after the
// entry barrier (or only on a mismatch, see there); the one-shot reductions run
// it in two halves, overlapped with their first data: `SendSignature` tells the
// next device of the ring what this call is; `ReceiveSignature` waits for the
// previous device's and fails, naming both calls, when it differs. Call the
// second before waiting for any data a mismatched peer might never send.
absl::Status SendSignature(const Group& group, int64_t signature);
absl::Status ReceiveSignature(absl::string_view collective, const Group& group,
                              int64_t signature);
int64_t CallSignature(CollectiveKind kind, DType dtype, int64_t count, int aux,
                      const ArrayRef* symmetric,
                      const ArrayRef* second = nullptr);
// The plan of a call as its signature carries it (7 bits): the kernel's
// `algorithm`, and where `cuts` (the reductions' rings and hierarchy, whose
// steps move pieces of `chunk_bytes` through `num_buffers` slots, and
// between hosts `lane_chunk_bytes`) a 4-bit hash of those options. Members
// whose plans differ (another algorithm requested, other chunk sizes) then
// fail at the kernel's entry, naming both plans, instead of waiting for bytes
// the other never sends. The pieces themselves are kept for the next
// `EnterKernel` of this device: a kernel over the whole mesh compares them
// exactly in its entry barrier (two sizes of one 4-bit hash fail there too,
// naming this device's sizes); one over part of the mesh compares only the
// hash (1 pair of sizes in 16 passes it). Call it right before the kernel.
// `WithPlan` puts `plan_bits` into `signature`.
int PlanBits(CollectiveAlgorithm algorithm, const CollectiveOptions& options,
             bool cuts);
int64_t WithPlan(int64_t signature, int plan_bits);
// `PlanBits` of a reduction's kernel (all-reduce, reduce-scatter): its rings
// and hierarchy cut pieces; one-shot and direct do not.
int ReductionPlanBits(CollectiveAlgorithm algorithm,
                      const CollectiveOptions& options);
// ppermute's `aux`: a 6-bit hash of its pairs (the same on every member that
// passes the same permutation, in any order).
int PermutationAux(std::span<const std::pair<int, int>> perm);
// The error when a peer's signature differs.
absl::Status CompareSignatures(absl::string_view collective, const Group& group,
                               int64_t mine, int64_t theirs, int peer);

// Bounds of part `i` of `count` elements split `n` ways: [Begin(i),
// Begin(i+1)).
inline int64_t PartBegin(int64_t count, int64_t n, int64_t i) {
  return count * i / n;
}

// A remote copy to the group member with LOGICAL id `logical`.
inline AsyncCopyDescriptor RemoteCopy(const ArrayRef& src, const ArrayRef& dst,
                                      Semaphore send_sem, Semaphore recv_sem,
                                      int logical) {
  return make_async_remote_copy(src, dst, send_sem, recv_sem, DeviceId(logical),
                                DeviceIdType::kLogical);
}

// The collective id whose BARRIER semaphore the collectives use for the
// neighbour check. It lives outside the heap's allocations, so the check
// works even when devices have allocated different sequences (and catches
// that).
inline constexpr int kCollectivesCollectiveId = kMaxCollectiveIds - 1;

// The kernel of a collective: its name, the default entry barrier (which
// keeps consecutive calls apart) and `kCollectivesCollectiveId`.
inline KernelOptions KernelFor(absl::string_view name) {
  KernelOptions options;
  options.name = std::string(name);
  options.collective_id = kCollectivesCollectiveId;
  return options;
}

// The kernel of a collective whose body starts with `EnterKernel(...)`,
// which then stands for the entry barrier and the neighbour check.
//
// With the check on and a group that is the whole mesh, the entry barrier
// itself compares the call's signature across the mesh
// (`device_barrier_compare`): one round of signals before the data instead
// of two (over TCP a round is a network latency). Only where a mismatch was
// seen does the neighbour check follow, so that the error names both calls.
// Groups that are part of the mesh keep the barrier and the check: members
// of other groups may make the same call with other choices (another
// algorithm), which the signature covers. Every member decides alike.
//
// `EnterKernel` also counts the collective kernels this device enters in the
// current Run. Every one has an entry barrier over the whole mesh, so every
// device of the mesh enters as many. When the Run ends on a device that
// entered any (and did not fail), it enters one more kernel over the whole
// mesh, whose signature is "the end of its Run after N collective kernels"
// (a signature of its own kind): a device that skipped a call, and so ends its
// Run while the others still enter a kernel, meets that kernel's entry at once
// and both fail, naming both calls and their numbers, instead of waiting for
// the timeout. Where every device made the same calls it costs one barrier.
bool ComparesAtEntry(const Group& group, bool check);
KernelOptions KernelFor(absl::string_view name, const Group& group, bool check);
absl::Status EnterKernel(absl::string_view collective, const Group& group,
                         bool check, int64_t signature);

// Call notes (call_notes.cc; dma/internal/call_note.h): every call of a
// collective publishes, before anything of it waits, its group, its number
// among this device's calls over that group in the current Run, its
// signature and whether it runs over the group's channel. A wait that has
// been blocked for a while (never the fast path) compares the notes of the
// group's members that this process maps (devices of its process and host)
// and fails at once, naming both calls, where a member makes another call
// of the same number (another size that takes the other path, another
// permutation) or has ended its Run after fewer calls over the group. At
// the end of a Run without other hosts, a device waits (without messages)
// until the members of its groups have ended their Runs too, or shows that
// one makes a call it will never make; it gives up silently after the wait
// timeout (a member still computing). Where a member is on another host, the
// bound stays the wait timeout.
struct NotedGroup;
// The calling device's record of `g` in this Run (made on first use; valid
// until the Run ends).
NotedGroup* NotedGroupOf(const Group& g);
// Publishes the next call over `group`; `signature` 0 for a call whose
// peers are not checked (`check_peers` off). A kernel's `pieces` are its
// plan's exact pieces (`NextPlanPieces`), which a slow wait compares too, so
// that pieces over part of the mesh whose 4-bit hashes agree are told
// apart where the notes are readable.
void PublishCall(NotedGroup* group, int64_t signature, bool by_channel,
                 const std::array<int64_t, 3>& pieces = {});
// At a kernel's entry, once the members' signatures have arrived (each
// publishes its note before it signals): an error where a member this
// process maps makes this call with other pieces. Members whose note is not
// readable, or not yet of this call, are left to the signature.
absl::Status CompareNotesAtEntry();
// The description of a call's signature ("psum of 16 f32 elements (...)").
std::string DescribeCall(int64_t signature);
// The pieces that the next kernel's plan cuts (`PlanBits`): chunk_bytes,
// num_buffers and lane_chunk_bytes; zeros for a plan that cuts none.
std::array<int64_t, 3> NextPlanPieces();
// "chunk_bytes 131072, num_buffers 2" for `NextPlanPieces`'s words.
std::string DescribePieces(const std::array<int64_t, 3>& pieces);

// Runs `body` (absl::Status()) as the kernel of collective `name` over
// `group` (`KernelFor`), after entering it with the call's `signature`
// (`EnterKernel`).
template <typename Body>
absl::Status RunCollectiveKernel(absl::string_view name, const Group& group,
                                 bool check, int64_t signature, Body&& body) {
  PublishCall(NotedGroupOf(group), check ? signature : 0,
              /*by_channel=*/false, NextPlanPieces());
  return RunKernel(KernelFor(name, group, check), [&]() -> absl::Status {
    absl::Status entered = EnterKernel(name, group, check, signature);
    if (!entered.ok()) return entered;
    return body();
  });
}

// Who chose a collective's algorithm, as its MESHDMA_DEBUG line says it:
// " (auto)" or " (NAME requested)".
std::string ChosenBy(CollectiveAlgorithm requested);

// `dst` = `src`, copied on this device's thread (`Device::CopyLocal`):
// contiguous views of the same byte size (they may overlap), or strided
// views of the same shape; checked mode records a read of `src` and a write
// of `dst`.
void LocalCopy(const ArrayRef& src, const ArrayRef& dst);
// `dst`'s bytes (contiguous) set to 0; checked mode records the write.
void ZeroFill(const ArrayRef& dst);

// Elements [begin, begin + size) of a 1-D view (unchecked bounds: callers
// compute them).
ArrayRef Range(const ArrayRef& flat, int64_t begin, int64_t size);

}  // namespace meshdma::collectives_internal

#endif  // MESHDMA_COLLECTIVES_INTERNAL_COMMON_H_
