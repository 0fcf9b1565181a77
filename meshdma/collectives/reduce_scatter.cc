#include "meshdma/collectives/reduce_scatter.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/all_reduce.h"
#include "meshdma/collectives/internal/channel.h"
#include "meshdma/collectives/internal/common.h"
#include "meshdma/collectives/internal/direct.h"
#include "meshdma/collectives/internal/hierarchy.h"
#include "meshdma/collectives/internal/one_shot.h"
#include "meshdma/collectives/internal/plan.h"
#include "meshdma/collectives/internal/reduce.h"
#include "meshdma/collectives/internal/ring.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/check.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma {
namespace {

using collectives_internal::Group;

// One-shot reduce-scatter:
//   step 0: as in the one-shot all-reduce, the neighbour check in two
//           halves around step 1 (a mismatched call fails at once);
//   step 1: for each member j, stage a 64-byte header (the call's signature,
//           see `CallSignature`) and segment j of my input, and push it
//           into row r of member j's scratch [n, 64 + largest segment]; one
//           DMA per peer, all on one send and one receive semaphore;
//   step 2: wait until the n-1 rows for my segment have arrived and my
//           pushes have been read (one wait each: the byte counts add up);
//   step 3: compare every peer's header with mine;
//   step 4: reduce the rows in group order (my own segment of `in` is row r).
template <typename T>
absl::Status OneShot(absl::string_view name, const Group& g, ReduceOp op,
                     const ArrayRef& in, const ArrayRef& out, int64_t signature,
                     bool check) {
  const int n = g.size();
  const int r = g.index;
  const int64_t count = in.num_elements();
  const int64_t elem = static_cast<int64_t>(sizeof(T));
  const int64_t header = check ? collectives_internal::kOneShotHeaderBytes : 0;
  const int64_t row = header + (count + n - 1) / n * elem;
  // Step 0: the neighbour check's first half, before anything that depends
  // on the call's size (docs/semantics.md §6).
  if (check) {
    MESHDMA_RETURN_IF_ERROR(collectives_internal::SendSignature(g, signature));
  }
  MESHDMA_ASSIGN_OR_RETURN(
      SemaphoreArray sems,
      AllocateSemaphoreArray(SemaphoreType::kDma, 2, "one-shot"));
  const Semaphore send_sem = sems[0], recv_sem = sems[1];
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef scratch,
                           AllocateSymmetric(DType::kU8, {2 * n * row}));
  std::byte* recv = scratch.data();
  std::byte* staging = recv + n * row;
  const auto [my_begin, my_len] = ScatterSegment(count, n, r);
  const int64_t in_bytes = header + my_len * elem;  // Per peer, to me.
  // Step 1.
  int64_t out_bytes = 0;
  for (int j = 1; j < n; ++j) {
    const int pos = (r + j) % n;
    const auto [b, len] = ScatterSegment(count, n, pos);
    const int64_t bytes = header + len * elem;
    if (bytes == 0) continue;
    std::byte* staged = staging + pos * row;
    const ArrayRef src =
        collectives_internal::Range(scratch, n * row + pos * row, bytes);
    if (RaceCheckingEnabled()) {
      AnnotateRead(collectives_internal::Range(in, b, len),
                   "one-shot staging read");
      AnnotateWrite(src, "one-shot staging write");
    }
    if (check) std::memcpy(staged, &signature, sizeof(signature));
    std::memcpy(staged + header, in.data() + b * elem, len * elem);
    const ArrayRef dst = collectives_internal::Range(scratch, r * row, bytes);
    MESHDMA_RETURN_IF_ERROR(collectives_internal::RemoteCopy(
                                src, dst, send_sem, recv_sem, g.members[pos])
                                .start());
    out_bytes += bytes;
  }
  // Step 0's second half: a peer making another call may never send the
  // bytes waited for below.
  if (check) {
    MESHDMA_RETURN_IF_ERROR(
        collectives_internal::ReceiveSignature(name, g, signature));
  }
  // Step 2 (wait-only descriptors of the total byte counts).
  const ArrayRef all_in =
      collectives_internal::Range(scratch, 0, (n - 1) * in_bytes);
  MESHDMA_RETURN_IF_ERROR(collectives_internal::RemoteCopy(
                              all_in, all_in, send_sem, recv_sem, g.Peer(-1))
                              .wait_recv());
  const ArrayRef all_out = collectives_internal::Range(scratch, 0, out_bytes);
  MESHDMA_RETURN_IF_ERROR(collectives_internal::RemoteCopy(
                              all_out, all_out, send_sem, recv_sem, g.Peer(1))
                              .wait_send());
  // Steps 3 and 4.
  if (check && in_bytes > 0) {
    MESHDMA_RETURN_IF_ERROR(collectives_internal::CheckRowSignatures(
        name, g, signature, recv, row));
  }
  collectives_internal::AnnotateReduceRows(
      g, collectives_internal::Range(in, my_begin, my_len),
      [&](int i) {
        return collectives_internal::Range(scratch, i * row, in_bytes);
      },
      out);
  collectives_internal::ReduceRows<T>(op, g, in.data_as<const T>() + my_begin,
                                      recv, row, header, out.data_as<T>(),
                                      my_len);
  return absl::OkStatus();
}

// The kernel path: `plan.algorithm` over `g`.
template <typename T>
absl::Status RunKernelPath(absl::string_view name, const Group& g,
                           const CollectiveOptions& options,
                           const collectives_internal::Plan& plan, ReduceOp op,
                           const ArrayRef& in, const ArrayRef& out) {
  using collectives_internal::CollectiveKind;
  const int plan_bits =
      collectives_internal::ReductionPlanBits(plan.algorithm, options);
  return collectives_internal::RunReductionKernel(
      name, g, options, plan.algorithm, CollectiveKind::kReduceScatter, op, in,
      nullptr, plan.reads_peer_inputs, plan.private_input, plan.boards,
      plan_bits,
      [&](bool one_shot_check, const ArrayRef* board) -> absl::Status {
        if (g.size() == 1) {
          collectives_internal::LocalCopy(in, out);
          return absl::OkStatus();
        }
        switch (plan.algorithm) {
          case CollectiveAlgorithm::kOneShot:
            return OneShot<T>(
                name, g, op, in, out,
                collectives_internal::WithPlan(
                    collectives_internal::CallSignature(
                        CollectiveKind::kReduceScatter, in.dtype(),
                        in.num_elements(), static_cast<int>(op), nullptr),
                    plan_bits),
                one_shot_check);
          case CollectiveAlgorithm::kHierarchical:
            return collectives_internal::HierarchicalReduceScatter<T>(
                g, plan.layout, op, in, out, options, plan.host_direct, board);
          case CollectiveAlgorithm::kDirect:
            return collectives_internal::DirectReduceScatter<T>(g, op, in, out,
                                                                board);
          case CollectiveAlgorithm::kBidirectionalRing:
            return collectives_internal::RingReduceScatter<T>(
                g, op, in, nullptr, out, 2, options.chunk_bytes,
                options.num_buffers);
          default:
            return collectives_internal::RingReduceScatter<T>(
                g, op, in, nullptr, out, 1, options.chunk_bytes,
                options.num_buffers);
        }
      });
}

// The channel path: member j gets segment j of my input over the group's
// channel (`layout.Part(j)`). In place too (`output` my segment of
// `input`): the channel reads the other segments when it pushes them, and
// writes mine only after.
template <typename T>
absl::Status OverChannel(absl::string_view name,
                         collectives_internal::Channel* channel, const Group& g,
                         ReduceOp op, int64_t signature,
                         const collectives_internal::CallLayout& layout,
                         const ArrayRef& input, const ArrayRef& output) {
  if (RaceCheckingEnabled()) AnnotateRead(input, "channel staging read");
  return collectives_internal::ChannelReduce<T>(
      channel, name, g, op, signature,
      [&](int j) { return layout.Part(input.data(), j); },
      reinterpret_cast<const T*>(layout.Part(input.data(), g.index).first),
      output);
}

absl::string_view ReduceScatterName(ReduceOp op) {
  return op == ReduceOp::kSum    ? "psum_scatter"
         : op == ReduceOp::kMax  ? "reduce_scatter(max)"
         : op == ReduceOp::kMin  ? "reduce_scatter(min)"
         : op == ReduceOp::kMean ? "reduce_scatter(mean)"
                                 : "reduce_scatter";
}

}  // namespace

// Steps: 1. a repeat of a remembered small call goes straight to its
// channel, with the segments and padding the first call computed; 2. the
// group and the checked operands; 3. the plan
// (collectives/internal/plan.h); 4. the plan's path.
absl::Status reduce_scatter(ReduceOp op, const ArrayRef& input,
                            const ArrayRef& output,
                            const std::vector<std::string>& axes,
                            const CollectiveOptions& options) {
  namespace ci = collectives_internal;
  const absl::string_view name = ReduceScatterName(op);
  constexpr ci::CollectiveKind kKind = ci::CollectiveKind::kReduceScatter;
  // Step 1.
  if (const ci::ChannelCall* call = ci::FindChannelCall(
          kKind, static_cast<int>(op), input, output, axes, options)) {
    MESHDMA_RETURN_IF_ERROR(
        ci::PadToLargestOutput(output, call->layout.largest_output_bytes));
    absl::Status status;
    ci::DispatchReducible(input.dtype(), [&](auto zero) {
      status = OverChannel<decltype(zero)>(name, call->channel, call->group, op,
                                           call->signature, call->layout, input,
                                           output);
    });
    return status;
  }
  // Step 2.
  MESHDMA_ASSIGN_OR_RETURN(Group g, ci::ResolveGroup(name, axes));
  MESHDMA_RETURN_IF_ERROR(ci::CheckArguments(name, g, options, &op));
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef in, ci::Flatten(input, name, "input", g));
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef out,
                           ci::Flatten(output, name, "output", g));
  const int n = g.size();
  const auto [my_begin, my_len] = ScatterSegment(in.num_elements(), n, g.index);
  if (in.dtype() != out.dtype() || out.num_elements() != my_len) {
    return ci::CollectiveError(
        name, g,
        absl::StrCat("output ", output.ToString(), " must hold ", my_len, " ",
                     DTypeName(in.dtype()), " elements (segment [", my_begin,
                     ", ", my_begin + my_len, ") of input ", input.ToString(),
                     " split ", n, " ways)"));
  }
  // Segments differ by up to one element: what follows must not depend on
  // which this member holds.
  const int64_t largest_segment = (in.num_elements() + n - 1) / n *
                                  static_cast<int64_t>(DTypeSize(in.dtype()));
  MESHDMA_RETURN_IF_ERROR(ci::PadToLargestOutput(output, largest_segment));
  // Step 3.
  ci::LiveTopology topology;
  MESHDMA_ASSIGN_OR_RETURN(const ci::Plan plan,
                           ci::PlanPath({kKind, name, options, in.size_bytes(),
                                         largest_segment, in.is_symmetric()},
                                        g, topology));
  // Step 4.
  absl::Status status;
  const bool reducible = ci::DispatchReducible(in.dtype(), [&](auto zero) {
    using T = decltype(zero);
    if (plan.path == ci::Path::kKernel) {
      status = RunKernelPath<T>(name, g, options, plan, op, in, out);
      return;
    }
    absl::StatusOr<ci::Channel*> channel = ci::Channel::For(g);
    if (!channel.ok()) {
      status = channel.status();
      return;
    }
    const int64_t signature = ci::CallSignature(
        kKind, in.dtype(), in.num_elements(), static_cast<int>(op), nullptr);
    ci::CallLayout layout = ci::CallLayout::Split(
        in.num_elements(), n, static_cast<int64_t>(DTypeSize(in.dtype())),
        largest_segment);
    status =
        OverChannel<T>(name, *channel, g, op, signature, layout, input, output);
    if (status.ok()) {
      ci::RememberChannelCall(kKind, static_cast<int>(op), input, output, g,
                              *channel, signature, options, {},
                              std::move(layout));
    }
  });
  if (!reducible) {
    return ci::CollectiveError(
        name, g,
        absl::StrCat("cannot reduce ", DTypeName(in.dtype()), " (input ",
                     input.ToString(),
                     "); reductions take f32, f64, bf16, f16, i32 or i64"));
  }
  return status;
}

}  // namespace meshdma
