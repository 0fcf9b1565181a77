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
#include "meshdma/collectives/internal/ring.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/check.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma {

absl::Status all_gather(const ArrayRef& input, const ArrayRef& output,
                        const std::vector<std::string>& axes, bool tiled,
                        const CollectiveOptions& options) {
  constexpr absl::string_view kName = "all_gather";
  using collectives_internal::Channel;
  using collectives_internal::ChannelCall;
  constexpr collectives_internal::CollectiveKind kKind =
      collectives_internal::CollectiveKind::kAllGather;
  const int aux = tiled ? 1 : 0;
  // Small: one exchange over the group's channel, no entry barrier.
  //   step 1: push my block to every peer (Channel::Exchange);
  //   step 2: copy every arrived block, and mine, into place.
  auto over_channel = [&](Channel* channel,
                          const collectives_internal::Group& g,
                          int64_t signature) {
    if (RaceCheckingEnabled()) AnnotateRead(input, "channel staging read");
    const int64_t bytes = input.size_bytes();
    return channel->ExchangeWithAll(
        kName, g, signature,
        [&](int) { return std::pair(input.data(), bytes); }, bytes,
        [&](const std::byte* rows) {
          if (RaceCheckingEnabled()) {
            AnnotateWrite(output, "channel output write");
          }
          std::byte* base = output.data();
          std::memmove(base + g.index * bytes, input.data(), bytes);
          for (int i = 0; i < g.size(); ++i) {
            if (i == g.index) continue;
            std::memcpy(base + i * bytes, channel->Payload(rows, i), bytes);
          }
        });
  };
  // The same small call as before on this device: straight to its channel.
  if (const ChannelCall* call = collectives_internal::FindChannelCall(
          kKind, aux, input, output, axes, options)) {
    return over_channel(call->channel, call->group, call->signature);
  }
  MESHDMA_ASSIGN_OR_RETURN(collectives_internal::Group g,
                           collectives_internal::ResolveGroup(kName, axes));
  MESHDMA_RETURN_IF_ERROR(
      collectives_internal::CheckArguments(kName, g, options));
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
  const int64_t count = in.num_elements();
  // The plan (collectives/internal/plan.h), then its path.
  collectives_internal::LiveTopology topology;
  MESHDMA_ASSIGN_OR_RETURN(
      const collectives_internal::Plan plan,
      collectives_internal::PlanPath(
          {kKind, kName, options, in.size_bytes(), in.size_bytes()}, g,
          topology));
  if (plan.path == collectives_internal::Path::kChannel) {
    MESHDMA_ASSIGN_OR_RETURN(Channel * channel, Channel::For(g));
    const int64_t signature = collectives_internal::CallSignature(
        kKind, in.dtype(), count, aux, &output);
    MESHDMA_RETURN_IF_ERROR(over_channel(channel, g, signature));
    collectives_internal::RememberChannelCall(kKind, aux, input, output, g,
                                              channel, signature, options);
    return absl::OkStatus();
  }
  const bool direct = plan.algorithm == CollectiveAlgorithm::kDirect;
  return collectives_internal::RunCollectiveKernel(
      kName, g, options.check_peers,
      collectives_internal::WithPlan(
          collectives_internal::CallSignature(
              collectives_internal::CollectiveKind::kAllGather, in.dtype(),
              count, (tiled ? 1 : 0) | (direct ? 2 : 0), &output),
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

}  // namespace meshdma
