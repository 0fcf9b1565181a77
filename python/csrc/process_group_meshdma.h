// `ProcessGroupMeshdma`: torch.distributed's backend "meshdma" (the c10d
// ProcessGroup API of torch 1.13). Everything torch-version-specific lives
// here and in module.cc: the ops themselves are group_ops.h on the device
// of device_server.h, so torch 2.x's c10d::Backend is a change of this
// class's base and signatures only.
//
// Each call checks its tensors on the caller's thread (errors are
// RuntimeErrors at once), then queues one function for the device and
// returns a Work that completes when the device has run it. Every call of
// every group of this process goes through the one device, in the order the
// calls were made: groups must be called in the same relative order on every
// member, as for gloo.
#ifndef MESHDMA_PYTHON_CSRC_PROCESS_GROUP_MESHDMA_H_
#define MESHDMA_PYTHON_CSRC_PROCESS_GROUP_MESHDMA_H_

#include <chrono>
#include <functional>
#include <memory>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "absl/status/status.h"
#include "python/csrc/device_server.h"
#include "python/csrc/group_ops.h"

namespace meshdma::torch_backend {

class ProcessGroupMeshdma : public c10d::ProcessGroup {
 public:
  // `launch_ranks[i]` is the launch (default group) rank of this group's
  // rank i; empty for the default group itself, which starts the device on
  // `store`.
  ProcessGroupMeshdma(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                      int size, std::chrono::milliseconds timeout,
                      std::vector<int> launch_ranks);
  ~ProcessGroupMeshdma() override;

  const std::string getBackendName() const override { return "meshdma"; }

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input,
      std::vector<int64_t>& output_splits, std::vector<int64_t>& input_splits,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts,
                        bool wait_all_ranks) override;
  // InvalidArgument naming `name`, this rank and the group's launch ranks
  // unless the group holds every rank of the launch in launch order.
  absl::Status RequireWholeLaunch(const char* name) const;
  // Runs `kernel` on the device, in this group's call order, and waits: a
  // collective kernel of meshdma's (fused_ops.h) over the launch's mesh
  // axis "x", so the group must hold every rank in launch order
  // (`RequireWholeLaunch`). Its failure ends the group, as a failed
  // collective does.
  absl::Status RunCollectiveKernel(const char* name,
                                   std::function<absl::Status()> kernel);
  // `t` as a symmetric array of `dtype` (the whole tensor's bytes) when it
  // lies in this process's heap tensors (meshdma.torch.empty), else NotFound.
  absl::StatusOr<ArrayRef> HeapView(const at::Tensor& t, DType dtype) const;

  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return calls_; }

 private:
  // Queues `fn` (given this group's ops) for the device; `outputs` are the
  // Work's result and its future's value.
  c10::intrusive_ptr<c10d::Work> Launch(
      c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
      std::function<absl::Status(GroupOps&)> fn);

  std::shared_ptr<DeviceServer> server_;
  GroupMembers members_;
  std::chrono::milliseconds timeout_;
  uint64_t calls_ = 0;
};

// `bytes` of this process's symmetric heap as a uint8 CPU tensor
// (tensor_arena.h); RuntimeError when no meshdma group is alive or the
// region is full. The memory returns to the region when the tensor (and
// every view of it) is freed.
at::Tensor AllocateHeapTensor(int64_t bytes);

}  // namespace meshdma::torch_backend

#endif  // MESHDMA_PYTHON_CSRC_PROCESS_GROUP_MESHDMA_H_
