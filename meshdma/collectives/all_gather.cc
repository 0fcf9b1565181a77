#include "meshdma/collectives/all_gather.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "meshdma/base/logging.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/internal/channel.h"
#include "meshdma/collectives/internal/common.h"
#include "meshdma/collectives/internal/direct.h"
#include "meshdma/collectives/internal/hierarchy.h"
#include "meshdma/collectives/internal/plan.h"
#include "meshdma/collectives/internal/plan_cache.h"
#include "meshdma/collectives/internal/ring.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/check.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma {
namespace {

constexpr absl::string_view kName = "all_gather";
constexpr collectives_internal::CollectiveKind kKind =
    collectives_internal::CollectiveKind::kAllGather;

// Small: one exchange over the group's channel, no entry barrier.
//   step 1: push my block to every peer (Channel::Exchange), which has
//           stored it in every receiver's slot when it returns;
//   step 2: copy my block, then every arrived one, into place (so an input
//           that overlaps the output is read before it is written).
absl::Status OverChannel(collectives_internal::Channel* channel,
                         const collectives_internal::Group& g,
                         int64_t signature, const ArrayRef& input,
                         const ArrayRef& output) {
  const int64_t bytes = input.size_bytes();
  return channel->ExchangeWithAll(
      kName, g, signature, &input, &output,
      [&](int) { return std::pair(input.data(), bytes); }, bytes,
      [&](const std::byte* rows) {
        std::byte* base = output.data();
        std::memmove(base + g.index * bytes, input.data(), bytes);
        for (int i = 0; i < g.size(); ++i) {
          if (i == g.index) continue;
          std::memcpy(base + i * bytes, channel->Payload(rows, i), bytes);
        }
      });
}

// The operand checks; `input` and `output` as 1-D views.
absl::StatusOr<std::pair<ArrayRef, ArrayRef>> CheckOperands(
    const collectives_internal::Group& g, const ArrayRef& input,
    const ArrayRef& output, bool tiled) {
  const int n = g.size();
  std::vector<int64_t> want(input.shape().begin(), input.shape().end());
  if (tiled) {
    if (want.empty()) {
      return collectives_internal::CollectiveError(
          kName, g, "a tiled all_gather needs an input of rank >= 1");
    }
    want[0] *= n;
  } else {
    want.insert(want.begin(), n);
  }
  if (output.dtype() != input.dtype() ||
      !std::equal(want.begin(), want.end(), output.shape().begin(),
                  output.shape().end())) {
    return collectives_internal::CollectiveError(
        kName, g,
        absl::StrCat("output is ", output.ToString(), " but a ",
                     tiled ? "tiled" : "stacked", " gather of input ",
                     input.ToString(), " over ", n, " devices needs ",
                     DTypeName(input.dtype()), "[", absl::StrJoin(want, ","),
                     "]"));
  }
  MESHDMA_ASSIGN_OR_RETURN(
      ArrayRef in, collectives_internal::Flatten(input, kName, "input", g));
  MESHDMA_ASSIGN_OR_RETURN(
      ArrayRef out, collectives_internal::Flatten(output, kName, "output", g));
  MESHDMA_RETURN_IF_ERROR(
      collectives_internal::RequireSymmetric(kName, g, "output", output));
  return std::pair(in, out);
}

// The kernel of `plan`: direct stores, hierarchical, or the ring. An input
// that overlaps the output anywhere but this device's own block, which peers
// write while the kernel reads the input, is read from a private copy made
// before the kernel's entry barrier.
absl::Status RunKernelPath(const collectives_internal::Group& g,
                           const collectives_internal::Plan& plan, ArrayRef in,
                           const ArrayRef& out, bool tiled,
                           const CollectiveOptions& options) {
  const int n = g.size();
  const int64_t count = in.num_elements();
  std::vector<std::byte> staged;
  if (collectives_internal::ViewsOverlap(in, out) &&
      in.data() != out.data() + g.index * in.size_bytes()) {
    staged.assign(in.data(), in.data() + in.size_bytes());
    MESHDMA_ASSIGN_OR_RETURN(
        in, ArrayRef::FromPointer(staged.data(), in.dtype(), in.shape()));
  }
  const bool direct = plan.algorithm == CollectiveAlgorithm::kDirect;
  return collectives_internal::RunCollectiveKernel(
      kName, g, options.check_peers,
      collectives_internal::WithPlan(
          collectives_internal::CallSignature(
              kKind, in.dtype(), count, (tiled ? 1 : 0) | (direct ? 2 : 0),
              &out),
          collectives_internal::PlanBits(plan.algorithm, options, false)),
      [&]() -> absl::Status {
        if (direct) return collectives_internal::DirectAllGather(g, in, out);
        if (plan.algorithm == CollectiveAlgorithm::kHierarchical) {
          return collectives_internal::HierarchicalAllGather(
              g, plan.layout, in, out, plan.host_direct);
        }
        std::vector<int64_t> blocks(n + 1);
        for (int i = 0; i <= n; ++i) blocks[i] = i * count;
        // The ring, sending my block from `in` (single copy); it copies my
        // block into `out` while its first sends travel.
        MESHDMA_ASSIGN_OR_RETURN(
            collectives_internal::AllGatherState state,
            collectives_internal::AllocateAllGather(
                g, plan.algorithm == CollectiveAlgorithm::kBidirectionalRing
                       ? 2
                       : 1));
        return collectives_internal::RingAllGather(g, in, out, blocks, state);
      });
}

}  // namespace

absl::Status all_gather(const ArrayRef& input, const ArrayRef& output,
                        const std::vector<std::string>& axes, bool tiled,
                        const CollectiveOptions& options) {
  using collectives_internal::Channel;
  const int aux = tiled ? 1 : 0;
  // Step 1: the same small call as before on this device goes straight to
  // its channel.
  if (const collectives_internal::PlannedCall* call =
          collectives_internal::FindPlannedCall(
              {kKind, aux, input, output, axes, options})) {
    return OverChannel(call->channel, call->group, call->signature, input,
                       output);
  }
  // Step 2: the group and the operands.
  MESHDMA_ASSIGN_OR_RETURN(collectives_internal::Group g,
                           collectives_internal::ResolveGroup(kName, axes));
  MESHDMA_RETURN_IF_ERROR(
      collectives_internal::CheckArguments(kName, g, options));
  MESHDMA_ASSIGN_OR_RETURN(const auto operands,
                           CheckOperands(g, input, output, tiled));
  const auto& [in, out] = operands;
  // Step 3: the plan (collectives/internal/plan.h).
  collectives_internal::LiveTopology topology;
  MESHDMA_ASSIGN_OR_RETURN(
      const collectives_internal::Plan plan,
      collectives_internal::PlanPath(
          {kKind, kName, options, in.size_bytes(), in.size_bytes()}, g,
          topology));
  // Step 4: its path.
  if (plan.path != collectives_internal::Path::kChannel) {
    return RunKernelPath(g, plan, in, out, tiled, options);
  }
  MESHDMA_ASSIGN_OR_RETURN(Channel * channel, Channel::For(g));
  const int64_t signature = collectives_internal::CallSignature(
      kKind, in.dtype(), in.num_elements(), aux, &output);
  MESHDMA_RETURN_IF_ERROR(OverChannel(channel, g, signature, input, output));
  collectives_internal::CachePlannedCall(
      {kKind, aux, input, output, axes, options},
      {plan, g, signature, channel});
  return absl::OkStatus();
}

}  // namespace meshdma
