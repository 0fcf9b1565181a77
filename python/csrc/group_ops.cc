#include "python/csrc/group_ops.h"

#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/collectives.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma::torch_backend {
namespace {

const std::vector<std::string> kAxis = {"x"};
// Tags of the messages inside a collective of a smaller group; user tags of
// send/recv are ints, so these never collide with them.
constexpr int64_t kCollectiveTag = std::numeric_limits<int64_t>::min() / 2;

int64_t Bytes(const at::Tensor& t) { return t.numel() * t.element_size(); }

// `bytes` at `p` as a 1-D u8 array of ordinary memory.
absl::StatusOr<ArrayRef> ByteView(const void* p, int64_t bytes) {
  static std::byte empty;
  const int64_t shape[] = {bytes};
  return ArrayRef::FromPointer(bytes > 0 ? const_cast<void*>(p) : &empty,
                               DType::kU8, shape);
}

absl::StatusOr<ArrayRef> View(const at::Tensor& t) {
  MESHDMA_ASSIGN_OR_RETURN(DType dtype, DTypeOfTensor(t));
  const int64_t shape[] = {t.numel()};
  return ArrayRef::FromPointer(t.data_ptr(), dtype, shape);
}

bool NativeReduction(TorchReduce op) {
  return op == TorchReduce::kSum || op == TorchReduce::kAvg ||
         op == TorchReduce::kMax || op == TorchReduce::kMin;
}

ReduceOp MeshdmaOp(TorchReduce op) {
  switch (op) {
    case TorchReduce::kAvg:
      return ReduceOp::kMean;
    case TorchReduce::kMax:
      return ReduceOp::kMax;
    case TorchReduce::kMin:
      return ReduceOp::kMin;
    default:
      return ReduceOp::kSum;
  }
}

// Folds rows [n, ...] of `all` into `out` in row order.
void Fold(const at::Tensor& all, at::Tensor& out, TorchReduce op) {
  at::Tensor acc = all[0].clone();
  for (int64_t i = 1; i < all.size(0); ++i) {
    const at::Tensor row = all[i];
    switch (op) {
      case TorchReduce::kSum:
      case TorchReduce::kAvg:
        acc.add_(row);
        break;
      case TorchReduce::kMax:
        acc = at::maximum(acc, row);
        break;
      case TorchReduce::kMin:
        acc = at::minimum(acc, row);
        break;
      case TorchReduce::kProduct:
        acc.mul_(row);
        break;
      case TorchReduce::kBand:
        acc.bitwise_and_(row);
        break;
      case TorchReduce::kBor:
        acc.bitwise_or_(row);
        break;
      case TorchReduce::kBxor:
        acc.bitwise_xor_(row);
        break;
    }
  }
  if (op == TorchReduce::kAvg) {
    acc = acc.is_floating_point()
              ? acc.div_(all.size(0))
              : acc.div(all.size(0), "trunc").to(acc.dtype());
  }
  out.copy_(acc.view(out.sizes()));
}

}  // namespace

absl::StatusOr<DType> DTypeOfTensor(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return DType::kF32;
    case at::kDouble:
      return DType::kF64;
    case at::kBFloat16:
      return DType::kBF16;
    case at::kHalf:
      return DType::kF16;
    case at::kInt:
      return DType::kI32;
    case at::kLong:
      return DType::kI64;
    case at::kByte:
    case at::kChar:
    case at::kBool:
      return DType::kU8;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("tensor of dtype ", c10::toString(t.scalar_type()),
                       ": meshdma supports float32, float64, bfloat16, "
                       "float16, int32, int64, int8, uint8 and bool"));
  }
}

absl::StatusOr<ArrayRef> GroupOps::Stage(int64_t bytes, DType dtype,
                                         int64_t numel,
                                         std::shared_ptr<void>& hold) {
  // Every member stages the same sizes in the same order, so the region's
  // first fit gives every member the same offset.
  if (absl::StatusOr<std::byte*> p = staging_->Allocate(bytes); p.ok()) {
    TensorArena* staging = staging_;
    hold = std::shared_ptr<void>(
        *p, [staging](void* q) { staging->Free(static_cast<std::byte*>(q)); });
    return staging_->View(*p, bytes, dtype, numel);
  }
  const int64_t shape[] = {numel};
  return AllocateSymmetric(dtype, shape);
}

absl::StatusOr<ArrayRef> GroupOps::InHeap(const at::Tensor& t) const {
  MESHDMA_ASSIGN_OR_RETURN(DType dtype, DTypeOfTensor(t));
  return arena_->View(t.data_ptr(), Bytes(t), dtype, t.numel());
}

absl::Status GroupOps::SendTo(int r, int64_t tag, const void* p,
                              int64_t bytes) {
  return mail_->Send(g_.ranks[r], tag, p, bytes);
}

absl::Status GroupOps::RecvFrom(int r, int64_t tag, void* p, int64_t bytes) {
  return mail_->Recv(g_.ranks[r], tag, p, bytes);
}

absl::Status GroupOps::GatherFold(at::Tensor& t, TorchReduce op) {
  at::Tensor all = at::empty({g_.size(), t.numel()}, t.options());
  MESHDMA_RETURN_IF_ERROR(AllGather(t, all));
  Fold(all, t, op);
  return absl::OkStatus();
}

absl::Status GroupOps::AllReduce(at::Tensor& t, TorchReduce op) {
  // Nothing to combine: every op of one member (AVG too) is the identity.
  if (t.numel() == 0 || g_.size() == 1) return absl::OkStatus();
  if (!g_.whole || !NativeReduction(op)) return GatherFold(t, op);
  // One kernel: in place on a heap tensor; else the input where it is and
  // the output staged in the heap.
  if (absl::StatusOr<ArrayRef> heap = InHeap(t); heap.ok()) {
    return all_reduce(MeshdmaOp(op), *heap, *heap, kAxis);
  }
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef in, View(t));
  std::shared_ptr<void> hold;
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef out,
                           Stage(Bytes(t), in.dtype(), t.numel(), hold));
  MESHDMA_RETURN_IF_ERROR(all_reduce(MeshdmaOp(op), in, out, kAxis));
  std::memcpy(t.data_ptr(), out.data(), Bytes(t));
  return absl::OkStatus();
}

absl::Status GroupOps::AllGather(const at::Tensor& in, at::Tensor& out) {
  const int64_t block = Bytes(in);
  if (Bytes(out) != block * g_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("all_gather on rank ", g_.me, ": output of ", Bytes(out),
                     " bytes for ", g_.size(), " inputs of ", block, " bytes"));
  }
  std::byte* dst = static_cast<std::byte*>(out.data_ptr());
  if (g_.whole && g_.size() > 1 && block > 0) {
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef src, ByteView(in.data_ptr(), block));
    if (absl::StatusOr<ArrayRef> heap =
            arena_->View(dst, block * g_.size(), DType::kU8, block * g_.size());
        heap.ok()) {
      return all_gather(src, *heap, kAxis, /*tiled=*/true);
    }
    std::shared_ptr<void> hold;
    MESHDMA_ASSIGN_OR_RETURN(
        ArrayRef staged,
        Stage(block * g_.size(), DType::kU8, block * g_.size(), hold));
    MESHDMA_RETURN_IF_ERROR(all_gather(src, staged, kAxis, /*tiled=*/true));
    std::memcpy(dst, staged.data(), block * g_.size());
    return absl::OkStatus();
  }
  // Point to point: every block to every member, then every member's in.
  for (int k = 1; k < g_.size(); ++k) {
    MESHDMA_RETURN_IF_ERROR(
        SendTo((g_.me + k) % g_.size(), kCollectiveTag, in.data_ptr(), block));
  }
  if (block > 0) std::memcpy(dst + g_.me * block, in.data_ptr(), block);
  for (int k = 1; k < g_.size(); ++k) {
    const int from = (g_.me - k + g_.size()) % g_.size();
    MESHDMA_RETURN_IF_ERROR(
        RecvFrom(from, kCollectiveTag, dst + from * block, block));
  }
  return absl::OkStatus();
}

absl::Status GroupOps::ReduceScatter(const at::Tensor& in, at::Tensor& out,
                                     TorchReduce op) {
  if (in.numel() != out.numel() * g_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reduce_scatter on rank ", g_.me, ": input of ", in.numel(),
        " elements for ", g_.size(), " outputs of ", out.numel()));
  }
  if (out.numel() == 0) return absl::OkStatus();
  if (g_.whole && NativeReduction(op) && g_.size() > 1) {
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef src, View(in));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef dst, View(out));
    return reduce_scatter(MeshdmaOp(op), src, dst, kAxis);
  }
  // Each member's segment r to member r, folded there in rank order.
  const at::Tensor segments = in.view({g_.size(), out.numel()});
  at::Tensor all = at::empty({g_.size(), out.numel()}, out.options());
  MESHDMA_RETURN_IF_ERROR(AllToAll(segments, all, {}, {}));
  Fold(all, out, op);
  return absl::OkStatus();
}

absl::Status GroupOps::AllToAll(const at::Tensor& in, at::Tensor& out,
                                const std::vector<int64_t>& in_splits,
                                const std::vector<int64_t>& out_splits) {
  const int n = g_.size();
  // Step 1: each member's byte range of `in` and `out`.
  auto ranges = [n](const at::Tensor& t, const std::vector<int64_t>& splits,
                    const char* which) -> absl::StatusOr<std::vector<int64_t>> {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const int64_t row_bytes =
        rows == 0 ? 0 : t.numel() * t.element_size() / rows;
    std::vector<int64_t> offsets(n + 1, 0);
    if (splits.empty()) {
      if (rows % n != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "all_to_all: ", which, " has ", rows,
            " rows, not a multiple of the ", n, " ranks (pass split sizes)"));
      }
      for (int r = 0; r <= n; ++r) offsets[r] = r * (rows / n) * row_bytes;
      return offsets;
    }
    if (static_cast<int>(splits.size()) != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("all_to_all: ", splits.size(), " ", which,
                       " split sizes for ", n, " ranks"));
    }
    for (int r = 0; r < n; ++r) {
      if (splits[r] < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "all_to_all: ", which, " split size ", splits[r], " of rank ", r));
      }
      offsets[r + 1] = offsets[r] + splits[r] * row_bytes;
    }
    if (offsets[n] != t.numel() * t.element_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("all_to_all: ", which, " split sizes sum to ",
                       offsets[n] / std::max<int64_t>(row_bytes, 1),
                       " rows but the tensor has ", rows));
    }
    return offsets;
  };
  MESHDMA_ASSIGN_OR_RETURN(std::vector<int64_t> src,
                           ranges(in, in_splits, "input"));
  MESHDMA_ASSIGN_OR_RETURN(std::vector<int64_t> dst,
                           ranges(out, out_splits, "output"));
  const std::byte* in_p = static_cast<const std::byte*>(in.data_ptr());
  std::byte* out_p = static_cast<std::byte*>(out.data_ptr());
  // Step 2: equal blocks on the whole launch: meshdma's all_to_all.
  const bool equal = in_splits.empty() && out_splits.empty();
  if (g_.whole && equal && n > 1 && src[n] > 0) {
    if (src[n] != dst[n]) {
      return absl::InvalidArgumentError(
          absl::StrCat("all_to_all on rank ", g_.me, ": input of ", src[n],
                       " bytes, output of ", dst[n]));
    }
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef from, ByteView(in_p, src[n]));
    // all_to_all pads the call's scope to the end of its output: the output
    // must come from that scope, not from the staging region.
    const int64_t shape[] = {dst[n]};
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef to, AllocateSymmetric(DType::kU8, shape));
    MESHDMA_RETURN_IF_ERROR(all_to_all(from, to, kAxis, 0, 0));
    std::memcpy(out_p, to.data(), dst[n]);
    return absl::OkStatus();
  }
  // Step 3: otherwise block by block, point to point.
  for (int k = 1; k < n; ++k) {
    const int to = (g_.me + k) % n;
    MESHDMA_RETURN_IF_ERROR(
        SendTo(to, kCollectiveTag, in_p + src[to], src[to + 1] - src[to]));
  }
  if (dst[g_.me + 1] - dst[g_.me] != src[g_.me + 1] - src[g_.me]) {
    return absl::InvalidArgumentError(
        absl::StrCat("all_to_all on rank ", g_.me, ": sends itself ",
                     src[g_.me + 1] - src[g_.me], " bytes but expects ",
                     dst[g_.me + 1] - dst[g_.me]));
  }
  if (dst[g_.me + 1] > dst[g_.me]) {
    std::memcpy(out_p + dst[g_.me], in_p + src[g_.me],
                dst[g_.me + 1] - dst[g_.me]);
  }
  for (int k = 1; k < n; ++k) {
    const int from = (g_.me - k + n) % n;
    MESHDMA_RETURN_IF_ERROR(RecvFrom(from, kCollectiveTag, out_p + dst[from],
                                     dst[from + 1] - dst[from]));
  }
  return absl::OkStatus();
}

absl::Status GroupOps::Broadcast(at::Tensor& t, int root) {
  const int n = g_.size();
  const int64_t bytes = Bytes(t);
  if (n == 1 || bytes == 0) return absl::OkStatus();
  if (!g_.whole) {
    if (g_.me == root) {
      for (int r = 0; r < n; ++r) {
        if (r != root) {
          MESHDMA_RETURN_IF_ERROR(
              SendTo(r, kCollectiveTag, t.data_ptr(), bytes));
        }
      }
      return absl::OkStatus();
    }
    return RecvFrom(root, kCollectiveTag, t.data_ptr(), bytes);
  }
  // A binomial tree of ppermutes: in round k the members within k of the
  // root (relative rank < k) pass the tensor k further on, each reading its
  // own tensor where it is; a member copies what arrives into its tensor.
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef mine, ByteView(t.data_ptr(), bytes));
  std::shared_ptr<void> hold;
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef arrived,
                           Stage(bytes, DType::kU8, bytes, hold));
  const int relative = (g_.me - root + n) % n;
  for (int k = 1; k < n; k *= 2) {
    std::vector<std::pair<int, int>> perm;
    for (int h = 0; h < k && h + k < n; ++h) {
      perm.emplace_back((root + h) % n, (root + h + k) % n);
    }
    MESHDMA_RETURN_IF_ERROR(ppermute(mine, arrived, kAxis, perm));
    if (relative >= k && relative < 2 * k) {
      std::memcpy(t.data_ptr(), arrived.data(), bytes);
    }
  }
  return absl::OkStatus();
}

absl::Status GroupOps::Reduce(at::Tensor& t, int root, TorchReduce op) {
  at::Tensor result = t.clone();
  MESHDMA_RETURN_IF_ERROR(AllReduce(result, op));
  if (g_.me == root) t.copy_(result);
  return absl::OkStatus();
}

absl::Status GroupOps::Gather(const at::Tensor& in, at::Tensor* out, int root) {
  const int64_t block = Bytes(in);
  if (g_.whole) {
    at::Tensor all = at::empty({g_.size() * in.numel()}, in.options());
    MESHDMA_RETURN_IF_ERROR(AllGather(in, all));
    if (g_.me == root) out->view(-1).copy_(all);
    return absl::OkStatus();
  }
  if (g_.me != root) {
    return SendTo(root, kCollectiveTag, in.data_ptr(), block);
  }
  std::byte* dst = static_cast<std::byte*>(out->data_ptr());
  for (int r = 0; r < g_.size(); ++r) {
    if (r == root) {
      if (block > 0) std::memcpy(dst + r * block, in.data_ptr(), block);
    } else {
      MESHDMA_RETURN_IF_ERROR(
          RecvFrom(r, kCollectiveTag, dst + r * block, block));
    }
  }
  return absl::OkStatus();
}

absl::Status GroupOps::Scatter(const at::Tensor* in, at::Tensor& out,
                               int root) {
  const int64_t block = Bytes(out);
  if (g_.whole && g_.size() > 1 && block > 0) {
    // An all_to_all in which only the root's blocks matter.
    at::Tensor blocks =
        g_.me == root ? *in
                      : at::zeros({g_.size() * out.numel()}, out.options());
    at::Tensor all = at::empty({g_.size() * out.numel()}, out.options());
    MESHDMA_RETURN_IF_ERROR(AllToAll(blocks, all, {}, {}));
    out.view(-1).copy_(all.view({g_.size(), out.numel()})[root]);
    return absl::OkStatus();
  }
  if (g_.me == root) {
    const std::byte* src = static_cast<const std::byte*>(in->data_ptr());
    for (int r = 0; r < g_.size(); ++r) {
      if (r == root) {
        if (block > 0) std::memcpy(out.data_ptr(), src + r * block, block);
      } else {
        MESHDMA_RETURN_IF_ERROR(
            SendTo(r, kCollectiveTag, src + r * block, block));
      }
    }
    return absl::OkStatus();
  }
  return RecvFrom(root, kCollectiveTag, out.data_ptr(), block);
}

absl::Status GroupOps::Barrier() {
  at::Tensor one = at::ones({1}, at::kInt);
  if (g_.whole) return AllReduce(one, TorchReduce::kSum);
  at::Tensor all = at::empty({g_.size()}, at::kInt);
  return AllGather(one, all);
}

absl::Status GroupOps::Send(const at::Tensor& t, int dst, int64_t tag) {
  return SendTo(dst, tag, t.data_ptr(), Bytes(t));
}

absl::Status GroupOps::Recv(at::Tensor& t, int src, int64_t tag) {
  return RecvFrom(src, tag, t.data_ptr(), Bytes(t));
}

}  // namespace meshdma::torch_backend
