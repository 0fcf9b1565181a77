#include "meshdma/collectives/ppermute.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "meshdma/base/logging.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/internal/channel.h"
#include "meshdma/collectives/internal/common.h"
#include "meshdma/collectives/internal/plan.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/check.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma {

namespace {

// The kernel of one DMA push per pair, `dest` and `source` this device's
// positions in the permutation (-1 where it names none):
//   step 1: push my input to my destination (a plain copy to myself). Eager:
//           this device waits next, so a copy worker would add only its
//           wake-up (`mpirun -np 2 -x MESHDMA_DMA_MODE=async|eager
//           meshdma-bench --collective ppermute_call -b 32K -e 1M -f 2`);
//   step 2: zeros if nobody sends to me, else wait for my source's bytes;
//   step 3: my input may be reused once my push has been read.
absl::Status PushPairs(const collectives_internal::Group& g, const ArrayRef& in,
                       const ArrayRef& out, int dest, int source) {
  const int r = g.index;
  MESHDMA_ASSIGN_OR_RETURN(
      Semaphore send_sem,
      AllocateSemaphore(SemaphoreType::kDma, "ppermute send"));
  MESHDMA_ASSIGN_OR_RETURN(
      Semaphore recv_sem,
      AllocateSemaphore(SemaphoreType::kDma, "ppermute recv"));
  if (in.num_elements() == 0) return absl::OkStatus();
  // Step 1.
  std::optional<AsyncCopyDescriptor> send;
  if (dest >= 0 && dest != r) {
    send = collectives_internal::RemoteCopy(in, out, send_sem, recv_sem,
                                            g.members[dest]);
    MESHDMA_RETURN_IF_ERROR(send->start_eager());
  } else if (dest == r) {
    collectives_internal::LocalCopy(in, out);
  }
  // Step 2.
  if (source < 0) {
    if (RaceCheckingEnabled()) AnnotateWrite(out, "zero fill");
    std::memset(out.data(), 0, out.size_bytes());
  } else if (source != r) {
    MESHDMA_RETURN_IF_ERROR(collectives_internal::RemoteCopy(
                                out, out, send_sem, recv_sem, g.members[source])
                                .wait_recv());
  }
  // Step 3.
  if (send.has_value()) MESHDMA_RETURN_IF_ERROR(send->wait_send());
  return absl::OkStatus();
}

}  // namespace

absl::Status ppermute(const ArrayRef& input, const ArrayRef& output,
                      const std::vector<std::string>& axes,
                      const std::vector<std::pair<int, int>>& perm,
                      const CollectiveOptions& options) {
  constexpr absl::string_view kName = "ppermute";
  using collectives_internal::Channel;
  using collectives_internal::ChannelCall;
  constexpr collectives_internal::CollectiveKind kKind =
      collectives_internal::CollectiveKind::kPpermute;
  // Small: one exchange over the group's channel, no entry barrier.
  //   step 1: push my input to my destination `dest` (Channel::Exchange);
  //   step 2: the row of my source `source` into `output` (zeros without a
  //           source, my input when I am my own destination).
  // Positions are -1 where the permutation names none.
  auto over_channel = [&](Channel* channel,
                          const collectives_internal::Group& g,
                          int64_t signature, int dest, int source) {
    const int r = g.index;
    const int64_t bytes = input.size_bytes();
    const bool empty = bytes == 0;
    const bool push = dest >= 0 && dest != r && !empty;
    const bool pull = source >= 0 && source != r && !empty;
    Channel::Outgoing outgoing[1];
    Channel::Incoming incoming[1];
    if (push) outgoing[0] = {dest, input.data(), bytes};
    if (pull) incoming[0] = {source, bytes};
    if (!empty && (push || dest == r) && RaceCheckingEnabled()) {
      AnnotateRead(input, "channel staging read");
    }
    return channel->Exchange(
        kName, g, signature, {outgoing, push ? 1u : 0u},
        {incoming, pull ? 1u : 0u}, [&](const std::byte* rows) {
          if (empty) return;
          if (RaceCheckingEnabled()) {
            AnnotateWrite(output, "channel output write");
          }
          if (pull) {
            std::memcpy(output.data(), channel->Payload(rows, source), bytes);
          } else if (dest == r) {
            std::memcpy(output.data(), input.data(), bytes);
          } else if (source < 0) {
            std::memset(output.data(), 0, bytes);
          }
        });
  };
  // The same small call as before on this device (the same permutation
  // too): straight to its channel.
  if (const ChannelCall* call = collectives_internal::FindChannelCall(
          kKind, 0, input, output, axes, options, perm)) {
    if (input.data() == output.data() && input.num_elements() > 0) {
      return collectives_internal::CollectiveError(
          kName, call->group,
          "input and output are the same buffer; ppermute does not "
          "run in place");
    }
    int dest = -1, source = -1;
    for (const auto& [src, dst] : perm) {
      if (src == call->group.index) dest = dst;
      if (dst == call->group.index) source = src;
    }
    return over_channel(call->channel, call->group, call->signature, dest,
                        source);
  }
  MESHDMA_ASSIGN_OR_RETURN(collectives_internal::Group g,
                           collectives_internal::ResolveGroup(kName, axes));
  MESHDMA_RETURN_IF_ERROR(
      collectives_internal::CheckArguments(kName, g, options));
  const int n = g.size();
  MESHDMA_ASSIGN_OR_RETURN(
      ArrayRef in, collectives_internal::Flatten(input, kName, "input", g));
  MESHDMA_ASSIGN_OR_RETURN(
      ArrayRef out, collectives_internal::Flatten(output, kName, "output", g));
  if (in.dtype() != out.dtype() || in.num_elements() != out.num_elements()) {
    return collectives_internal::CollectiveError(
        kName, g,
        absl::StrCat("input ", input.ToString(), " and output ",
                     output.ToString(),
                     " must have the same dtype and element count"));
  }
  if (in.data() == out.data() && in.num_elements() > 0) {
    return collectives_internal::CollectiveError(
        kName, g,
        "input and output are the same buffer; ppermute does not "
        "run in place");
  }
  std::vector<int> dest_of(n, -1), source_of(n, -1);
  for (const auto& [src, dst] : perm) {
    if (src < 0 || src >= n || dst < 0 || dst >= n) {
      return collectives_internal::CollectiveError(
          kName, g,
          absl::StrCat("pair (", src, ", ", dst,
                       ") names a position outside [0, ", n, ")"));
    }
    if (dest_of[src] != -1 || source_of[dst] != -1) {
      return collectives_internal::CollectiveError(
          kName, g,
          absl::StrCat("pair (", src, ", ", dst, ") repeats a ",
                       dest_of[src] != -1 ? "source" : "destination",
                       "; a permutation names each at most once"));
    }
    dest_of[src] = dst;
    source_of[dst] = src;
  }
  const int r = g.index;
  const bool remote_in = source_of[r] >= 0 && source_of[r] != r;
  const bool remote_out = dest_of[r] >= 0 && dest_of[r] != r;
  // A sender names the receiver's output by its own output's handle.
  if (remote_in || remote_out) {
    MESHDMA_RETURN_IF_ERROR(
        collectives_internal::RequireSymmetric(kName, g, "output", output));
  }
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
        kKind, in.dtype(), in.num_elements(),
        collectives_internal::PermutationAux(perm), nullptr);
    MESHDMA_RETURN_IF_ERROR(
        over_channel(channel, g, signature, dest_of[r], source_of[r]));
    collectives_internal::RememberChannelCall(
        kKind, 0, input, output, g, channel, signature, options, perm);
    return absl::OkStatus();
  }
  return collectives_internal::RunCollectiveKernel(
      kName, g, options.check_peers,
      collectives_internal::CallSignature(
          kKind, in.dtype(), in.num_elements(),
          collectives_internal::PermutationAux(perm), nullptr),
      [&]() { return PushPairs(g, in, out, dest_of[r], source_of[r]); });
}

}  // namespace meshdma
