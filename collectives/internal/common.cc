#include "collectives/internal/common.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "dma/runtime.h"
#include "dma/symmetric_memory.h"

namespace meshdma::internal {

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
  const std::string axes_str = absl::StrCat("{", absl::StrJoin(axes, ","), "}");
  if (axes.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(collective, " on device ", global,
                     ": no axis named; name at least one axis of mesh ",
                     (*mesh)->ToString()));
  }
  auto members = (*mesh)->Group(me, axes);
  if (!members.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(collective, " on device ", global, " over axes ", axes_str,
                     ": ", members.status().message()));
  }
  g.members = *std::move(members);
  g.rank = static_cast<int>(std::find(g.members.begin(), g.members.end(), me) -
                            g.members.begin());
  g.describe =
      absl::StrCat("device ", global, " (position ", g.rank, " of ", g.size(),
                   " along ", axes_str, " of mesh ", (*mesh)->ToString(), ")");
  return g;
}

absl::Status CollectiveError(absl::string_view collective, const Group& group,
                             absl::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat(collective, " on ", group.describe, ": ", message));
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

namespace {

// Signature layout: [count + 1 : 44 bits][dtype : 6][kind : 6][aux : 6], so
// that a zero signal never occurs and a mismatch can be decoded for the
// message.
constexpr int64_t kMaxCheckedCount = (int64_t{1} << 44) - 2;

int64_t Signature(CollectiveKind kind, DType dtype, int64_t count, int aux) {
  return ((std::min(count, kMaxCheckedCount) + 1) << 18) |
         (static_cast<int64_t>(dtype) << 12) |
         (static_cast<int64_t>(kind) << 6) | (aux & 63);
}

std::string DescribeSignature(int64_t sig) {
  static constexpr const char* kKinds[] = {
      "?", "ppermute", "all_gather", "psum_scatter", "psum", "all_to_all"};
  const int kind = static_cast<int>((sig >> 6) & 63);
  const auto dtype = static_cast<DType>((sig >> 12) & 63);
  return absl::StrCat(kind >= 1 && kind <= 5 ? kKinds[kind] : "?", " of ",
                      (sig >> 18) - 1, " ",
                      static_cast<int>(dtype) <= 6 ? DTypeName(dtype) : "?",
                      " elements (option ", sig & 63, ")");
}

}  // namespace

absl::Status CheckRingNeighbour(absl::string_view collective,
                                const Group& group, CollectiveKind kind,
                                DType dtype, int64_t count, int aux) {
  if (group.size() == 1) return absl::OkStatus();
  MESHDMA_ASSIGN_OR_RETURN(
      Semaphore sem,
      AllocateSemaphore(SemaphoreType::kRegular, "peer signature"));
  const int64_t mine = Signature(kind, dtype, count, aux);
  // Step 1: tell the next device what this call is.
  MESHDMA_RETURN_IF_ERROR(semaphore_signal(sem, mine, DeviceId(group.Peer(1)),
                                           DeviceIdType::kLogical));
  // Step 2: the previous device's signal arrives as one atomic add: wait for
  // any of it, then read the rest.
  MESHDMA_RETURN_IF_ERROR(semaphore_wait(sem, 1));
  MESHDMA_ASSIGN_OR_RETURN(int64_t rest, semaphore_read(sem));
  if (rest > 0) MESHDMA_RETURN_IF_ERROR(semaphore_wait(sem, rest));
  const int64_t theirs = rest + 1;
  if (theirs != mine) {
    return CollectiveError(
        collective, group,
        absl::StrCat("this device calls ", DescribeSignature(mine),
                     " but the previous device of the ring (LOGICAL id ",
                     group.Peer(-1), ") calls ", DescribeSignature(theirs),
                     "; every device of the group must make the same call"));
  }
  return absl::OkStatus();
}

ArrayRef Range(const ArrayRef& flat, int64_t begin, int64_t size) {
  return *flat.Slice(0, begin, size);
}

}  // namespace meshdma::internal
