// torch's collectives on the device of the serving Run: each function runs
// on the device thread, inside the call's own allocation scope, on
// contiguous CPU tensors (the process group makes them so).
//
// A group that is the whole launch runs meshdma's collective kernels over
// the mesh axis "x" (torch ranks are its positions), staging through the
// symmetric heap where a kernel needs symmetric memory. A smaller group runs
// on point-to-point messages between its members (peer_mail.h): its members
// cannot enter a kernel that spans the mesh without the others.
//
// A tensor allocated in the symmetric heap (`meshdma.torch.empty`,
// tensor_arena.h) is used where it is: an all-reduce on it, or an
// all-gather into it, copies nothing it does not have to. (`all_to_all`
// pads the heap's scratch to the end of its output, so its output is
// always staged.)
//
// Reductions: SUM, AVG, MAX and MIN run in meshdma's kernels; PRODUCT and the
// bitwise ops gather every member's tensor and fold them in rank order, so
// every member gets the same bits. 8-bit and bool tensors are reduced in
// int32 and narrowed (torch's wrap-around for SUM).
#ifndef MESHDMA_PYTHON_CSRC_GROUP_OPS_H_
#define MESHDMA_PYTHON_CSRC_GROUP_OPS_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "meshdma/base/dtype.h"
#include "python/csrc/peer_mail.h"
#include "python/csrc/tensor_arena.h"

namespace meshdma::torch_backend {

enum class TorchReduce { kSum, kAvg, kMax, kMin, kProduct, kBand, kBor, kBxor };

// The members of a torch group: `ranks[i]` is the launch rank (a position
// on the mesh axis "x") of the group's rank i.
struct GroupMembers {
  std::vector<int> ranks;
  int me = 0;          // This process's rank in the group.
  bool whole = false;  // The group is the launch, in launch order.
  int size() const { return static_cast<int>(ranks.size()); }
};

// meshdma's element type for `t`'s, or InvalidArgument naming it.
absl::StatusOr<DType> DTypeOfTensor(const at::Tensor& t);

// Every op below runs on the device thread. `mail` carries the messages of
// groups that are not the whole launch, and send/recv.
class GroupOps {
 public:
  GroupOps(const GroupMembers& members, PeerMail* mail,
           const TensorArena* arena, TensorArena* staging)
      : g_(members), mail_(mail), arena_(arena), staging_(staging) {}

  absl::Status AllReduce(at::Tensor& t, TorchReduce op);
  // `out` holds the group's inputs in rank order ([size * numel]).
  absl::Status AllGather(const at::Tensor& in, at::Tensor& out);
  // `in` holds one segment per member ([size * out.numel()]).
  absl::Status ReduceScatter(const at::Tensor& in, at::Tensor& out,
                             TorchReduce op);
  // Splits count rows of dimension 0 (empty: equal splits).
  absl::Status AllToAll(const at::Tensor& in, at::Tensor& out,
                        const std::vector<int64_t>& in_splits,
                        const std::vector<int64_t>& out_splits);
  absl::Status Broadcast(at::Tensor& t, int root);
  // Only `root`'s tensor changes.
  absl::Status Reduce(at::Tensor& t, int root, TorchReduce op);
  // `out` ([size * numel]) is written on `root` only.
  absl::Status Gather(const at::Tensor& in, at::Tensor* out, int root);
  // `in` ([size * out.numel()]) is read on `root` only.
  absl::Status Scatter(const at::Tensor* in, at::Tensor& out, int root);
  absl::Status Barrier();
  absl::Status Send(const at::Tensor& t, int dst, int64_t tag);
  absl::Status Recv(at::Tensor& t, int src, int64_t tag);

 private:
  // Sends to / receives from group rank `r`.
  absl::Status SendTo(int r, int64_t tag, const void* p, int64_t bytes);
  absl::Status RecvFrom(int r, int64_t tag, void* p, int64_t bytes);
  // The group's inputs gathered in rank order, and folded.
  absl::Status GatherFold(at::Tensor& t, TorchReduce op);

  // `bytes` of symmetric memory for this call's staging, from the staging
  // region (not zeroed), else from the call's scope (zeroed); `hold`
  // returns the region's bytes when the call ends.
  absl::StatusOr<ArrayRef> Stage(int64_t bytes, DType dtype, int64_t numel,
                                 std::shared_ptr<void>& hold);
  // `t` as a symmetric array where it lives in the heap tensors' region.
  absl::StatusOr<ArrayRef> InHeap(const at::Tensor& t) const;

  const GroupMembers& g_;
  PeerMail* mail_;
  const TensorArena* arena_;
  TensorArena* staging_;
};

}  // namespace meshdma::torch_backend

#endif  // MESHDMA_PYTHON_CSRC_GROUP_OPS_H_
