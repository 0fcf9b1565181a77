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
#include "meshdma/collectives/internal/plan_cache.h"
#include "meshdma/collectives/internal/reduce.h"
#include "meshdma/collectives/internal/ring.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma {
namespace {

using collectives_internal::Group;

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
            return collectives_internal::OneShotReduce<T>(
                name, g, op, in, out,
                collectives_internal::WithPlan(
                    collectives_internal::CallSignature(
                        CollectiveKind::kReduceScatter, in.dtype(),
                        in.num_elements(), static_cast<int>(op), nullptr),
                    plan_bits),
                one_shot_check, /*whole=*/false);
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
// channel (`call.layout.Part(j)`). In place too (`output` my segment of
// `input`): the channel reads the other segments when it pushes them, and
// writes mine only after.
template <typename T>
absl::Status OverChannel(absl::string_view name,
                         const collectives_internal::PlannedCall& call,
                         ReduceOp op, const ArrayRef& input,
                         const ArrayRef& output) {
  const collectives_internal::CallLayout& layout = call.layout;
  return collectives_internal::ChannelReduce<T>(
      call.channel, name, call.group, op, call.signature, input,
      [&](int j) { return layout.Part(input.data(), j); },
      reinterpret_cast<const T*>(
          layout.Part(input.data(), call.group.index).first),
      output);
}

// The plan's channel path on its first call: the group's channel, the
// signature and the segments' layout, then the path; a call that succeeded
// keeps its plan, which its repeats run at once (plan_cache.h).
template <typename T>
absl::Status RunChannelPath(absl::string_view name, const Group& g,
                            const collectives_internal::Plan& plan, ReduceOp op,
                            const ArrayRef& input, const ArrayRef& output,
                            const collectives_internal::CallKey& key) {
  namespace ci = collectives_internal;
  const int64_t count = input.num_elements();
  const int64_t elem = static_cast<int64_t>(DTypeSize(input.dtype()));
  ci::PlannedCall call{plan, g};
  MESHDMA_ASSIGN_OR_RETURN(call.channel, ci::Channel::For(g));
  call.signature =
      ci::CallSignature(ci::CollectiveKind::kReduceScatter, input.dtype(),
                        count, static_cast<int>(op), nullptr);
  call.layout = ci::CallLayout::Split(count, g.size(), elem,
                                      (count + g.size() - 1) / g.size() * elem);
  MESHDMA_RETURN_IF_ERROR(OverChannel<T>(name, call, op, input, output));
  ci::CachePlannedCall(key, std::move(call));
  return absl::OkStatus();
}

absl::string_view ReduceScatterName(ReduceOp op) {
  return op == ReduceOp::kSum    ? "psum_scatter"
         : op == ReduceOp::kMax  ? "reduce_scatter(max)"
         : op == ReduceOp::kMin  ? "reduce_scatter(min)"
         : op == ReduceOp::kMean ? "reduce_scatter(mean)"
                                 : "reduce_scatter";
}

}  // namespace

// Steps: 1. a repeat of a call whose plan is cached runs it at once, with
// the segments and padding the first call computed; 2. the
// group and the checked operands; 3. the plan
// (collectives/internal/plan.h); 4. the plan's path.
absl::Status reduce_scatter(ReduceOp op, const ArrayRef& input,
                            const ArrayRef& output,
                            const std::vector<std::string>& axes,
                            const CollectiveOptions& options) {
  namespace ci = collectives_internal;
  const absl::string_view name = ReduceScatterName(op);
  constexpr ci::CollectiveKind kKind = ci::CollectiveKind::kReduceScatter;
  const ci::CallKey key{kKind,  static_cast<int>(op), input, output, axes,
                        options};
  // Step 1.
  if (const ci::PlannedCall* call = ci::FindPlannedCall(key)) {
    MESHDMA_RETURN_IF_ERROR(
        ci::PadToLargestOutput(output, call->layout.largest_output_bytes));
    return ci::RunReducible(name, call->group, input, [&](auto zero) {
      return OverChannel<decltype(zero)>(name, *call, op, input, output);
    });
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
  return ci::RunReducible(name, g, input, [&](auto zero) {
    using T = decltype(zero);
    return plan.path == ci::Path::kKernel
               ? RunKernelPath<T>(name, g, options, plan, op, in, out)
               : RunChannelPath<T>(name, g, plan, op, input, output, key);
  });
}

}  // namespace meshdma
