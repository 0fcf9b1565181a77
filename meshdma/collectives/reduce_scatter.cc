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

}  // namespace

absl::Status reduce_scatter(ReduceOp op, const ArrayRef& input,
                            const ArrayRef& output,
                            const std::vector<std::string>& axes,
                            const CollectiveOptions& options) {
  const absl::string_view name = op == ReduceOp::kSum   ? "psum_scatter"
                                 : op == ReduceOp::kMax ? "reduce_scatter(max)"
                                 : op == ReduceOp::kMin ? "reduce_scatter(min)"
                                 : op == ReduceOp::kMean
                                     ? "reduce_scatter(mean)"
                                     : "reduce_scatter";
  constexpr collectives_internal::CollectiveKind kKind =
      collectives_internal::CollectiveKind::kReduceScatter;
  // Small: member j gets segment j of my input over the group's channel.
  auto over_channel = [&](auto zero, collectives_internal::Channel* channel,
                          const Group& g, int64_t signature,
                          const collectives_internal::CallLayout& layout) {
    using T = decltype(zero);
    if (RaceCheckingEnabled()) AnnotateRead(input, "channel staging read");
    return collectives_internal::ChannelReduce<T>(
        channel, name, g, op, signature,
        [&](int j) { return layout.Part(input.data(), j); },
        reinterpret_cast<const T*>(layout.Part(input.data(), g.index).first),
        output);
  };
  // The same small call as before on this device: straight to its channel,
  // with the segments and padding the first call computed.
  if (const collectives_internal::ChannelCall* call =
          collectives_internal::FindChannelCall(kKind, static_cast<int>(op),
                                                input, output, axes, options)) {
    MESHDMA_RETURN_IF_ERROR(collectives_internal::PadToLargestOutput(
        output, call->layout.largest_output_bytes));
    absl::Status status;
    collectives_internal::DispatchReducible(input.dtype(), [&](auto zero) {
      status = over_channel(zero, call->channel, call->group, call->signature,
                            call->layout);
    });
    return status;
  }
  MESHDMA_ASSIGN_OR_RETURN(Group g,
                           collectives_internal::ResolveGroup(name, axes));
  MESHDMA_RETURN_IF_ERROR(
      collectives_internal::CheckArguments(name, g, options, &op));
  MESHDMA_ASSIGN_OR_RETURN(
      ArrayRef in, collectives_internal::Flatten(input, name, "input", g));
  MESHDMA_ASSIGN_OR_RETURN(
      ArrayRef out, collectives_internal::Flatten(output, name, "output", g));
  const int n = g.size();
  const auto [segment_begin, segment_len] =
      ScatterSegment(in.num_elements(), n, g.index);
  // Plain copies: lambdas below capture them (C++20 structured bindings
  // cannot be captured by every compiler in use).
  const int64_t my_begin = segment_begin, my_len = segment_len;
  if (in.dtype() != out.dtype() || out.num_elements() != my_len) {
    return collectives_internal::CollectiveError(
        name, g,
        absl::StrCat("output ", output.ToString(), " must hold ", my_len, " ",
                     DTypeName(in.dtype()), " elements (segment [", my_begin,
                     ", ", my_begin + my_len, ") of input ", input.ToString(),
                     " split ", n, " ways)"));
  }
  // Segments differ by up to one element: what follows must not depend on
  // which this member holds.
  MESHDMA_RETURN_IF_ERROR(collectives_internal::PadToLargestOutput(
      output, (in.num_elements() + n - 1) / n *
                  static_cast<int64_t>(DTypeSize(in.dtype()))));
  collectives_internal::HostLayout layout;
  MESHDMA_ASSIGN_OR_RETURN(
      const int even_hosts,
      collectives_internal::EvenHostsFor(g, in.size_bytes(), options, &layout));
  MESHDMA_ASSIGN_OR_RETURN(bool direct, collectives_internal::DirectApplies(
                                            g, in.size_bytes(), options));
  // kDirect reads the inputs where they are on threads of one process, and
  // a private input of processes of one host where the launch uses
  // cross-memory attach (through boards, collectives/internal/direct.h);
  // elsewhere a private input is copied for the peers, up to
  // kDirectPrivateScatterMaxBytes.
  bool boards = false;
  if (direct) {
    MESHDMA_ASSIGN_OR_RETURN(boards,
                             collectives_internal::SharesAddressSpace(g));
    if (!boards && !in.is_symmetric()) {
      MESHDMA_ASSIGN_OR_RETURN(boards,
                               collectives_internal::ReadsPeerMemory(g));
    }
  }
  direct = direct && (in.is_symmetric() || boards ||
                      in.size_bytes() <=
                          collectives_internal::kDirectPrivateScatterMaxBytes);
  // kAuto with one member per host: the flat ring. kHierarchical would pack
  // the whole input into scratch for the same ring between hosts, and zero
  // that scratch at its exit; between hosts over TCP the ring took 0.61x
  // its time at 16 MiB and 0.80x at 4 MiB (`mpirun -np 2 --mca btl
  // self,tcp -x MESHDMA_FORCE_INTERHOST=1 meshdma-bench --collective
  // reduce_scatter -b 256K -e 16M -f 4`).
  const int hierarchy_hosts =
      options.algorithm == CollectiveAlgorithm::kAuto && layout.per_host == 1
          ? 1
          : even_hosts;
  const CollectiveAlgorithm algorithm = ChooseAllReduceAlgorithm(
      in.size_bytes(), n, options, name, hierarchy_hosts, direct);
  // The hierarchy's step inside a host single-copy where it can be (through
  // boards where each host is one process).
  bool host_direct = false;
  if (algorithm == CollectiveAlgorithm::kHierarchical) {
    MESHDMA_ASSIGN_OR_RETURN(
        host_direct, collectives_internal::HostDirect(name, g, layout, &in));
  }
  const bool direct_boards =
      algorithm == CollectiveAlgorithm::kDirect
          ? boards
          : collectives_internal::HostBoards(layout, host_direct);
  absl::Status status;
  const int64_t largest_segment = (in.num_elements() + n - 1) / n *
                                  static_cast<int64_t>(DTypeSize(in.dtype()));
  // In place too (`output` my segment of `input`): the channel reads the
  // other segments when it pushes them, and writes mine only after.
  const bool channel = collectives_internal::Channel::TakesReduction(
      g, options, algorithm, largest_segment,
      in.size_bytes() - largest_segment);
  auto run = [&](auto zero) {
    using T = decltype(zero);
    if (channel) {
      auto for_group = collectives_internal::Channel::For(g);
      if (!for_group.ok()) {
        status = for_group.status();
        return;
      }
      const int64_t signature = collectives_internal::CallSignature(
          kKind, in.dtype(), in.num_elements(), static_cast<int>(op), nullptr);
      collectives_internal::CallLayout layout =
          collectives_internal::CallLayout::Split(
              in.num_elements(), n, static_cast<int64_t>(DTypeSize(in.dtype())),
              largest_segment);
      status = over_channel(zero, *for_group, g, signature, layout);
      if (status.ok()) {
        collectives_internal::RememberChannelCall(
            kKind, static_cast<int>(op), input, output, g, *for_group,
            signature, options, {}, std::move(layout));
      }
      return;
    }
    status = collectives_internal::RunReductionKernel(
        name, g, options, algorithm,
        collectives_internal::CollectiveKind::kReduceScatter, op, in, nullptr,
        (algorithm == CollectiveAlgorithm::kDirect || host_direct) &&
            !direct_boards,
        /*private_input=*/algorithm == CollectiveAlgorithm::kDirect &&
            !direct_boards && !in.is_symmetric(),
        /*publish_input=*/direct_boards,
        [&](bool one_shot_check, const ArrayRef* board) -> absl::Status {
          if (n == 1) {
            if (in.data() != out.data()) {
              std::memmove(out.data(), in.data(), in.size_bytes());
            }
            return absl::OkStatus();
          }
          switch (algorithm) {
            case CollectiveAlgorithm::kOneShot:
              return OneShot<T>(
                  name, g, op, in, out,
                  collectives_internal::CallSignature(
                      collectives_internal::CollectiveKind::kReduceScatter,
                      in.dtype(), in.num_elements(), static_cast<int>(op),
                      nullptr),
                  one_shot_check);
            case CollectiveAlgorithm::kHierarchical:
              return collectives_internal::HierarchicalReduceScatter<T>(
                  g, layout, op, in, out, options, host_direct, board);
            case CollectiveAlgorithm::kDirect:
              return collectives_internal::DirectReduceScatter<T>(g, op, in,
                                                                  out, board);
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
  };
  if (!collectives_internal::DispatchReducible(in.dtype(), run)) {
    return collectives_internal::CollectiveError(
        name, g,
        absl::StrCat("cannot reduce ", DTypeName(in.dtype()), " (input ",
                     input.ToString(),
                     "); reductions take f32, f64, bf16, f16, i32 or i64"));
  }
  return status;
}

}  // namespace meshdma
