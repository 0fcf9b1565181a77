#include "meshdma/collectives/internal/common.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/check.h"
#include "meshdma/dma/internal/device.h"
#include "meshdma/dma/internal/runtime_impl.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma::collectives_internal {
namespace {

// The groups this device thread resolved in the current Run: a small-message
// call repeats the same (mesh, axes) and must not rebuild the member list
// (three allocations) each time. Forgotten at the end of every Run, since a
// later Run's mesh may live at the same address.
struct ResolvedGroup {
  const Mesh* mesh;
  int logical;
  std::vector<std::string> axes;
  RingPosition ring;
};
constexpr int kMaxResolvedGroups = 8;
thread_local std::vector<ResolvedGroup>* t_groups = nullptr;

const RingPosition* FindResolved(const Mesh* mesh, int logical,
                                 std::span<const std::string> axes) {
  if (t_groups == nullptr) return nullptr;
  for (const ResolvedGroup& r : *t_groups) {
    if (r.mesh == mesh && r.logical == logical &&
        std::equal(r.axes.begin(), r.axes.end(), axes.begin(), axes.end())) {
      return &r.ring;
    }
  }
  return nullptr;
}

void RememberResolved(const Mesh* mesh, int logical,
                      std::span<const std::string> axes,
                      const RingPosition& ring) {
  if (t_groups == nullptr) {
    if (!AtRunEnd([] {
           delete t_groups;
           t_groups = nullptr;
         }).ok()) {
      return;
    }
    t_groups = new std::vector<ResolvedGroup>();
  }
  if (t_groups->size() >= kMaxResolvedGroups) return;
  t_groups->push_back({mesh, logical,
                       std::vector<std::string>(axes.begin(), axes.end()),
                       ring});
}

}  // namespace

absl::StatusOr<Group> ResolveGroup(absl::string_view collective,
                                   std::span<const std::string> axes) {
  auto mesh = current_mesh();
  if (!mesh.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(collective,
                     " must be called inside Runtime::Run on every "
                     "device of the mesh: ",
                     mesh.status().message()));
  }
  MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
  MESHDMA_ASSIGN_OR_RETURN(int global, global_device_id());
  Group g;
  g.mesh = *mesh;
  g.global_device = global;
  g.axes = axes;
  if (const RingPosition* known = FindResolved(*mesh, me, axes)) {
    static_cast<RingPosition&>(g) = *known;
    return g;
  }
  if (axes.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(collective, " on device ", global,
                     ": no axis named; name at least one axis of mesh ",
                     (*mesh)->ToString()));
  }
  auto ring = (*mesh)->Ring(me, axes);
  if (!ring.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(collective, " on device ", global, " over axes {",
                     absl::StrJoin(axes, ","), "}: ", ring.status().message()));
  }
  RememberResolved(*mesh, me, axes, *ring);
  static_cast<RingPosition&>(g) = *std::move(ring);
  return g;
}

std::string Group::Describe() const {
  return absl::StrCat("device ", global_device, " (position ", index, " of ",
                      size(), " along {", absl::StrJoin(axes, ","),
                      "} of mesh ", mesh->ToString(), ")");
}

bool SpansHosts(const Group& g) {
  absl::StatusOr<dma_internal::Device*> device =
      dma_internal::RequireDevice("SpansHosts");
  if (!device.ok() || g.mesh == nullptr) return false;
  const Launch& launch = (*device)->runtime()->launch();
  int first_host = -1;
  for (int member : g.members) {
    absl::StatusOr<int> global = g.mesh->GlobalDevice(member);
    if (!global.ok()) return false;
    const int host = launch.devices()[*global].host_index;
    if (first_host >= 0 && host != first_host) return true;
    first_host = host;
  }
  return false;
}

int64_t HeapBytes() {
  absl::StatusOr<dma_internal::Device*> device =
      dma_internal::RequireDevice("HeapBytes");
  return device.ok() ? (*device)->heap_bytes() : 0;
}

absl::Status CollectiveError(absl::string_view collective, const Group& group,
                             absl::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat(collective, " on ", group.Describe(), ": ", message));
}

absl::Status CheckArguments(absl::string_view collective, const Group& group,
                            const CollectiveOptions& options,
                            const ReduceOp* op) {
  if (op != nullptr && !IsValidReduceOp(*op)) {
    return CollectiveError(
        collective, group,
        absl::StrCat("reduction op (ReduceOp) ", static_cast<int>(*op),
                     " is not one of sum (0), max (1), min (2), mean (3)"));
  }
  if (!IsValidCollectiveAlgorithm(options.algorithm)) {
    return CollectiveError(
        collective, group,
        absl::StrCat("options.algorithm (CollectiveAlgorithm) ",
                     static_cast<int>(options.algorithm),
                     " is not one of auto (0), ring (1), bidirectional_ring "
                     "(2), one_shot (3), hierarchical (4), direct (5)"));
  }
  if (options.chunk_bytes < 1 || options.num_buffers < 1) {
    return CollectiveError(collective, group,
                           absl::StrCat("chunk_bytes (", options.chunk_bytes,
                                        ") and num_buffers (",
                                        options.num_buffers, ") must be >= 1"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ArrayRef> Flatten(const ArrayRef& a,
                                 absl::string_view collective,
                                 absl::string_view operand,
                                 const Group& group) {
  if (a.data() == nullptr && a.num_elements() != 0) {
    return CollectiveError(collective, group,
                           absl::StrCat(operand, " is an empty ref"));
  }
  if (!a.is_contiguous()) {
    return CollectiveError(
        collective, group,
        absl::StrCat(operand, " ", a.ToString(),
                     " is strided; collectives take contiguous arrays"));
  }
  if (a.rank() == 1) return a;  // The common case: nothing to build.
  const int64_t shape[] = {a.num_elements()};
  auto flat = a.Reshape(shape);
  if (!flat.ok()) {
    return CollectiveError(
        collective, group,
        absl::StrCat(operand, ": ", flat.status().message()));
  }
  return *flat;
}

absl::Status RequireSymmetric(absl::string_view collective, const Group& group,
                              absl::string_view operand, const ArrayRef& a) {
  if (a.is_symmetric() || group.size() == 1) return absl::OkStatus();
  return CollectiveError(
      collective, group,
      absl::StrCat(operand, " ", a.ToString(),
                   " is not in the symmetric heap; peers write into it "
                   "directly, so allocate it with AllocateSymmetric"));
}

absl::Status PadToLargestOutput(const ArrayRef& output, int64_t largest_bytes) {
  if (!output.is_symmetric()) return absl::OkStatus();
  return PadSymmetricHeapTo(output.heap_offset() + largest_bytes);
}

namespace {

// Signature layout (63 bits, never 0): [plan : 7][count + 1 mod 2^24 :
// 24][heap offset / 64 mod 2^20 : 20][dtype : 3][kind : 3][aux : 6]. The
// plan: [pieces hash : 4][algorithm + 1 : 3] (0: none given). Decoded for
// messages.
constexpr int kCountBits = 24;
// The kind of the check at the end of a Run (`EnterKernel`), after the
// CollectiveKinds.
constexpr int kRunEndKind = 6;
constexpr int kPlanShift = 32 + kCountBits;
struct Signature {
  int64_t count = 0;
  int64_t offset = -1;
  int dtype = 0, kind = 0, aux = 0, plan = 0;
  int64_t Encode() const {
    const int64_t off = offset < 0 ? 0 : (offset / 64 + 1) & ((1 << 20) - 1);
    return (int64_t{plan & 127} << kPlanShift) |
           (((count + 1) & ((int64_t{1} << kCountBits) - 1)) << 32) |
           (off << 12) | (int64_t{dtype & 7} << 9) | (int64_t{kind & 7} << 6) |
           (aux & 63);
  }
  static Signature Decode(int64_t v) {
    Signature s;
    s.plan = static_cast<int>((v >> kPlanShift) & 127);
    s.count = ((v >> 32) & ((int64_t{1} << kCountBits) - 1)) - 1;
    const int64_t off = (v >> 12) & ((1 << 20) - 1);
    s.offset = off == 0 ? -1 : (off - 1) * 64;
    s.dtype = static_cast<int>((v >> 9) & 7);
    s.kind = static_cast<int>((v >> 6) & 7);
    s.aux = static_cast<int>(v & 63);
    return s;
  }
  // False for bytes that no call encoded (a zero or foreign header).
  bool Valid() const {
    return kind >= 1 && kind <= 6 && dtype <= 6 && count >= 0;
  }
  bool IsRunEnd() const { return kind == kRunEndKind; }
  std::string ToString() const {
    if (IsRunEnd()) {
      return absl::StrCat("the end of its Run after ", count,
                          " collective kernels");
    }
    static constexpr const char* kKinds[] = {
        "?",    "ppermute",   "all_gather", "psum_scatter",
        "psum", "all_to_all", "?",          "?"};
    // The reductions' aux is the ReduceOp, plus 8 when the call runs
    // kDirect, plus 16 when its private input is copied for the peers, plus
    // 32 when the inputs are read through boards, on threads of one process
    // (collectives/internal/direct.h).
    static constexpr const char* kOps[] = {"sum", "max", "min", "mean"};
    const char* direct =
        (aux & 8) == 0    ? ""
        : (aux & 32) != 0 ? ", direct: inputs read where they are"
        : (aux & 16) != 0 ? ", direct: private input copied for the peers"
                          : ", direct: symmetric input read in place";
    const std::string option = (kind == 3 || kind == 4) && (aux & 7) < 4
                                   ? absl::StrCat(kOps[aux & 7], direct)
                               : kind == 1 ? absl::StrCat("permutation #", aux)
                                           : absl::StrCat("option ", aux);
    // The plan: the kernel's algorithm, and its pieces (PlanBits).
    const int algorithm = (plan & 7) - 1;
    const std::string planned =
        algorithm < 0
            ? ""
            : absl::StrCat(
                  ", ",
                  IsValidCollectiveAlgorithm(
                      static_cast<CollectiveAlgorithm>(algorithm))
                      ? CollectiveAlgorithmName(
                            static_cast<CollectiveAlgorithm>(algorithm))
                      : "?",
                  (plan >> 3) == 0
                      ? ""
                      : absl::StrCat(" in pieces #", plan >> 3,
                                     " (chunk_bytes, num_buffers)"));
    const std::string where =
        offset < 0         ? ""
        : (aux & 24) == 24 ? absl::StrCat(" with its output at heap offset ~",
                                          offset, " (mixed)")
        : (aux & 40) == 8
            ? absl::StrCat(
                  " with symmetric input and output at heap "
                  "offsets mixed to ~",
                  offset)
            : absl::StrCat(" with its symmetric operand at heap offset ~",
                           offset);
    return absl::StrCat(kKinds[kind], " of ", count, " ",
                        dtype <= 6 ? DTypeName(static_cast<DType>(dtype)) : "?",
                        " elements (", option, planned, ")", where);
  }
};

}  // namespace

int64_t CallSignature(CollectiveKind kind, DType dtype, int64_t count, int aux,
                      const ArrayRef* symmetric, const ArrayRef* second) {
  Signature me;
  me.count = count % ((int64_t{1} << kCountBits) - 1);
  me.offset = symmetric != nullptr && symmetric->is_symmetric()
                  ? symmetric->heap_offset()
                  : -1;
  if (second != nullptr && second->is_symmetric()) {
    // Both offsets in the 20-bit field (a mix, shown as such in messages).
    me.offset = (me.offset + 64 + second->heap_offset() * 40503) & ~int64_t{63};
  }
  me.dtype = static_cast<int>(dtype);
  me.kind = static_cast<int>(kind);
  me.aux = aux;
  return me.Encode();
}

namespace {

// splitmix64's finalizer.
uint64_t Mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15u;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  return z ^ (z >> 31);
}

// The pieces a kernel's plan cuts (`PlanBits`), exactly.
struct PlanPieces {
  bool cuts = false;
  int64_t chunk_bytes = 0, num_buffers = 0, lane_chunk_bytes = 0;

  uint64_t Hash() const {
    if (!cuts) return 0;
    return Mix64(Mix64(Mix64(static_cast<uint64_t>(chunk_bytes)) ^
                       static_cast<uint64_t>(num_buffers)) ^
                 static_cast<uint64_t>(lane_chunk_bytes));
  }
  std::string ToString() const {
    return absl::StrCat(
        "chunk_bytes ", chunk_bytes, ", num_buffers ", num_buffers,
        lane_chunk_bytes == 0
            ? ""
            : absl::StrCat(", lane_chunk_bytes ", lane_chunk_bytes));
  }
};

// The pieces of the kernel this device thread enters next: set by
// `PlanBits`, taken by `EnterKernel`.
thread_local PlanPieces t_next_pieces;

}  // namespace

int PlanBits(CollectiveAlgorithm algorithm, const CollectiveOptions& options,
             bool cuts) {
  PlanPieces pieces;
  if (cuts) {
    pieces.cuts = true;
    pieces.chunk_bytes = options.chunk_bytes;
    pieces.num_buffers = options.num_buffers;
    if (algorithm == CollectiveAlgorithm::kHierarchical) {
      pieces.lane_chunk_bytes = options.lane_chunk_bytes;
    }
  }
  t_next_pieces = pieces;
  const int hash = cuts ? static_cast<int>(pieces.Hash() >> 60) : 0;
  return (hash << 3) | ((static_cast<int>(algorithm) + 1) & 7);
}

std::array<int64_t, 3> NextPlanPieces() {
  if (!t_next_pieces.cuts) return {};
  return {t_next_pieces.chunk_bytes, t_next_pieces.num_buffers,
          t_next_pieces.lane_chunk_bytes};
}

std::string DescribePieces(const std::array<int64_t, 3>& pieces) {
  PlanPieces p;
  p.cuts = true;
  p.chunk_bytes = pieces[0];
  p.num_buffers = pieces[1];
  p.lane_chunk_bytes = pieces[2];
  return p.ToString();
}

int ReductionPlanBits(CollectiveAlgorithm algorithm,
                      const CollectiveOptions& options) {
  return PlanBits(algorithm, options,
                  algorithm != CollectiveAlgorithm::kOneShot &&
                      algorithm != CollectiveAlgorithm::kDirect);
}

int64_t WithPlan(int64_t signature, int plan_bits) {
  return (signature & ~(int64_t{127} << kPlanShift)) |
         (int64_t{plan_bits & 127} << kPlanShift);
}

int PermutationAux(std::span<const std::pair<int, int>> perm) {
  // splitmix64's finalizer of each pair, summed (any order), then mixed.
  uint64_t sum = 0;
  for (const auto& [src, dst] : perm) {
    sum += Mix64((static_cast<uint64_t>(static_cast<uint32_t>(src)) << 32) |
                 static_cast<uint32_t>(dst));
  }
  return static_cast<int>((Mix64(sum) >> 58) & 63);
}

namespace {

// The collective kernels this device thread entered in the current Run
// (`EnterKernel`); 0 until the first, which registers the Run-end check.
thread_local int64_t t_kernels_entered = 0;

// The error when a peer's signature differs and one of the two devices has
// reached the end of its Run: both counts of collective kernels.
absl::Status RunEndMismatch(absl::string_view collective, const Group& group,
                            const Signature& mine, const Signature& theirs,
                            int peer) {
  const std::string what =
      "; a device skipped a call or made one more: every device of the mesh "
      "must make the same sequence of collective calls";
  if (mine.IsRunEnd()) {
    return CollectiveError(
        collective, group,
        absl::StrCat("this device has reached the end of its Run after ",
                     mine.count, " collective kernels but device LOGICAL id ",
                     peer, " calls ", theirs.ToString(),
                     ", its collective kernel #", mine.count + 1, what));
  }
  return CollectiveError(
      collective, group,
      absl::StrCat("this device calls ", mine.ToString(),
                   ", its collective kernel #", t_kernels_entered,
                   " of this Run, but device LOGICAL id ", peer,
                   " has reached the end of its Run after ", theirs.count,
                   " collective kernels", what));
}

}  // namespace

absl::Status CompareSignatures(absl::string_view collective, const Group& group,
                               int64_t mine, int64_t theirs, int peer) {
  if (theirs == mine) return absl::OkStatus();
  if (Signature::Decode(theirs).Valid() &&
      (Signature::Decode(mine).IsRunEnd() ||
       Signature::Decode(theirs).IsRunEnd())) {
    return RunEndMismatch(collective, group, Signature::Decode(mine),
                          Signature::Decode(theirs), peer);
  }
  if (!Signature::Decode(theirs).Valid()) {
    return CollectiveError(
        collective, group,
        absl::StrCat("this device calls ", Signature::Decode(mine).ToString(),
                     " but what device LOGICAL id ", peer,
                     " sent carries no call signature: it made another call, "
                     "or allocated a different sequence so that its data "
                     "landed elsewhere; every device of the group must make "
                     "the same call, with outputs from the same symmetric "
                     "allocation"));
  }
  return CollectiveError(
      collective, group,
      absl::StrCat("this device calls ", Signature::Decode(mine).ToString(),
                   " but device LOGICAL id ", peer, " calls ",
                   Signature::Decode(theirs).ToString(),
                   "; every device of the group must make the same call, "
                   "with outputs from the same symmetric allocation"));
}

std::string DescribeCall(int64_t signature) {
  return Signature::Decode(signature).ToString();
}

absl::Status SendSignature(const Group& group, int64_t signature) {
  if (group.size() == 1) return absl::OkStatus();
  MESHDMA_ASSIGN_OR_RETURN(Semaphore sem, get_barrier_semaphore());
  return semaphore_signal(sem, signature, DeviceId(group.Peer(1)),
                          DeviceIdType::kLogical);
}

absl::Status ReceiveSignature(absl::string_view collective, const Group& group,
                              int64_t signature) {
  if (group.size() == 1) return absl::OkStatus();
  MESHDMA_ASSIGN_OR_RETURN(Semaphore sem, get_barrier_semaphore());
  // The previous device's signal arrives as one atomic add: wait for any of
  // it, then read the rest.
  MESHDMA_RETURN_IF_ERROR(semaphore_wait(sem, 1));
  MESHDMA_ASSIGN_OR_RETURN(int64_t rest, semaphore_read(sem));
  if (rest > 0) MESHDMA_RETURN_IF_ERROR(semaphore_wait(sem, rest));
  return CompareSignatures(collective, group, signature, rest + 1,
                           group.Peer(-1));
}

bool ComparesAtEntry(const Group& group, bool check) {
  return check && group.size() > 1 && group.mesh != nullptr &&
         group.size() == group.mesh->size();
}

KernelOptions KernelFor(absl::string_view name, const Group& group,
                        bool check) {
  KernelOptions options = KernelFor(name);
  options.entry_barrier = !ComparesAtEntry(group, check);
  return options;
}

std::string ChosenBy(CollectiveAlgorithm requested) {
  if (requested == CollectiveAlgorithm::kAuto) return " (auto)";
  return absl::StrCat(" (", CollectiveAlgorithmName(requested), " requested)");
}

namespace {

// `EnterKernel` without counting the kernel.
absl::Status CompareCallAtEntry(absl::string_view collective,
                                const Group& group, bool check,
                                int64_t signature, const PlanPieces& pieces);

constexpr absl::string_view kRunEndName = "the end of the Run";

// The check at the end of a Run (common.h, `EnterKernel`): step 1, the whole
// mesh as one group; step 2, its kernel, whose entry compares this device's
// count of collective kernels with every other device's, or meets the kernel
// that a device still enters.
absl::Status CheckCallsAtRunEnd() {
  // Step 1.
  MESHDMA_ASSIGN_OR_RETURN(const Mesh* mesh, current_mesh());
  if (mesh->size() == 1) return absl::OkStatus();
  std::vector<std::string> axes;
  for (const Mesh::Axis& axis : mesh->axes()) axes.push_back(axis.first);
  MESHDMA_ASSIGN_OR_RETURN(Group g, ResolveGroup(kRunEndName, axes));
  // Step 2.
  Signature end;
  end.kind = kRunEndKind;
  end.count = t_kernels_entered % ((int64_t{1} << kCountBits) - 1);
  const int64_t signature = end.Encode();
  return RunKernel(KernelFor(kRunEndName, g, /*check=*/true),
                   [&]() -> absl::Status {
                     return CompareCallAtEntry(kRunEndName, g, /*check=*/true,
                                               signature, PlanPieces());
                   });
}

// Counts a collective kernel; the first of a Run registers the Run-end
// check, and the count's reset for the next Run.
void CountKernel() {
  if (t_kernels_entered == 0) {
    if (!AtRunEnd([] { t_kernels_entered = 0; }).ok()) return;
    if (!AtRunExit(CheckCallsAtRunEnd).ok()) return;
  }
  ++t_kernels_entered;
}

}  // namespace

absl::Status EnterKernel(absl::string_view collective, const Group& group,
                         bool check, int64_t signature) {
  CountKernel();
  return CompareCallAtEntry(collective, group, check, signature,
                            std::exchange(t_next_pieces, PlanPieces()));
}

namespace {

absl::Status CompareCallAtEntry(absl::string_view collective,
                                const Group& group, bool check,
                                int64_t signature, const PlanPieces& pieces) {
  if (!check) return absl::OkStatus();
  if (!ComparesAtEntry(group, check)) {
    MESHDMA_RETURN_IF_ERROR(SendSignature(group, signature));
    MESHDMA_RETURN_IF_ERROR(ReceiveSignature(collective, group, signature));
    // The signature holds only a hash of the pieces: the notes compare them
    // exactly, before any piece moves, where they are readable.
    return CompareNotesAtEntry();
  }
  // The barrier compares the plan's pieces exactly (a hash of them beside
  // the signature), not only the signature's hash of them.
  MESHDMA_ASSIGN_OR_RETURN(
      const bool same,
      device_barrier_compare(static_cast<uint64_t>(signature) ^ pieces.Hash()));
  if (same) return absl::OkStatus();
  // Some device makes another call, and every device knows. Each tells every
  // other its call, one peer a round, with a barrier between rounds (a
  // round's signal is taken before the next one's arrives), and fails naming
  // the first call that differs from its own.
  MESHDMA_ASSIGN_OR_RETURN(Semaphore sem, get_barrier_semaphore());
  absl::Status first = absl::OkStatus();
  for (int k = 1; k < group.size(); ++k) {
    MESHDMA_RETURN_IF_ERROR(semaphore_signal(
        sem, signature, DeviceId(group.Peer(k)), DeviceIdType::kLogical));
    MESHDMA_RETURN_IF_ERROR(semaphore_wait(sem, 1));
    MESHDMA_ASSIGN_OR_RETURN(int64_t rest, semaphore_read(sem));
    if (rest > 0) MESHDMA_RETURN_IF_ERROR(semaphore_wait(sem, rest));
    if (first.ok()) {
      first = CompareSignatures(collective, group, signature, rest + 1,
                                group.Peer(-k));
    }
    MESHDMA_RETURN_IF_ERROR(device_barrier());
  }
  if (!first.ok()) return first;
  if (pieces.cuts) {
    return CollectiveError(
        collective, group,
        absl::StrCat("every device calls ",
                     Signature::Decode(signature).ToString(),
                     " but their plans cut different pieces; this device's "
                     "are ",
                     pieces.ToString(),
                     ": every device must pass the same CollectiveOptions"));
  }
  return CollectiveError(collective, group,
                         "the devices of the mesh make different calls");
}

}  // namespace

void ZeroFill(const ArrayRef& dst) {
  if (RaceCheckingEnabled()) AnnotateWrite(dst, "zero fill");
  std::memset(dst.data(), 0, dst.size_bytes());
}

void LocalCopy(const ArrayRef& src, const ArrayRef& dst) {
  if (src.size_bytes() == 0 || src.data() == dst.data()) return;
  if (RaceCheckingEnabled()) {
    AnnotateRead(src, "local copy read");
    AnnotateWrite(dst, "local copy write");
  }
  if (dma_internal::Device* device = dma_internal::CurrentDevice()) {
    device->CopyLocal(src, dst);
  } else {
    std::memmove(dst.data(), src.data(), src.size_bytes());
  }
}

ArrayRef Range(const ArrayRef& flat, int64_t begin, int64_t size) {
  return *flat.Slice(0, begin, size);
}

}  // namespace meshdma::collectives_internal
