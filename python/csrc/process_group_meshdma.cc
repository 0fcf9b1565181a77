#include "python/csrc/process_group_meshdma.h"

#include <Python.h>
#include <c10/util/Exception.h>

#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "meshdma/base/status_macros.h"
#include "python/csrc/process_device.h"

namespace meshdma::torch_backend {
namespace {

// The launch's store as meshdma's KeyValueStore.
class C10dStore : public KeyValueStore {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store)
      : store_(std::move(store)) {}
  absl::Status Set(const std::string& key, const std::string& value) override {
    try {
      store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat("store set '", key, "': ", e.what()));
    }
  }
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override {
    try {
      store_->wait({key}, absl::ToChronoMilliseconds(timeout));
      std::vector<uint8_t> v = store_->get(key);
      return std::string(v.begin(), v.end());
    } catch (const std::exception& e) {
      return absl::DeadlineExceededError(
          absl::StrCat("store get '", key, "': ", e.what()));
    }
  }
  absl::StatusOr<bool> Contains(const std::string& key) override {
    try {
      return store_->check({key});
    } catch (const std::exception& e) {
      return absl::UnavailableError(e.what());
    }
  }
  absl::Status Delete(const std::string& key) override {
    try {
      store_->deleteKey(key);
    } catch (const std::exception&) {
      // Stores that cannot delete keep them; exchanges never reuse a key.
    }
    return absl::OkStatus();
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

// A Status from the device (the call ran): RuntimeError with its message.
// Bad arguments raise ValueError or TypeError before anything is queued.
[[noreturn]] void Throw(const absl::Status& s) {
  TORCH_CHECK(false, s.message());
}

std::runtime_error AsException(const absl::Status& s) {
  return std::runtime_error(std::string(s.message()));
}

// A call's Work. Its future is made on first request (DDP's reducer asks;
// a plain collective does not), so a call pays for none.
class MeshdmaWork : public c10d::Work {
 public:
  MeshdmaWork(int rank, c10d::OpType type, const char* name,
              std::shared_ptr<Completion> completion,
              std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type),
        name_(name),
        completion_(std::move(completion)),
        outputs_(std::move(outputs)) {}
  bool isCompleted() override { return completion_->done(); }
  bool isSuccess() const override {
    return completion_->done() && completion_->status().ok();
  }
  std::exception_ptr exception() const override {
    if (!completion_->done() || completion_->status().ok()) return nullptr;
    return std::make_exception_ptr(AsException(completion_->status()));
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  bool wait(std::chrono::milliseconds timeout) override {
    if (timeout != kNoTimeout) {
      const auto until = std::chrono::steady_clock::now() + timeout;
      while (!completion_->done()) {
        if (std::chrono::steady_clock::now() > until) {
          TORCH_CHECK(false, "meshdma ", name_, " on rank ", rank_,
                      ": not complete within ", timeout.count(), " ms");
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    const absl::Status& s = completion_->Wait();
    if (!s.ok()) Throw(s);
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    std::lock_guard<std::mutex> lock(future_mu_);
    if (future_ == nullptr) {
      static const c10::TypePtr kTensorList =
          c10::ListType::create(c10::TensorType::get());
      future_ = c10::make_intrusive<c10::ivalue::Future>(kTensorList);
      completion_->Then(
          [future = future_, outputs = outputs_](const absl::Status& s) {
            if (s.ok()) {
              future->markCompleted(c10::IValue(outputs));
            } else {
              future->setError(std::make_exception_ptr(AsException(s)));
            }
          });
    }
    return future_;
  }

 private:
  const char* name_;
  std::shared_ptr<Completion> completion_;
  std::vector<at::Tensor> outputs_;
  std::mutex future_mu_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// Step 0 of every call: the tensors torch hands over are dense CPU tensors
// of a supported dtype.
void CheckTensor(const at::Tensor& t, const char* call, const char* what,
                 int rank) {
  TORCH_CHECK_VALUE(t.defined(), "meshdma ", call, " on rank ", rank, ": ",
                    what, " is undefined");
  TORCH_CHECK_VALUE(t.device().is_cpu() && t.layout() == c10::kStrided,
                    "meshdma ", call, " on rank ", rank, ": ", what,
                    " must be a dense CPU tensor, not ", t.toString());
  absl::StatusOr<DType> dtype = DTypeOfTensor(t);
  TORCH_CHECK_TYPE(dtype.ok(), "meshdma ", call, " on rank ", rank, ": ", what,
                   ": ", dtype.status().message());
}

void CheckOne(const std::vector<at::Tensor>& tensors, const char* call,
              int rank) {
  TORCH_CHECK_VALUE(tensors.size() == 1, "meshdma ", call, " on rank ", rank,
                    ": takes one tensor per process, got ", tensors.size());
  CheckTensor(tensors[0], call, "the tensor", rank);
}

void CheckSameAs(const at::Tensor& t, const at::Tensor& like, const char* call,
                 const char* what, int rank) {
  CheckTensor(t, call, what, rank);
  TORCH_CHECK_TYPE(t.scalar_type() == like.scalar_type(), "meshdma ", call,
                   " on rank ", rank, ": ", what, " has dtype ",
                   c10::toString(t.scalar_type()), ", the input ",
                   c10::toString(like.scalar_type()));
}

TorchReduce ToReduce(const c10d::ReduceOp& op, const at::Tensor& t,
                     const char* call, int rank) {
  switch (static_cast<c10d::ReduceOp::RedOpType>(op)) {
    case c10d::ReduceOp::SUM:
      return TorchReduce::kSum;
    case c10d::ReduceOp::AVG:
      return TorchReduce::kAvg;
    case c10d::ReduceOp::MAX:
      return TorchReduce::kMax;
    case c10d::ReduceOp::MIN:
      return TorchReduce::kMin;
    case c10d::ReduceOp::PRODUCT:
      return TorchReduce::kProduct;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR: {
      TORCH_CHECK_TYPE(
          !t.is_floating_point(), "meshdma ", call, " on rank ", rank,
          ": bitwise reductions need an integer or bool tensor, not ",
          c10::toString(t.scalar_type()));
      const auto o = static_cast<c10d::ReduceOp::RedOpType>(op);
      return o == c10d::ReduceOp::BAND  ? TorchReduce::kBand
             : o == c10d::ReduceOp::BOR ? TorchReduce::kBor
                                        : TorchReduce::kBxor;
    }
    default:
      TORCH_CHECK_VALUE(
          false, "meshdma ", call, " on rank ", rank, ": reduction op ",
          static_cast<int>(op.op_),
          " is not supported (SUM, AVG, MAX, MIN, PRODUCT, BAND, BOR, "
          "BXOR are)");
  }
}

// A tensor as the device works on it: contiguous, and for the reductions of
// 8-bit and bool tensors widened to int32 (meshdma reduces neither); written
// back into the caller's tensor after the call.
struct Staged {
  at::Tensor user;
  at::Tensor work;
  static Staged Of(const at::Tensor& t, bool reduction) {
    const bool narrow = t.scalar_type() == at::kByte ||
                        t.scalar_type() == at::kChar ||
                        t.scalar_type() == at::kBool;
    if (reduction && narrow) return {t, t.to(at::kInt).contiguous()};
    if (!t.is_contiguous()) return {t, t.contiguous()};
    return {t, t};
  }
  void WriteBack() {
    if (!work.is_same(user)) user.copy_(work);
  }
};

// The call `fn` on a staged tensor, then the result written back into the
// caller's tensor.
std::function<absl::Status(GroupOps&)> ThenWriteBack(
    Staged s, std::function<absl::Status(GroupOps&, at::Tensor&)> fn) {
  return [s, fn = std::move(fn)](GroupOps& ops) mutable {
    MESHDMA_RETURN_IF_ERROR(fn(ops, s.work));
    s.WriteBack();
    return absl::OkStatus();
  };
}

// The *_base calls: `whole` holds one `part` per member of a group of
// `size`; `whole_is_input` says which of the two the caller passed in.
void CheckWholeAndPart(const at::Tensor& whole, const at::Tensor& part,
                       bool whole_is_input, int size, const char* call,
                       int rank) {
  const at::Tensor& input = whole_is_input ? whole : part;
  const at::Tensor& output = whole_is_input ? part : whole;
  CheckTensor(input, call, "the input", rank);
  CheckSameAs(output, input, call, "the output", rank);
  TORCH_CHECK_VALUE(
      whole.numel() == part.numel() * size, "meshdma ", call, " on rank ", rank,
      ": ", whole_is_input ? "input" : "output", " of ", whole.numel(),
      " elements for ", size, " ", whole_is_input ? "outputs" : "inputs",
      " of ", part.numel());
}

// A point-to-point call's peer: another rank of the group.
void CheckPeer(int peer, int size, const char* call, const char* which,
               int rank) {
  TORCH_CHECK_VALUE(peer >= 0 && peer < size && peer != rank, "meshdma ", call,
                    " on rank ", rank, ": ", which, " ", peer,
                    " must be another rank of the group of ", size);
}

void CheckRoot(int root, int size, const char* call, int rank) {
  TORCH_CHECK_VALUE(root >= 0 && root < size, "meshdma ", call, " on rank ",
                    rank, ": root ", root, " is not a rank of the group of ",
                    size);
}

}  // namespace

ProcessGroupMeshdma::ProcessGroupMeshdma(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout, std::vector<int> launch_ranks)
    : c10d::ProcessGroup(rank, size), timeout_(timeout) {
  // Step 1: the device, started by the default group (a collective launch)
  // and shared by every group of the process (process_device.h).
  absl::StatusOr<std::shared_ptr<DeviceServer>> device = LaunchDeviceOrStart(
      [&]() -> absl::StatusOr<std::shared_ptr<DeviceServer>> {
        // The first group starts the device: the default group, or a group
        // of every rank in launch order (the default group being another
        // backend's).
        bool whole = launch_ranks.empty();
        if (static_cast<int>(launch_ranks.size()) == size) {
          whole = true;
          for (int r = 0; r < size; ++r) whole &= launch_ranks[r] == r;
        }
        if (!whole) {
          return absl::FailedPreconditionError(absl::StrCat(
              "meshdma: the first meshdma group of a process must hold every "
              "rank of the launch (it starts meshdma's runtime); this one "
              "holds ",
              size, " ranks"));
        }
        DeviceServer::Options options;
        options.rank = rank;
        options.size = size;
        options.timeout = absl::FromChrono(timeout);
        return DeviceServer::Start(std::make_shared<C10dStore>(store), options);
      });
  if (!device.ok()) Throw(device.status());
  server_ = *std::move(device);
  // Step 2: this group's members as launch ranks.
  if (launch_ranks.empty()) {
    for (int r = 0; r < size; ++r) launch_ranks.push_back(r);
  }
  TORCH_CHECK_VALUE(static_cast<int>(launch_ranks.size()) == size,
                    "meshdma: group of ", size, " ranks given ",
                    launch_ranks.size(), " launch ranks");
  members_.ranks = std::move(launch_ranks);
  members_.me = rank;
  members_.whole = size == server_->size();
  for (int r = 0; r < size && members_.whole; ++r) {
    members_.whole = members_.ranks[r] == r;
  }
}

ProcessGroupMeshdma::~ProcessGroupMeshdma() {
  // The last group stops the device, which may still drop the last reference
  // to a tensor that Python owns (that takes the GIL): never hold the GIL
  // while waiting for it.
  if (Py_IsInitialized() && PyGILState_Check()) {
    PyThreadState* state = PyEval_SaveThread();
    server_.reset();
    PyEval_RestoreThread(state);
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMeshdma::Launch(
    c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
    std::function<absl::Status(GroupOps&)> fn) {
  ++calls_;
  const GroupMembers* members = &members_;
  DeviceServer* server = server_.get();
  std::shared_ptr<Completion> completion =
      server_->Submit([members, server, fn = std::move(fn)]() {
        GroupOps ops(*members, server->mail(), &server->arena(),
                     &server->staging());
        return fn(ops);
      });
  return c10::make_intrusive<MeshdmaWork>(
      rank_, type, name, std::move(completion), std::move(outputs));
}

absl::Status ProcessGroupMeshdma::RequireWholeLaunch(const char* name) const {
  if (members_.whole) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "meshdma.", name, " on rank ", rank_, ": the group of launch ranks [",
      absl::StrJoin(members_.ranks, ", "), "] is not the launch (",
      server_->size(),
      " ranks in launch order); meshdma's fused kernels run over the "
      "whole launch"));
}

absl::Status ProcessGroupMeshdma::RunCollectiveKernel(
    const char* name, std::function<absl::Status()> kernel) {
  MESHDMA_RETURN_IF_ERROR(RequireWholeLaunch(name));
  ++calls_;
  return server_->Call(std::move(kernel));
}

absl::StatusOr<ArrayRef> ProcessGroupMeshdma::HeapView(const at::Tensor& t,
                                                       DType dtype) const {
  return server_->arena().View(t.data_ptr(), t.nbytes(), dtype, t.numel());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMeshdma::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  CheckOne(tensors, "broadcast", rank_);
  CheckRoot(opts.rootRank, size_, "broadcast", rank_);
  const int root = opts.rootRank;
  return Launch(c10d::OpType::BROADCAST, "broadcast", tensors,
                ThenWriteBack(Staged::Of(tensors[0], false),
                              [root](GroupOps& ops, at::Tensor& t) {
                                return ops.Broadcast(t, root);
                              }));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMeshdma::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  CheckOne(tensors, "allreduce", rank_);
  const TorchReduce op =
      ToReduce(opts.reduceOp, tensors[0], "allreduce", rank_);
  return Launch(c10d::OpType::ALLREDUCE, "allreduce", tensors,
                ThenWriteBack(Staged::Of(tensors[0], true),
                              [op](GroupOps& ops, at::Tensor& t) {
                                return ops.AllReduce(t, op);
                              }));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMeshdma::allreduce_coalesced(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK_VALUE(!tensors.empty(), "meshdma allreduce_coalesced on rank ",
                    rank_, ": no tensors");
  for (const at::Tensor& t : tensors) {
    CheckSameAs(t, tensors[0], "allreduce_coalesced", "a tensor", rank_);
  }
  const TorchReduce op =
      ToReduce(opts.reduceOp, tensors[0], "allreduce_coalesced", rank_);
  // One reduction over the tensors laid end to end.
  std::vector<at::Tensor> flat;
  for (const at::Tensor& t : tensors) flat.push_back(t.reshape(-1));
  Staged s = Staged::Of(at::cat(flat), true);
  std::vector<at::Tensor> users = tensors;
  return Launch(
      c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors,
      [s, op, users](GroupOps& ops) mutable {
        MESHDMA_RETURN_IF_ERROR(ops.AllReduce(s.work, op));
        int64_t offset = 0;
        for (at::Tensor& t : users) {
          t.copy_(s.work.narrow(0, offset, t.numel()).view(t.sizes()));
          offset += t.numel();
        }
        return absl::OkStatus();
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMeshdma::reduce(
    std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  CheckOne(tensors, "reduce", rank_);
  CheckRoot(opts.rootRank, size_, "reduce", rank_);
  const TorchReduce op = ToReduce(opts.reduceOp, tensors[0], "reduce", rank_);
  const int root = opts.rootRank;
  return Launch(c10d::OpType::REDUCE, "reduce", tensors,
                ThenWriteBack(Staged::Of(tensors[0], true),
                              [op, root](GroupOps& ops, at::Tensor& t) {
                                return ops.Reduce(t, root, op);
                              }));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMeshdma::allgather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  CheckOne(inputs, "allgather", rank_);
  TORCH_CHECK_VALUE(
      outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
      "meshdma allgather on rank ", rank_, ": needs one list of ", size_,
      " output tensors");
  const at::Tensor in = inputs[0].contiguous();
  for (const at::Tensor& o : outputs[0]) {
    CheckSameAs(o, in, "allgather", "an output", rank_);
    TORCH_CHECK_VALUE(o.numel() == in.numel(), "meshdma allgather on rank ",
                      rank_, ": output of ", o.numel(),
                      " elements for an input of ", in.numel());
  }
  std::vector<at::Tensor> outs = outputs[0];
  const int n = size_;
  return Launch(
      c10d::OpType::ALLGATHER, "allgather", outs,
      [in, outs, n](GroupOps& ops) mutable {
        at::Tensor all = at::empty({n * in.numel()}, in.options());
        MESHDMA_RETURN_IF_ERROR(ops.AllGather(in, all));
        for (int r = 0; r < n; ++r) {
          outs[r].copy_(
              all.narrow(0, r * in.numel(), in.numel()).view(outs[r].sizes()));
        }
        return absl::OkStatus();
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMeshdma::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  CheckWholeAndPart(output, input, /*whole_is_input=*/false, size_,
                    "_allgather_base", rank_);
  const at::Tensor in = input.contiguous();
  return Launch(c10d::OpType::_ALLGATHER_BASE, "_allgather_base", {output},
                ThenWriteBack(Staged::Of(output, false),
                              [in](GroupOps& ops, at::Tensor& out) {
                                return ops.AllGather(in, out);
                              }));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMeshdma::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == size_,
                    "meshdma allgather_coalesced on rank ", rank_, ": needs ",
                    size_, " output lists, got ", outputs.size());
  for (const auto& list : outputs) {
    TORCH_CHECK_VALUE(list.size() == inputs.size(),
                      "meshdma allgather_coalesced on rank ", rank_,
                      ": each output list needs ", inputs.size(), " tensors");
    for (size_t i = 0; i < list.size(); ++i) {
      CheckSameAs(list[i], inputs[i], "allgather_coalesced", "an output",
                  rank_);
      TORCH_CHECK_VALUE(list[i].numel() == inputs[i].numel(),
                        "meshdma allgather_coalesced on rank ", rank_,
                        ": output and input sizes differ");
    }
  }
  std::vector<at::Tensor> ins;
  for (const at::Tensor& t : inputs) ins.push_back(t.contiguous());
  std::vector<std::vector<at::Tensor>> outs = outputs;
  std::vector<at::Tensor> flat_outputs;
  for (const auto& list : outputs) {
    flat_outputs.insert(flat_outputs.end(), list.begin(), list.end());
  }
  const int n = size_;
  return Launch(
      c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced", flat_outputs,
      [ins, outs, n](GroupOps& ops) mutable {
        for (size_t i = 0; i < ins.size(); ++i) {
          at::Tensor all = at::empty({n * ins[i].numel()}, ins[i].options());
          MESHDMA_RETURN_IF_ERROR(ops.AllGather(ins[i], all));
          for (int r = 0; r < n; ++r) {
            outs[r][i].copy_(all.narrow(0, r * ins[i].numel(), ins[i].numel())
                                 .view(outs[r][i].sizes()));
          }
        }
        return absl::OkStatus();
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMeshdma::gather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  CheckOne(inputs, "gather", rank_);
  const int root = opts.rootRank;
  CheckRoot(root, size_, "gather", rank_);
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    TORCH_CHECK_VALUE(
        outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
        "meshdma gather on root ", rank_, ": needs one list of ", size_,
        " output tensors");
    outs = outputs[0];
    for (const at::Tensor& o : outs) {
      CheckSameAs(o, inputs[0], "gather", "an output", rank_);
      TORCH_CHECK_VALUE(o.numel() == inputs[0].numel(),
                        "meshdma gather on rank ", rank_,
                        ": output and input sizes differ");
    }
  } else {
    TORCH_CHECK_VALUE(outputs.empty() || outputs[0].empty(),
                      "meshdma gather on rank ", rank_, ": only the root ",
                      root, " passes outputs");
  }
  const at::Tensor in = inputs[0].contiguous();
  const int n = size_;
  const bool is_root = rank_ == root;
  return Launch(
      c10d::OpType::GATHER, "gather", outs,
      [in, outs, root, n, is_root](GroupOps& ops) mutable {
        at::Tensor all = at::empty({n * in.numel()}, in.options());
        MESHDMA_RETURN_IF_ERROR(ops.Gather(in, is_root ? &all : nullptr, root));
        if (!is_root) return absl::OkStatus();
        for (int r = 0; r < n; ++r) {
          outs[r].copy_(
              all.narrow(0, r * in.numel(), in.numel()).view(outs[r].sizes()));
        }
        return absl::OkStatus();
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMeshdma::scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  CheckOne(outputs, "scatter", rank_);
  const int root = opts.rootRank;
  CheckRoot(root, size_, "scatter", rank_);
  at::Tensor blocks;
  if (rank_ == root) {
    TORCH_CHECK_VALUE(
        inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
        "meshdma scatter on root ", rank_, ": needs one list of ", size_,
        " input tensors");
    std::vector<at::Tensor> flat;
    for (const at::Tensor& t : inputs[0]) {
      CheckSameAs(t, outputs[0], "scatter", "an input", rank_);
      TORCH_CHECK_VALUE(t.numel() == outputs[0].numel(),
                        "meshdma scatter on rank ", rank_,
                        ": input and output sizes differ");
      flat.push_back(t.reshape(-1));
    }
    blocks = at::cat(flat);
  } else {
    TORCH_CHECK_VALUE(inputs.empty() || inputs[0].empty(),
                      "meshdma scatter on rank ", rank_, ": only the root ",
                      root, " passes inputs");
  }
  return Launch(c10d::OpType::SCATTER, "scatter", outputs,
                ThenWriteBack(Staged::Of(outputs[0], false),
                              [blocks, root](GroupOps& ops, at::Tensor& out) {
                                return ops.Scatter(
                                    blocks.defined() ? &blocks : nullptr, out,
                                    root);
                              }));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMeshdma::reduce_scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  CheckOne(outputs, "reduce_scatter", rank_);
  TORCH_CHECK_VALUE(
      inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
      "meshdma reduce_scatter on rank ", rank_, ": needs one list of ", size_,
      " input tensors");
  std::vector<at::Tensor> flat;
  for (const at::Tensor& t : inputs[0]) {
    CheckSameAs(t, outputs[0], "reduce_scatter", "an input", rank_);
    TORCH_CHECK_VALUE(t.numel() == outputs[0].numel(),
                      "meshdma reduce_scatter on rank ", rank_, ": input of ",
                      t.numel(), " elements for an output of ",
                      outputs[0].numel());
    flat.push_back(t.reshape(-1));
  }
  const TorchReduce op =
      ToReduce(opts.reduceOp, outputs[0], "reduce_scatter", rank_);
  const at::Tensor in = Staged::Of(at::cat(flat), true).work;
  return Launch(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", outputs,
                ThenWriteBack(Staged::Of(outputs[0], true),
                              [in, op](GroupOps& ops, at::Tensor& out) {
                                return ops.ReduceScatter(in, out, op);
                              }));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMeshdma::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input,
    const c10d::ReduceScatterOptions& opts) {
  CheckWholeAndPart(input, output, /*whole_is_input=*/true, size_,
                    "_reduce_scatter_base", rank_);
  const TorchReduce op =
      ToReduce(opts.reduceOp, output, "_reduce_scatter_base", rank_);
  const at::Tensor in = Staged::Of(input, true).work;
  return Launch(c10d::OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base",
                {output},
                ThenWriteBack(Staged::Of(output, true),
                              [in, op](GroupOps& ops, at::Tensor& out) {
                                return ops.ReduceScatter(in, out, op);
                              }));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMeshdma::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
    std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& opts) {
  CheckTensor(input, "alltoall_base", "the input", rank_);
  CheckSameAs(output, input, "alltoall_base", "the output", rank_);
  const at::Tensor in = input.contiguous();
  return Launch(
      c10d::OpType::ALLTOALL_BASE, "alltoall_base", {output},
      ThenWriteBack(Staged::Of(output, false),
                    [in, in_splits = input_splits, out_splits = output_splits](
                        GroupOps& ops, at::Tensor& out) {
                      return ops.AllToAll(in, out, in_splits, out_splits);
                    }));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMeshdma::alltoall(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllToAllOptions& opts) {
  TORCH_CHECK_VALUE(static_cast<int>(inputs.size()) == size_ &&
                        static_cast<int>(outputs.size()) == size_,
                    "meshdma alltoall on rank ", rank_, ": needs ", size_,
                    " inputs and outputs, got ", inputs.size(), " and ",
                    outputs.size());
  // The lists as one tensor each, split by element counts.
  std::vector<at::Tensor> flat_in, flat_out;
  std::vector<int64_t> in_splits, out_splits;
  for (int r = 0; r < size_; ++r) {
    CheckSameAs(inputs[r], inputs[0], "alltoall", "an input", rank_);
    CheckSameAs(outputs[r], inputs[0], "alltoall", "an output", rank_);
    flat_in.push_back(inputs[r].reshape(-1));
    in_splits.push_back(inputs[r].numel());
    out_splits.push_back(outputs[r].numel());
  }
  const at::Tensor in = at::cat(flat_in);
  int64_t total = 0;
  for (int64_t s : out_splits) total += s;
  std::vector<at::Tensor> outs = outputs;
  return Launch(
      c10d::OpType::ALLTOALL, "alltoall", outputs,
      [in, outs, in_splits, out_splits, total](GroupOps& ops) mutable {
        at::Tensor all = at::empty({total}, in.options());
        const bool equal =
            std::adjacent_find(in_splits.begin(), in_splits.end(),
                               std::not_equal_to<>()) == in_splits.end() &&
            in_splits == out_splits;
        MESHDMA_RETURN_IF_ERROR(
            equal ? ops.AllToAll(in, all, {}, {})
                  : ops.AllToAll(in, all, in_splits, out_splits));
        int64_t offset = 0;
        for (size_t r = 0; r < outs.size(); ++r) {
          outs[r].copy_(
              all.narrow(0, offset, out_splits[r]).view(outs[r].sizes()));
          offset += out_splits[r];
        }
        return absl::OkStatus();
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMeshdma::send(
    std::vector<at::Tensor>& tensors, int dst, int tag) {
  CheckOne(tensors, "send", rank_);
  CheckPeer(dst, size_, "send", "destination", rank_);
  const at::Tensor t = tensors[0].contiguous();
  return Launch(c10d::OpType::SEND, "send", {},
                [t, dst, tag](GroupOps& ops) { return ops.Send(t, dst, tag); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMeshdma::recv(
    std::vector<at::Tensor>& tensors, int src, int tag) {
  CheckOne(tensors, "recv", rank_);
  CheckPeer(src, size_, "recv", "source", rank_);
  return Launch(c10d::OpType::RECV, "recv", tensors,
                ThenWriteBack(Staged::Of(tensors[0], false),
                              [src, tag](GroupOps& ops, at::Tensor& t) {
                                return ops.Recv(t, src, tag);
                              }));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMeshdma::recvAnysource(
    std::vector<at::Tensor>& tensors, int tag) {
  TORCH_CHECK_VALUE(
      false, "meshdma recv on rank ", rank_,
      ": a receive from any source is not supported; name the source");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMeshdma::barrier(
    const c10d::BarrierOptions& opts) {
  return Launch(c10d::OpType::BARRIER, "barrier", {},
                [](GroupOps& ops) { return ops.Barrier(); });
}

void ProcessGroupMeshdma::monitoredBarrier(const c10d::BarrierOptions& opts,
                                           bool wait_all_ranks) {
  const std::chrono::milliseconds timeout =
      opts.timeout == c10d::kUnsetTimeout ? timeout_ : opts.timeout;
  c10::intrusive_ptr<c10d::Work> work = barrier(opts);
  try {
    work->wait(timeout);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "meshdma monitored barrier on rank ", rank_,
                " of a group of ", size_, ": ", e.what());
  }
}

at::Tensor AllocateHeapTensor(int64_t bytes) {
  std::shared_ptr<DeviceServer> server = LaunchDevice();
  TORCH_CHECK(server != nullptr,
              "meshdma heap tensor: no meshdma process group is alive in "
              "this process (init_process_group(\"meshdma\") first)");
  TORCH_CHECK_VALUE(bytes >= 0, "meshdma heap tensor of ", bytes, " bytes");
  absl::StatusOr<std::byte*> p = server->arena().Allocate(bytes);
  if (!p.ok()) Throw(p.status());
  // The deleter holds the server weakly: the region goes with the group.
  std::weak_ptr<DeviceServer> weak = server;
  return at::from_blob(
      *p, {bytes},
      [weak](void* data) {
        if (std::shared_ptr<DeviceServer> s = weak.lock()) {
          s->arena().Free(static_cast<std::byte*>(data));
        }
      },
      at::TensorOptions().dtype(at::kByte));
}

}  // namespace meshdma::torch_backend
