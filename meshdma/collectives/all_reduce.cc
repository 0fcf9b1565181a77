#include "meshdma/collectives/all_reduce.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "meshdma/base/logging.h"
#include "meshdma/base/status_macros.h"
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

absl::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMean:
      return "mean";
  }
  return "?";
}

absl::string_view CollectiveAlgorithmName(CollectiveAlgorithm a) {
  switch (a) {
    case CollectiveAlgorithm::kAuto:
      return "auto";
    case CollectiveAlgorithm::kRing:
      return "ring";
    case CollectiveAlgorithm::kBidirectionalRing:
      return "bidirectional_ring";
    case CollectiveAlgorithm::kOneShot:
      return "one_shot";
    case CollectiveAlgorithm::kHierarchical:
      return "hierarchical";
    case CollectiveAlgorithm::kDirect:
      return "direct";
  }
  return "?";
}

namespace {

using collectives_internal::Group;
using collectives_internal::Range;

// A small all-reduce of a group spread evenly over hosts, several members
// on each, over two channels:
//   step 1: all-reduce my input over my host's channel (stores through
//           shared memory) into `out`: every member of a host holds the same
//           host total;
//   step 2: all-reduce that in place over my lane's channel (the members
//           with my local index on every host): one row to each other host,
//           instead of one to each of its members as a flat one-shot sends;
//   step 3: kMean: divide by the group size (steps 1 and 2 sum).
// Every member gets the same bits: each host's total is reduced in host
// order, then the hosts' totals in lane order. `host` and `lane` are the
// caller's host and lane, `host_channel` and the lane's channel theirs
// (Channel::For); `in` and `out` are contiguous.
template <typename T>
absl::Status ChannelReduceByHosts(
    absl::string_view name, const Group& host,
    collectives_internal::Channel* host_channel,
    const collectives_internal::ChannelStage& lane, ReduceOp op,
    const ArrayRef& in, const ArrayRef& out, int64_t signature) {
  const ReduceOp phase_op = op == ReduceOp::kMean ? ReduceOp::kSum : op;
  MESHDMA_RETURN_IF_ERROR(collectives_internal::ChannelReduce<T>(
      host_channel, name, host, phase_op, signature, in,
      [&](int) { return std::pair(in.data(), in.size_bytes()); },
      in.data_as<const T>(), out));
  MESHDMA_RETURN_IF_ERROR(collectives_internal::ChannelReduce<T>(
      lane.channel, name, lane.group, phase_op, signature, out,
      [&](int) { return std::pair(out.data(), out.size_bytes()); },
      out.data_as<const T>(), out));
  if (op == ReduceOp::kMean) {
    collectives_internal::DivideArray(out.data_as<T>(), out.num_elements(),
                                      host.size() * lane.group.size());
  }
  return absl::OkStatus();
}

// The kernel path: `plan.algorithm` over `g`. `own` is this device's input
// as the caller passed it (kDirect reads its own segment there), `in` the
// input the peers read (the output, where a private input was copied).
template <typename T>
absl::Status RunKernelPath(absl::string_view name, const Group& g,
                           const CollectiveOptions& options,
                           const collectives_internal::Plan& plan, ReduceOp op,
                           const ArrayRef& own, const ArrayRef& in,
                           const ArrayRef& out, const ArrayRef& output) {
  using collectives_internal::CollectiveKind;
  const int plan_bits =
      collectives_internal::ReductionPlanBits(plan.algorithm, options);
  return collectives_internal::RunReductionKernel(
      name, g, options, plan.algorithm, CollectiveKind::kAllReduce, op, in,
      &output, plan.reads_peer_inputs, plan.private_input, plan.boards,
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
                        CollectiveKind::kAllReduce, in.dtype(),
                        in.num_elements(), static_cast<int>(op), &output),
                    plan_bits),
                one_shot_check, /*whole=*/true);
          case CollectiveAlgorithm::kHierarchical:
            return collectives_internal::HierarchicalAllReduce<T>(
                g, plan.layout, op, in, out, options, plan.host_direct, board);
          case CollectiveAlgorithm::kDirect:
            return collectives_internal::DirectAllReduce<T>(g, op, own, in, out,
                                                            board);
          case CollectiveAlgorithm::kBidirectionalRing:
            return collectives_internal::RingAllReduce<T>(
                g, op, in, out, 2, options.chunk_bytes, options.num_buffers);
          default:
            return collectives_internal::RingAllReduce<T>(
                g, op, in, out, 1, options.chunk_bytes, options.num_buffers);
        }
      });
}

// A planned channel path: every member gets my whole input over the group's
// channel (Path::kChannel), or over my host's channel then my lane's
// (Path::kChannelByHosts).
template <typename T>
absl::Status RunPlannedChannels(absl::string_view name,
                                const collectives_internal::PlannedCall& call,
                                ReduceOp op, const ArrayRef& input,
                                const ArrayRef& output) {
  if (call.next.has_value()) {
    return ChannelReduceByHosts<T>(name, call.group, call.channel, *call.next,
                                   op, input, output, call.signature);
  }
  return collectives_internal::ChannelReduce<T>(
      call.channel, name, call.group, op, call.signature, input,
      [&](int) { return std::pair(input.data(), input.size_bytes()); },
      input.data_as<const T>(), output);
}

// The plan's channel path on its first call: its channels and signature,
// then the path; a call that succeeded keeps its plan, which its repeats
// run at once (plan_cache.h).
template <typename T>
absl::Status RunChannelPath(absl::string_view name, const Group& g,
                            const collectives_internal::Plan& plan, ReduceOp op,
                            const ArrayRef& in, const ArrayRef& out,
                            const collectives_internal::CallKey& key) {
  using collectives_internal::Channel;
  collectives_internal::PlannedCall call{plan, g};
  call.signature = collectives_internal::CallSignature(
      collectives_internal::CollectiveKind::kAllReduce, in.dtype(),
      in.num_elements(), static_cast<int>(op), &key.output);
  if (plan.path == collectives_internal::Path::kChannelByHosts) {
    call.group = plan.layout.Host(g);
    call.next = collectives_internal::ChannelStage{plan.layout.Lane(g)};
  }
  MESHDMA_ASSIGN_OR_RETURN(call.channel, Channel::For(call.group));
  if (call.next.has_value()) {
    MESHDMA_ASSIGN_OR_RETURN(call.next->channel,
                             Channel::For(call.next->group));
  }
  MESHDMA_RETURN_IF_ERROR(RunPlannedChannels<T>(name, call, op, in, out));
  collectives_internal::CachePlannedCall(key, std::move(call));
  return absl::OkStatus();
}

// Peers in other processes cannot load a private input (ordinary memory)
// in place: where the plan's single-copy step would read it, the segments
// that peers read are first copied into this device's own output, which is
// symmetric, and peers read them there (one local copy instead of the
// rings' pipeline). Every member's previous call has finished with this
// output (its `DirectFinish`, or its kernel's waits), and peers read it only
// after the kernel's entry barrier, which orders this copy before them.
void CopyPrivateInput(absl::string_view name, const Group& g,
                      const collectives_internal::Plan& plan,
                      const ArrayRef& in, const ArrayRef& out) {
  MESHDMA_LOG_ONCE(kInfo, kLogCollectives,
                   absl::StrCat(name, " private input ", g.size()), name,
                   " on ", g.size(),
                   " devices: a private input is copied into the output, "
                   "and the call reads it there");
  const int64_t count = in.num_elements(), elem = DTypeSize(in.dtype());
  for (int j = 0; j < g.size(); ++j) {
    if (j == g.index && plan.algorithm == CollectiveAlgorithm::kDirect) {
      continue;
    }
    const int64_t b = collectives_internal::PartBegin(count, g.size(), j);
    const int64_t e = collectives_internal::PartBegin(count, g.size(), j + 1);
    std::memmove(out.data() + b * elem, in.data() + b * elem, (e - b) * elem);
  }
}

absl::string_view AllReduceName(ReduceOp op) {
  return op == ReduceOp::kSum    ? "psum"
         : op == ReduceOp::kMax  ? "pmax"
         : op == ReduceOp::kMin  ? "pmin"
         : op == ReduceOp::kMean ? "pmean"
                                 : "all_reduce";
}

}  // namespace

// Steps: 1. a repeat of a call whose plan is cached runs it at once; 2. the
// group and the checked operands; 3. the plan (collectives/internal/plan.h); 4.
// a private input that peers read is copied into the output; 5. the plan's
// path.
absl::Status all_reduce(ReduceOp op, const ArrayRef& input,
                        const ArrayRef& output,
                        const std::vector<std::string>& axes,
                        const CollectiveOptions& options) {
  namespace ci = collectives_internal;
  const absl::string_view name = AllReduceName(op);
  const ci::CallKey key{ci::CollectiveKind::kAllReduce,
                        static_cast<int>(op),
                        input,
                        output,
                        axes,
                        options};
  // Step 1.
  if (const ci::PlannedCall* call = ci::FindPlannedCall(key)) {
    return ci::RunReducible(name, call->group, input, [&](auto zero) {
      return RunPlannedChannels<decltype(zero)>(name, *call, op, input, output);
    });
  }
  // Step 2.
  MESHDMA_ASSIGN_OR_RETURN(Group g, ci::ResolveGroup(name, axes));
  MESHDMA_RETURN_IF_ERROR(ci::CheckArguments(name, g, options, &op));
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef in, ci::Flatten(input, name, "input", g));
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef out,
                           ci::Flatten(output, name, "output", g));
  if (in.dtype() != out.dtype() || in.num_elements() != out.num_elements()) {
    return ci::CollectiveError(
        name, g,
        absl::StrCat("input ", input.ToString(), " and output ",
                     output.ToString(),
                     " must have the same dtype and element count"));
  }
  MESHDMA_RETURN_IF_ERROR(ci::RequireSymmetric(name, g, "output", output));
  // Step 3.
  ci::LiveTopology topology;
  MESHDMA_ASSIGN_OR_RETURN(
      const ci::Plan plan,
      ci::PlanPath({ci::CollectiveKind::kAllReduce, name, options,
                    in.size_bytes(), in.size_bytes(), in.is_symmetric()},
                   g, topology));
  // Step 4.
  const ArrayRef own = in;
  if (plan.private_input) {
    CopyPrivateInput(name, g, plan, in, out);
    in = out;
  }
  // Step 5.
  return ci::RunReducible(name, g, input, [&](auto zero) {
    using T = decltype(zero);
    return plan.path == ci::Path::kKernel
               ? RunKernelPath<T>(name, g, options, plan, op, own, in, out,
                                  output)
               : RunChannelPath<T>(name, g, plan, op, in, out, key);
  });
}

}  // namespace meshdma
