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
#include "meshdma/collectives/internal/plan_cache.h"
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

// A checked call: its operands and where its blocks lie. Members' outputs
// differ by up to one row of `split_axis`: nothing here depends on which.
struct Blocks {
  ArrayRef input, output;
  int split_axis = 0, concat_axis = 0, n = 1;
  int64_t split_size = 0;
  // Bytes of one index of the split axis of the input.
  int64_t split_row_bytes = 0;
  // Rows of the split axis in the largest block.
  int64_t largest_part = 0;

  int64_t Part(int j) const {
    return collectives_internal::PartBegin(split_size, n, j + 1) -
           collectives_internal::PartBegin(split_size, n, j);
  }
  int64_t LargestOutputBytes() const {
    return largest_part * split_row_bytes * n;
  }
  // Block of `input` bound for position j.
  ArrayRef Send(int j) const {
    return *input.Slice(
        split_axis, collectives_internal::PartBegin(split_size, n, j), Part(j));
  }
  // Where position `src` puts its block in the output of position `dst`.
  ArrayRef Recv(const ArrayRef& out_of_dst, int src) const {
    const int64_t c = out_of_dst.dim(concat_axis) / n;
    return *out_of_dst.Slice(concat_axis, src * c, c);
  }
  // Member j's output, described by the same heap offset with j's shape.
  absl::StatusOr<ArrayRef> OutputOf(int j) const {
    const std::vector<int64_t> shape_j =
        AllToAllOutputShape(input.shape(), split_axis, concat_axis, n, j);
    return ArrayRef::Symmetric(output.data(), output.heap_offset(),
                               output.dtype(), shape_j);
  }
};

// In place, blocks that are byte ranges at the same place in input and
// output (split and concatenated along one axis that the group divides, no
// larger dimension before it): kDirect swaps them pairwise
// (`DirectSwapBlocks`) instead of reading a staged copy of the input.
bool SwapsInPlace(const Blocks& b) {
  if (b.input.data() != b.output.data() || !b.input.is_contiguous() ||
      b.split_axis != b.concat_axis || b.split_size % b.n != 0) {
    return false;
  }
  for (int d = 0; d < b.split_axis; ++d) {
    if (b.input.dim(d) != 1) return false;
  }
  return true;
}

// The signature's `aux` of a call (common.h, in [0, 64)): the two axes, each
// below kMaxRank (6); an in-place swap marks its concat axis 7, so that
// members swapping and members storing from a separate input differ. Wraps,
// never overflows, for axes outside the operands, which CheckOperands
// rejects.
constexpr int kSwapAux = 7;
int AxesAux(int split_axis, int concat_axis) {
  return static_cast<int>(static_cast<unsigned>(split_axis) * 8u +
                          static_cast<unsigned>(concat_axis));
}

// Small, both axes 0, blocks byte ranges: one exchange over the group's
// channel, no entry barrier.
//   step 1: push block j of my input to member j (Channel::Exchange), which
//           has stored every block in its receiver's slot when it returns;
//   step 2: my own block, then each arrived block, into my output (so an
//           input that overlaps the output is read before it is written).
// Block j of my input is `layout.Part(j)` in bytes; member j's block lands
// at rows [j * part(r), (j + 1) * part(r)) of my output.
absl::Status OverChannel(collectives_internal::Channel* channel,
                         const collectives_internal::Group& g,
                         int64_t signature,
                         const collectives_internal::CallLayout& layout,
                         const ArrayRef& input, const ArrayRef& output) {
  const int n = g.size(), r = g.index;
  auto send_bytes = [&](int j) { return layout.Part(input.data(), j); };
  const int64_t block_bytes = send_bytes(r).second;
  return channel->ExchangeWithAll(
      "all_to_all", g, signature, &input, &output, send_bytes, block_bytes,
      [&](const std::byte* rows) {
        if (block_bytes == 0) return;
        std::memmove(output.data() + r * block_bytes, send_bytes(r).first,
                     block_bytes);
        for (int j = 0; j < n; ++j) {
          if (j == r) continue;
          std::memcpy(output.data() + j * block_bytes,
                      channel->Payload(rows, j), block_bytes);
        }
      });
}

// The operand checks; pads the heap to the end of the largest member's
// output (AllToAllOutputShape's contract).
absl::StatusOr<Blocks> CheckOperands(const collectives_internal::Group& g,
                                     const ArrayRef& input,
                                     const ArrayRef& output, int split_axis,
                                     int concat_axis) {
  constexpr absl::string_view kName = "all_to_all";
  const int rank = input.rank();
  if (split_axis < 0 || split_axis >= rank || concat_axis < 0 ||
      concat_axis >= rank) {
    return collectives_internal::CollectiveError(
        kName, g,
        absl::StrCat("split_axis ", split_axis, " and concat_axis ",
                     concat_axis, " must be dimensions of input ",
                     input.ToString()));
  }
  Blocks b{input,       output,   split_axis,
           concat_axis, g.size(), input.dim(split_axis)};
  // The output shape this device needs (AllToAllOutputShape, on the stack).
  std::array<int64_t, kMaxRank> want_dims;
  std::copy(input.shape().begin(), input.shape().end(), want_dims.begin());
  want_dims[split_axis] = b.Part(g.index);
  want_dims[concat_axis] *= b.n;
  const std::span<const int64_t> want(want_dims.data(), rank);
  if (output.dtype() != input.dtype() ||
      !std::equal(want.begin(), want.end(), output.shape().begin(),
                  output.shape().end())) {
    return collectives_internal::CollectiveError(
        kName, g,
        absl::StrCat("output is ", output.ToString(), " but input ",
                     input.ToString(), " split along ", split_axis,
                     " and concatenated along ", concat_axis, " over ", b.n,
                     " devices needs ", DTypeName(input.dtype()), "[",
                     absl::StrJoin(want, ","), "] here"));
  }
  if (!output.is_contiguous()) {
    return collectives_internal::CollectiveError(
        kName, g, absl::StrCat("output ", output.ToString(), " is strided"));
  }
  MESHDMA_RETURN_IF_ERROR(
      collectives_internal::RequireSymmetric(kName, g, "output", output));
  b.split_row_bytes = b.split_size == 0 ? 0 : input.size_bytes() / b.split_size;
  for (int j = 0; j < b.n; ++j) {
    b.largest_part = std::max(b.largest_part, b.Part(j));
  }
  MESHDMA_RETURN_IF_ERROR(
      collectives_internal::PadToLargestOutput(output, b.LargestOutputBytes()));
  return b;
}

// An input that overlaps the output, on a path that reads the input while
// peers write the output: a private copy of it in `storage`, read instead
// (before the kernel's entry barrier, so no peer has written yet).
absl::StatusOr<ArrayRef> StageInput(const ArrayRef& input,
                                    std::vector<std::byte>* storage) {
  storage->resize(std::max<int64_t>(input.size_bytes(), 1));
  MESHDMA_ASSIGN_OR_RETURN(
      ArrayRef staged,
      ArrayRef::FromPointer(storage->data(), input.dtype(), input.shape()));
  collectives_internal::LocalCopy(input, staged);
  return staged;
}

// The kernel of `plan`: hierarchical, direct stores (or swaps in place), or
// one DMA push per peer.
absl::Status RunKernelPath(const collectives_internal::Group& g,
                           const collectives_internal::Plan& plan, Blocks b,
                           const CollectiveOptions& options) {
  const bool direct = plan.algorithm == CollectiveAlgorithm::kDirect;
  const bool swap = direct && SwapsInPlace(b);
  std::vector<std::byte> storage;
  if (!swap && collectives_internal::ViewsOverlap(b.input, b.output)) {
    MESHDMA_ASSIGN_OR_RETURN(b.input, StageInput(b.input, &storage));
  }
  const int aux =
      swap ? b.split_axis * 8 + kSwapAux : AxesAux(b.split_axis, b.concat_axis);
  return collectives_internal::RunCollectiveKernel(
      "all_to_all", g, options.check_peers,
      collectives_internal::WithPlan(
          collectives_internal::CallSignature(
              collectives_internal::CollectiveKind::kAllToAll, b.input.dtype(),
              b.input.num_elements(), aux, &b.output),
          collectives_internal::PlanBits(plan.algorithm, options, false)),
      [&]() -> absl::Status {
        if (plan.algorithm == CollectiveAlgorithm::kHierarchical) {
          return collectives_internal::HierarchicalAllToAll(
              g, plan.layout, b.input, b.output, b.split_axis, b.concat_axis);
        }
        if (swap) {
          return collectives_internal::DirectSwapBlocks(
              g, b.output, b.output.size_bytes() / b.n);
        }
        auto send = [&](int j) { return b.Send(j); };
        auto output_of = [&](int j) { return b.OutputOf(j); };
        auto recv = [&](const ArrayRef& o, int src) { return b.Recv(o, src); };
        if (direct) {
          return collectives_internal::DirectAllToAll(g, b.input, send,
                                                      output_of, recv);
        }
        return PushBlocks(g, b.output, send, output_of, recv);
      });
}

}  // namespace

absl::Status all_to_all(const ArrayRef& input, const ArrayRef& output,
                        const std::vector<std::string>& axes, int split_axis,
                        int concat_axis, const CollectiveOptions& options) {
  constexpr absl::string_view kName = "all_to_all";
  using collectives_internal::Channel;
  constexpr collectives_internal::CollectiveKind kKind =
      collectives_internal::CollectiveKind::kAllToAll;
  const int aux = AxesAux(split_axis, concat_axis);
  // Step 1: the same small call as before on this device goes straight to
  // its channel (as the first call did, with the heap padded for the
  // largest output).
  if (const collectives_internal::PlannedCall* call =
          collectives_internal::FindPlannedCall(
              {kKind, aux, input, output, axes, options})) {
    MESHDMA_RETURN_IF_ERROR(collectives_internal::PadToLargestOutput(
        output, call->layout.largest_output_bytes));
    return OverChannel(call->channel, call->group, call->signature,
                       call->layout, input, output);
  }
  // Step 2: the group and the operands.
  MESHDMA_ASSIGN_OR_RETURN(collectives_internal::Group g,
                           collectives_internal::ResolveGroup(kName, axes));
  MESHDMA_RETURN_IF_ERROR(
      collectives_internal::CheckArguments(kName, g, options));
  MESHDMA_ASSIGN_OR_RETURN(
      const Blocks b, CheckOperands(g, input, output, split_axis, concat_axis));
  // Step 3: the plan (collectives/internal/plan.h).
  collectives_internal::LiveTopology topology;
  collectives_internal::CallShape shape{kKind, kName, options,
                                        input.size_bytes(),
                                        b.largest_part * b.split_row_bytes};
  shape.blocks_are_ranges =
      split_axis == 0 && concat_axis == 0 && input.is_contiguous();
  MESHDMA_ASSIGN_OR_RETURN(const collectives_internal::Plan plan,
                           collectives_internal::PlanPath(shape, g, topology));
  // Step 4: its path.
  if (plan.path != collectives_internal::Path::kChannel) {
    return RunKernelPath(g, plan, b, options);
  }
  MESHDMA_ASSIGN_OR_RETURN(Channel * channel, Channel::For(g));
  const int64_t signature = collectives_internal::CallSignature(
      kKind, input.dtype(), input.num_elements(), aux, &output);
  collectives_internal::CallLayout layout =
      collectives_internal::CallLayout::Split(
          b.split_size, b.n, b.split_row_bytes, b.LargestOutputBytes());
  MESHDMA_RETURN_IF_ERROR(
      OverChannel(channel, g, signature, layout, input, output));
  collectives_internal::CachePlannedCall(
      {kKind, aux, input, output, axes, options},
      {plan, g, signature, channel, std::move(layout)});
  return absl::OkStatus();
}

}  // namespace meshdma
