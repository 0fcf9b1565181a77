#include "meshdma/collectives/all_to_all.h"

#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "meshdma/base/logging.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/internal/channel.h"
#include "meshdma/collectives/internal/common.h"
#include "meshdma/collectives/internal/direct.h"
#include "meshdma/collectives/internal/hierarchy.h"
#include "meshdma/collectives/internal/plan.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/check.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma {

std::vector<int64_t> AllToAllOutputShape(std::span<const int64_t> input_shape,
                                         int split_axis, int concat_axis,
                                         int group_size, int index) {
  std::vector<int64_t> shape(input_shape.begin(), input_shape.end());
  const int64_t s = shape[split_axis];
  shape[split_axis] =
      collectives_internal::PartBegin(s, group_size, index + 1) -
      collectives_internal::PartBegin(s, group_size, index);
  shape[concat_axis] *= group_size;
  return shape;
}

namespace {

// The kernel of one DMA push per peer. `send_block(j)` is the block of my
// input bound for position j, `output_of(j)` member j's output (a
// StatusOr), `recv_block(out, src)` where position `src`'s block lands in
// `out`:
//   step 1: push block j into member j's output, starting with the next
//           member so that not everyone targets position 0 first;
//   step 2: my own block, copied here while the sends travel;
//   step 3: the n-1 blocks for me (all the same size), then my sends.
template <typename SendBlock, typename OutputOf, typename RecvBlock>
absl::Status PushBlocks(const collectives_internal::Group& g,
                        const ArrayRef& output, SendBlock send_block,
                        OutputOf output_of, RecvBlock recv_block) {
  const int n = g.size(), r = g.index;
  MESHDMA_ASSIGN_OR_RETURN(
      Semaphore send_sem,
      AllocateSemaphore(SemaphoreType::kDma, "all_to_all send"));
  MESHDMA_ASSIGN_OR_RETURN(
      Semaphore recv_sem,
      AllocateSemaphore(SemaphoreType::kDma, "all_to_all recv"));
  // Step 1.
  std::vector<AsyncCopyDescriptor> sends;
  for (int i = 1; i < n; ++i) {
    const int j = (r + i) % n;
    const ArrayRef src = send_block(j);
    if (src.num_elements() == 0) continue;
    MESHDMA_ASSIGN_OR_RETURN(const ArrayRef out_j, output_of(j));
    sends.push_back(collectives_internal::RemoteCopy(
        src, recv_block(out_j, r), send_sem, recv_sem, g.members[j]));
    MESHDMA_RETURN_IF_ERROR(sends.back().start());
  }
  // Step 2.
  collectives_internal::LocalCopy(send_block(r), recv_block(output, r));
  // Step 3.
  const ArrayRef mine = recv_block(output, r);
  if (mine.num_elements() > 0) {
    for (int i = 1; i < n; ++i) {
      const int src = g.PositionAt(-i);
      const ArrayRef slot = recv_block(output, src);
      MESHDMA_RETURN_IF_ERROR(
          collectives_internal::RemoteCopy(slot, slot, send_sem, recv_sem,
                                           g.members[src])
              .wait_recv());
    }
  }
  for (AsyncCopyDescriptor& s : sends) MESHDMA_RETURN_IF_ERROR(s.wait_send());
  return absl::OkStatus();
}

}  // namespace

absl::Status all_to_all(const ArrayRef& input, const ArrayRef& output,
                        const std::vector<std::string>& axes, int split_axis,
                        int concat_axis, const CollectiveOptions& options) {
  constexpr absl::string_view kName = "all_to_all";
  using collectives_internal::Channel;
  constexpr collectives_internal::CollectiveKind kKind =
      collectives_internal::CollectiveKind::kAllToAll;
  // The call's axes in its signature; wraps (never overflows) for axes
  // outside the operands, which the checks below reject.
  const int aux = static_cast<int>(static_cast<unsigned>(split_axis) * 8u +
                                   static_cast<unsigned>(concat_axis));
  // Small, both split along dimension 0 and contiguous: one exchange over the
  // group's channel, no entry barrier (blocks are byte ranges).
  //   step 1: push block j of my input to member j (Channel::Exchange);
  //   step 2: copy each arrived block, and my own, into my output.
  // Block j of my input is rows [PartBegin(j), PartBegin(j + 1)), in bytes
  // `layout.Part(j)` (computed by the first call, remembered with it); member
  // j's block lands at rows [j * part(r), (j + 1) * part(r)) of my output.
  auto over_channel =
      [&](Channel* channel, const collectives_internal::Group& g,
          int64_t signature, const collectives_internal::CallLayout& layout) {
        const int n = g.size(), r = g.index;
        auto send_bytes = [&](int j) { return layout.Part(input.data(), j); };
        const int64_t block_bytes = send_bytes(r).second;
        if (RaceCheckingEnabled()) AnnotateRead(input, "channel staging read");
        return channel->ExchangeWithAll(
            kName, g, signature, send_bytes, block_bytes,
            [&](const std::byte* rows) {
              if (RaceCheckingEnabled()) {
                AnnotateWrite(output, "channel output write");
              }
              if (block_bytes == 0) return;
              for (int j = 0; j < n; ++j) {
                std::memcpy(
                    output.data() + j * block_bytes,
                    j == r ? send_bytes(r).first : channel->Payload(rows, j),
                    block_bytes);
              }
            });
      };
  // The same small call as before on this device: straight to its channel
  // (as the first call did, with the heap padded for the largest output).
  if (const collectives_internal::ChannelCall* call =
          collectives_internal::FindChannelCall(kKind, aux, input, output, axes,
                                                options);
      call != nullptr && input.data() != output.data()) {
    MESHDMA_RETURN_IF_ERROR(collectives_internal::PadToLargestOutput(
        output, call->layout.largest_output_bytes));
    return over_channel(call->channel, call->group, call->signature,
                        call->layout);
  }
  MESHDMA_ASSIGN_OR_RETURN(collectives_internal::Group g,
                           collectives_internal::ResolveGroup(kName, axes));
  MESHDMA_RETURN_IF_ERROR(
      collectives_internal::CheckArguments(kName, g, options));
  const int n = g.size();
  const int r = g.index;
  const int rank = input.rank();
  if (split_axis < 0 || split_axis >= rank || concat_axis < 0 ||
      concat_axis >= rank) {
    return collectives_internal::CollectiveError(
        kName, g,
        absl::StrCat("split_axis ", split_axis, " and concat_axis ",
                     concat_axis, " must be dimensions of input ",
                     input.ToString()));
  }
  // The output shape this device needs: its part of the split axis, the
  // concatenation axis n times longer (AllToAllOutputShape, on the stack).
  const int64_t split_size = input.dim(split_axis);
  auto part = [&](int j) {
    return collectives_internal::PartBegin(split_size, n, j + 1) -
           collectives_internal::PartBegin(split_size, n, j);
  };
  std::array<int64_t, kMaxRank> want_dims;
  std::copy(input.shape().begin(), input.shape().end(), want_dims.begin());
  want_dims[split_axis] = part(r);
  want_dims[concat_axis] *= n;
  const std::span<const int64_t> want(want_dims.data(), rank);
  if (output.dtype() != input.dtype() ||
      !std::equal(want.begin(), want.end(), output.shape().begin(),
                  output.shape().end())) {
    return collectives_internal::CollectiveError(
        kName, g,
        absl::StrCat("output is ", output.ToString(), " but input ",
                     input.ToString(), " split along ", split_axis,
                     " and concatenated along ", concat_axis, " over ", n,
                     " devices needs ", DTypeName(input.dtype()), "[",
                     absl::StrJoin(want, ","), "] here"));
  }
  if (!output.is_contiguous()) {
    return collectives_internal::CollectiveError(
        kName, g, absl::StrCat("output ", output.ToString(), " is strided"));
  }
  if (n > 1 && input.data() == output.data() && input.num_elements() > 0) {
    return collectives_internal::CollectiveError(
        kName, g,
        "input and output are the same buffer; all_to_all does not "
        "run in place");
  }
  MESHDMA_RETURN_IF_ERROR(
      collectives_internal::RequireSymmetric(kName, g, "output", output));
  // Members' outputs differ by up to one row of `split_axis`: what follows
  // must not depend on which.
  // Bytes of one index of the split axis of the input.
  const int64_t split_row_bytes =
      split_size == 0 ? 0 : input.size_bytes() / split_size;
  int64_t largest_part = 0;
  for (int j = 0; j < n; ++j) largest_part = std::max(largest_part, part(j));
  MESHDMA_RETURN_IF_ERROR(collectives_internal::PadToLargestOutput(
      output, largest_part * split_row_bytes * n));
  // Block of `input` bound for position j.
  auto send_block = [&](int j) {
    const int64_t b = collectives_internal::PartBegin(split_size, n, j);
    return *input.Slice(
        split_axis, b,
        collectives_internal::PartBegin(split_size, n, j + 1) - b);
  };
  // Where position `src` puts its block in the output of position `dst`.
  auto recv_block = [&](const ArrayRef& out_of_dst, int src) {
    const int64_t c = out_of_dst.dim(concat_axis) / n;
    return *out_of_dst.Slice(concat_axis, src * c, c);
  };
  // Member j's output, described by the same heap offset with j's shape.
  auto output_of = [&](int j) -> absl::StatusOr<ArrayRef> {
    const std::vector<int64_t> shape_j =
        AllToAllOutputShape(input.shape(), split_axis, concat_axis, n, j);
    return ArrayRef::Symmetric(output.data(), output.heap_offset(),
                               output.dtype(), shape_j);
  };
  // The plan (collectives/internal/plan.h), then its path.
  collectives_internal::LiveTopology topology;
  collectives_internal::CallShape call{kKind, kName, options,
                                       input.size_bytes(),
                                       largest_part * split_row_bytes};
  call.blocks_are_ranges =
      split_axis == 0 && concat_axis == 0 && input.is_contiguous();
  MESHDMA_ASSIGN_OR_RETURN(const collectives_internal::Plan plan,
                           collectives_internal::PlanPath(call, g, topology));
  if (plan.path == collectives_internal::Path::kChannel) {
    MESHDMA_ASSIGN_OR_RETURN(Channel * channel, Channel::For(g));
    const int64_t signature = collectives_internal::CallSignature(
        kKind, input.dtype(), input.num_elements(), aux, &output);
    collectives_internal::CallLayout layout =
        collectives_internal::CallLayout::Split(
            split_size, n, split_row_bytes, largest_part * split_row_bytes * n);
    MESHDMA_RETURN_IF_ERROR(over_channel(channel, g, signature, layout));
    collectives_internal::RememberChannelCall(kKind, aux, input, output, g,
                                              channel, signature, options, {},
                                              std::move(layout));
    return absl::OkStatus();
  }
  return collectives_internal::RunCollectiveKernel(
      kName, g, options.check_peers,
      collectives_internal::WithPlan(
          collectives_internal::CallSignature(
              collectives_internal::CollectiveKind::kAllToAll, input.dtype(),
              input.num_elements(), split_axis * 8 + concat_axis, &output),
          collectives_internal::PlanBits(plan.algorithm, options, false)),
      [&]() -> absl::Status {
        if (plan.algorithm == CollectiveAlgorithm::kHierarchical) {
          return collectives_internal::HierarchicalAllToAll(
              g, plan.layout, input, output, split_axis, concat_axis);
        }
        if (plan.algorithm == CollectiveAlgorithm::kDirect) {
          return collectives_internal::DirectAllToAll(g, input, send_block,
                                                      output_of, recv_block);
        }
        return PushBlocks(g, output, send_block, output_of, recv_block);
      });
}

}  // namespace meshdma
