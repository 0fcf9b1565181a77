#include "meshdma/collectives/ppermute.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "meshdma/base/logging.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/internal/channel.h"
#include "meshdma/collectives/internal/common.h"
#include "meshdma/collectives/internal/plan.h"
#include "meshdma/collectives/internal/plan_cache.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/check.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma {
namespace {

using collectives_internal::Group;
constexpr absl::string_view kName = "ppermute";

// The kernel of one DMA push per pair, `dest` and `source` this device's
// positions in the permutation (-1 where it names none):
//   step 1: push my input to my destination (a plain copy to myself). Eager:
//           this device waits next, so a copy worker would add only its
//           wake-up (`mpirun -np 2 -x MESHDMA_DMA_MODE=async|eager
//           meshdma-bench --collective ppermute_call -b 32K -e 1M -f 2`);
//   step 2: zeros if nobody sends to me, else wait for my source's bytes;
//   step 3: my input may be reused once my push has been read.
absl::Status PushPairs(const Group& g, const ArrayRef& in, const ArrayRef& out,
                       int dest, int source) {
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
    collectives_internal::ZeroFill(out);
  } else if (source != r) {
    MESHDMA_RETURN_IF_ERROR(collectives_internal::RemoteCopy(
                                out, out, send_sem, recv_sem, g.members[source])
                                .wait_recv());
  }
  // Step 3.
  if (send.has_value()) MESHDMA_RETURN_IF_ERROR(send->wait_send());
  return absl::OkStatus();
}

// This device's place in the permutation: the position it sends to and
// the one it receives from (-1 where the permutation names none).
struct Pair {
  int dest = -1;
  int source = -1;
};
Pair PairOf(std::span<const std::pair<int, int>> perm, int me) {
  Pair pair;
  for (const auto& [src, dst] : perm) {
    if (src == me) pair.dest = dst;
    if (dst == me) pair.source = src;
  }
  return pair;
}

absl::Status NotInPlace(const Group& g) {
  return collectives_internal::CollectiveError(
      kName, g,
      "input and output are the same buffer; ppermute does not run in place");
}

// Small: one exchange over the group's channel, no entry barrier.
//   step 1: push my input to my destination (Channel::Exchange);
//   step 2: the row of my source into `output` (zeros without a source, my
//           input when I am my own destination).
absl::Status OverChannel(const collectives_internal::PlannedCall& call,
                         const ArrayRef& input, const ArrayRef& output,
                         Pair pair) {
  using collectives_internal::Channel;
  const int r = call.group.index;
  const int64_t bytes = input.size_bytes();
  const bool empty = bytes == 0;
  const bool push = pair.dest >= 0 && pair.dest != r && !empty;
  const bool pull = pair.source >= 0 && pair.source != r && !empty;
  Channel::Outgoing outgoing[1];
  Channel::Incoming incoming[1];
  if (push) outgoing[0] = {pair.dest, input.data(), bytes};
  if (pull) incoming[0] = {pair.source, bytes};
  // My input is read when I push it or copy it to myself.
  const bool reads = !empty && (push || pair.dest == r);
  return call.channel->Exchange(
      kName, call.group, call.signature, reads ? &input : nullptr,
      empty ? nullptr : &output, {outgoing, push ? 1u : 0u},
      {incoming, pull ? 1u : 0u}, [&](const std::byte* rows) {
        if (empty) return;
        if (pull) {
          std::memcpy(output.data(), call.channel->Payload(rows, pair.source),
                      bytes);
        } else if (pair.dest == r) {
          std::memcpy(output.data(), input.data(), bytes);
        } else if (pair.source < 0) {
          std::memset(output.data(), 0, bytes);
        }
      });
}

// The operands as 1-D views, after the checks: the same dtype and count,
// not the same buffer, a permutation of positions of `g` (each source and
// destination at most once), and a symmetric output where peers write it.
struct Operands {
  ArrayRef in, out;
  Pair pair;
};
absl::StatusOr<Operands> CheckOperands(
    const Group& g, const ArrayRef& input, const ArrayRef& output,
    std::span<const std::pair<int, int>> perm) {
  namespace ci = collectives_internal;
  const int n = g.size();
  Operands ops;
  MESHDMA_ASSIGN_OR_RETURN(ops.in, ci::Flatten(input, kName, "input", g));
  MESHDMA_ASSIGN_OR_RETURN(ops.out, ci::Flatten(output, kName, "output", g));
  if (ops.in.dtype() != ops.out.dtype() ||
      ops.in.num_elements() != ops.out.num_elements()) {
    return ci::CollectiveError(
        kName, g,
        absl::StrCat("input ", input.ToString(), " and output ",
                     output.ToString(),
                     " must have the same dtype and element count"));
  }
  if (ops.in.data() == ops.out.data() && ops.in.num_elements() > 0) {
    return NotInPlace(g);
  }
  std::vector<int> dest_of(n, -1), source_of(n, -1);
  for (const auto& [src, dst] : perm) {
    if (src < 0 || src >= n || dst < 0 || dst >= n) {
      return ci::CollectiveError(
          kName, g,
          absl::StrCat("pair (", src, ", ", dst,
                       ") names a position outside [0, ", n, ")"));
    }
    if (dest_of[src] != -1 || source_of[dst] != -1) {
      return ci::CollectiveError(
          kName, g,
          absl::StrCat("pair (", src, ", ", dst, ") repeats a ",
                       dest_of[src] != -1 ? "source" : "destination",
                       "; a permutation names each at most once"));
    }
    dest_of[src] = dst;
    source_of[dst] = src;
  }
  const int r = g.index;
  ops.pair = {dest_of[r], source_of[r]};
  // A sender names the receiver's output by its own output's handle.
  const bool remote_in = ops.pair.source >= 0 && ops.pair.source != r;
  const bool remote_out = ops.pair.dest >= 0 && ops.pair.dest != r;
  if (remote_in || remote_out) {
    MESHDMA_RETURN_IF_ERROR(ci::RequireSymmetric(kName, g, "output", output));
  }
  return ops;
}

}  // namespace

// Steps: 1. a repeat of a call whose plan is cached (the same permutation
// too) runs it at once; 2. the group and the checked operands; 3. the plan
// (collectives/internal/plan.h); 4. the plan's path.
absl::Status ppermute(const ArrayRef& input, const ArrayRef& output,
                      const std::vector<std::string>& axes,
                      const std::vector<std::pair<int, int>>& perm,
                      const CollectiveOptions& options) {
  namespace ci = collectives_internal;
  constexpr ci::CollectiveKind kKind = ci::CollectiveKind::kPpermute;
  const ci::CallKey key{kKind, 0, input, output, axes, options, perm};
  // Step 1.
  if (const ci::PlannedCall* call = ci::FindPlannedCall(key)) {
    if (input.data() == output.data() && input.num_elements() > 0) {
      return NotInPlace(call->group);
    }
    return OverChannel(*call, input, output, PairOf(perm, call->group.index));
  }
  // Step 2.
  MESHDMA_ASSIGN_OR_RETURN(ci::Group g, ci::ResolveGroup(kName, axes));
  MESHDMA_RETURN_IF_ERROR(ci::CheckArguments(kName, g, options));
  MESHDMA_ASSIGN_OR_RETURN(const Operands ops,
                           CheckOperands(g, input, output, perm));
  // Step 3.
  ci::LiveTopology topology;
  MESHDMA_ASSIGN_OR_RETURN(
      const ci::Plan plan,
      ci::PlanPath(
          {kKind, kName, options, ops.in.size_bytes(), ops.in.size_bytes()}, g,
          topology));
  // Step 4.
  const int64_t signature =
      ci::CallSignature(kKind, ops.in.dtype(), ops.in.num_elements(),
                        ci::PermutationAux(perm), nullptr);
  if (plan.path == ci::Path::kChannel) {
    ci::PlannedCall call{plan, g, signature};
    MESHDMA_ASSIGN_OR_RETURN(call.channel, ci::Channel::For(g));
    MESHDMA_RETURN_IF_ERROR(OverChannel(call, input, output, ops.pair));
    ci::CachePlannedCall(key, std::move(call));
    return absl::OkStatus();
  }
  return ci::RunCollectiveKernel(
      kName, g, options.check_peers, signature, [&]() {
        return PushPairs(g, ops.in, ops.out, ops.pair.dest, ops.pair.source);
      });
}

}  // namespace meshdma
