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
#include "meshdma/collectives/internal/reduce.h"
#include "meshdma/collectives/internal/ring.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/check.h"
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

CollectiveAlgorithm ChooseAllReduceAlgorithm(int64_t bytes, int group_size,
                                             const CollectiveOptions& options,
                                             absl::string_view collective,
                                             int even_hosts, bool direct) {
  const bool requested = options.algorithm != CollectiveAlgorithm::kAuto;
  const CollectiveAlgorithm flat_ring =
      group_size <= 2 ? CollectiveAlgorithm::kRing
                      : CollectiveAlgorithm::kBidirectionalRing;
  CollectiveAlgorithm chosen = options.algorithm;
  if (!requested) {
    chosen = CollectiveAlgorithm::kOneShot;
    if (bytes > options.one_shot_max_bytes) {
      chosen = direct           ? CollectiveAlgorithm::kDirect
               : even_hosts > 1 ? CollectiveAlgorithm::kHierarchical
                                : flat_ring;
    }
  } else if (chosen == CollectiveAlgorithm::kHierarchical && even_hosts <= 1) {
    chosen = flat_ring;  // One host, or hosts with different counts.
  } else if (chosen == CollectiveAlgorithm::kDirect && !direct) {
    chosen = flat_ring;  // Another host, checked mode, or a private input.
  }
  // MESHDMA_DEBUG=INFO: each choice once per process.
  MESHDMA_LOG_ONCE(
      kInfo, kLogCollectives,
      absl::StrCat(collective, " ", group_size, " ",
                   CollectiveAlgorithmName(chosen), requested, " ", even_hosts,
                   direct),
      collective, " on ", group_size, " devices",
      even_hosts > 1 ? absl::StrCat(" (hierarchical over ", even_hosts,
                                    " hosts", direct ? ", addressable)" : ")")
                     : std::string(direct ? " (addressable)" : ""),
      ": ", CollectiveAlgorithmName(chosen),
      requested ? absl::StrCat(" (", CollectiveAlgorithmName(options.algorithm),
                               " requested)")
                : absl::StrCat(" (auto; ", bytes, " bytes, one_shot up to ",
                               options.one_shot_max_bytes, ")"));
  return chosen;
}

namespace {

using collectives_internal::Group;
using collectives_internal::Range;

// One-shot all-reduce:
//   step 0: when checked, signal the call's signature to the next member
//           (`SendSignature`); after step 1, compare the previous member's
//           with mine (`ReceiveSignature`), so that a member making another
//           call (another collective, size or type) is an error at once;
//   step 1: stage a 64-byte header (the call's signature, see
//           `CallSignature`) followed by my input in one local buffer,
//           and push it into row r of every peer's scratch [n, 64 + bytes]:
//           one DMA per peer, all on one send and one receive semaphore;
//   step 2: wait until n-1 rows have arrived and my pushes have been read;
//   step 3: compare every peer's header with mine;
//   step 4: reduce the n rows in group order (my input stands for row r).
// The signal of step 0 travels while the rows do, so the check costs no
// extra round trip; the headers of step 3 compare every member, not just the
// ring neighbours.
template <typename T>
absl::Status OneShot(absl::string_view name, const Group& g, ReduceOp op,
                     const ArrayRef& in, const ArrayRef& out, int64_t signature,
                     bool check) {
  const int n = g.size();
  const int r = g.index;
  const int64_t count = in.num_elements();
  const int64_t header = check ? collectives_internal::kOneShotHeaderBytes : 0;
  const int64_t row_bytes = header + in.size_bytes();
  if (row_bytes == 0) return absl::OkStatus();
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
                           AllocateSymmetric(DType::kU8, {n, row_bytes}));
  // Step 1. The staging row lives in scratch row r, which no peer writes.
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef my_row, scratch.At(r));
  std::byte* staged = my_row.data();
  if (RaceCheckingEnabled()) {
    AnnotateRead(in, "one-shot staging read");
    AnnotateWrite(my_row, "one-shot staging write");
  }
  if (check) std::memcpy(staged, &signature, sizeof(signature));
  std::memcpy(staged + header, in.data(), in.size_bytes());
  for (int j = 1; j < n; ++j) {
    MESHDMA_RETURN_IF_ERROR(collectives_internal::RemoteCopy(
                                my_row, my_row, send_sem, recv_sem, g.Peer(j))
                                .start());
  }
  // Step 0's second half: a peer making another call may never send the
  // bytes waited for below.
  if (check) {
    MESHDMA_RETURN_IF_ERROR(
        collectives_internal::ReceiveSignature(name, g, signature));
  }
  // Step 2: one wait for all rows, one for all sends (the counts add up).
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef rows, scratch.Slice(0, 0, n - 1));
  AsyncCopyDescriptor all = collectives_internal::RemoteCopy(
      rows, rows, send_sem, recv_sem, g.Peer(1));
  MESHDMA_RETURN_IF_ERROR(all.wait_recv());
  MESHDMA_RETURN_IF_ERROR(all.wait_send());
  // Steps 3 and 4.
  const std::byte* base = scratch.data();
  if (check) {
    MESHDMA_RETURN_IF_ERROR(collectives_internal::CheckRowSignatures(
        name, g, signature, base, row_bytes));
  }
  collectives_internal::AnnotateReduceRows(
      g, in, [&](int i) { return *scratch.At(i); }, out);
  collectives_internal::ReduceRows<T>(op, g, in.data_as<const T>(), base,
                                      row_bytes, header, out.data_as<T>(),
                                      count);
  return absl::OkStatus();
}

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
      host_channel, name, host, phase_op, signature,
      [&](int) { return std::pair(in.data(), in.size_bytes()); },
      in.data_as<const T>(), out));
  if (RaceCheckingEnabled()) AnnotateRead(out, "channel staging read");
  MESHDMA_RETURN_IF_ERROR(collectives_internal::ChannelReduce<T>(
      lane.channel, name, lane.group, phase_op, signature,
      [&](int) { return std::pair(out.data(), out.size_bytes()); },
      out.data_as<const T>(), out));
  if (op == ReduceOp::kMean) {
    collectives_internal::DivideArray(out.data_as<T>(), out.num_elements(),
                                      host.size() * lane.group.size());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status all_reduce(ReduceOp op, const ArrayRef& input,
                        const ArrayRef& output,
                        const std::vector<std::string>& axes,
                        const CollectiveOptions& options) {
  const absl::string_view name = op == ReduceOp::kSum    ? "psum"
                                 : op == ReduceOp::kMax  ? "pmax"
                                 : op == ReduceOp::kMin  ? "pmin"
                                 : op == ReduceOp::kMean ? "pmean"
                                                         : "all_reduce";
  using collectives_internal::ChannelCall;
  const collectives_internal::CollectiveKind kind =
      collectives_internal::CollectiveKind::kAllReduce;
  // The same small call as before on this device: straight to its channel.
  if (const ChannelCall* call = collectives_internal::FindChannelCall(
          kind, static_cast<int>(op), input, output, axes, options)) {
    absl::Status status;
    collectives_internal::DispatchReducible(input.dtype(), [&](auto zero) {
      using T = decltype(zero);
      if (RaceCheckingEnabled()) AnnotateRead(input, "channel staging read");
      if (call->next.has_value()) {
        status = ChannelReduceByHosts<T>(name, call->group, call->channel,
                                         *call->next, op, input, output,
                                         call->signature);
        return;
      }
      status = collectives_internal::ChannelReduce<T>(
          call->channel, name, call->group, op, call->signature,
          [&](int) { return std::pair(input.data(), input.size_bytes()); },
          input.data_as<const T>(), output);
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
  if (in.dtype() != out.dtype() || in.num_elements() != out.num_elements()) {
    return collectives_internal::CollectiveError(
        name, g,
        absl::StrCat("input ", input.ToString(), " and output ",
                     output.ToString(),
                     " must have the same dtype and element count"));
  }
  MESHDMA_RETURN_IF_ERROR(
      collectives_internal::RequireSymmetric(name, g, "output", output));
  collectives_internal::HostLayout layout;
  MESHDMA_ASSIGN_OR_RETURN(
      const int even_hosts,
      collectives_internal::EvenHostsFor(g, in.size_bytes(), options, &layout));
  // Peers in other processes cannot load a private input (ordinary memory)
  // in place. Where a single-copy step would read it (kDirect without
  // cross-memory attach, below;
  // kHierarchical's step inside a host, up to kHostDirectPrivateMaxBytes),
  // it is first copied into this device's own output, which is symmetric,
  // and peers read it there: one local copy instead of the rings' pipeline
  // (BENCHMARKS.md, "Reductions of a private input, single-copy"). Threads
  // of one process read it where it is, through boards (below).
  const ArrayRef readable =
      in.is_symmetric() || layout.hosts_are_processes ||
              in.size_bytes() > collectives_internal::kHostDirectPrivateMaxBytes
          ? in
          : out;
  MESHDMA_ASSIGN_OR_RETURN(
      const bool direct,
      collectives_internal::DirectApplies(g, in.size_bytes(), options));
  const CollectiveAlgorithm algorithm = ChooseAllReduceAlgorithm(
      in.size_bytes(), g.size(), options, name, even_hosts, direct);
  // The hierarchy's steps inside a host single-copy where they can be.
  bool host_direct = false;
  if (algorithm == CollectiveAlgorithm::kHierarchical) {
    MESHDMA_ASSIGN_OR_RETURN(host_direct, collectives_internal::HostDirect(
                                              name, g, layout, &readable));
  }
  // kDirect reads my own segment from `own`, the others' from `in`, or,
  // on threads of one process, every input where it is (through boards,
  // collectives/internal/direct.h): a private input needs no copy there;
  // so does the hierarchy's step inside a host that is one process. A
  // private input of processes of one host is read through boards too,
  // by cross-memory attach, where the launch uses it.
  const ArrayRef own = in;
  bool boards = collectives_internal::HostBoards(layout, host_direct);
  if (algorithm == CollectiveAlgorithm::kDirect) {
    MESHDMA_ASSIGN_OR_RETURN(boards,
                             collectives_internal::SharesAddressSpace(g));
    if (!boards && !in.is_symmetric()) {
      MESHDMA_ASSIGN_OR_RETURN(boards,
                               collectives_internal::ReadsPeerMemory(g));
    }
  }
  const bool private_input =
      !in.is_symmetric() && !boards &&
      (algorithm == CollectiveAlgorithm::kDirect || host_direct);
  if (private_input) {
    // Every member's previous call has finished with this output (its
    // `DirectFinish`, or its kernel's waits), and peers read it only after
    // the kernel's entry barrier, which orders this copy before them.
    // kDirect copies only the segments that peers read.
    MESHDMA_LOG_ONCE(kInfo, kLogCollectives,
                     absl::StrCat(name, " private input ", g.size()), name,
                     " on ", g.size(),
                     " devices: a private input is copied into the output, "
                     "and the call reads it there");
    const int64_t count = in.num_elements(), elem = DTypeSize(in.dtype());
    for (int j = 0; j < g.size(); ++j) {
      if (j == g.index && algorithm == CollectiveAlgorithm::kDirect) continue;
      const int64_t b = collectives_internal::PartBegin(count, g.size(), j);
      const int64_t e = collectives_internal::PartBegin(count, g.size(), j + 1);
      std::memmove(out.data() + b * elem, in.data() + b * elem, (e - b) * elem);
    }
    in = out;
  }
  absl::Status status;
  // kAuto's kHierarchical on hosts with several members each keeps its
  // kernel rather than the flat channel that TakesReduction would allow
  // between hosts: each of those rows crosses hosts, where the kernel sends
  // one part per lane (2 simulated hosts x 2 processes, 32-64 KiB:
  // BENCHMARKS.md).
  const bool channel =
      collectives_internal::Channel::TakesReduction(
          g, options, algorithm, in.size_bytes(),
          in.size_bytes() * (g.size() - 1)) &&
      !(algorithm == CollectiveAlgorithm::kHierarchical && layout.per_host > 1);
  // Over hosts' and lanes' channels: kAuto's small calls of a group spread
  // evenly over hosts with several members on each, when both channels take
  // the rows.
  bool by_hosts = false;
  if (channel && options.algorithm == CollectiveAlgorithm::kAuto &&
      g.size() > 2 && collectives_internal::SpansHosts(g)) {
    MESHDMA_ASSIGN_OR_RETURN(layout, collectives_internal::HostLayoutOf(g));
    by_hosts =
        layout.Applies() && layout.per_host > 1 &&
        collectives_internal::Channel::Fits(layout.Host(g), in.size_bytes()) &&
        collectives_internal::Channel::Fits(layout.Lane(g), in.size_bytes());
    if (by_hosts) {
      MESHDMA_LOG_ONCE(kInfo, kLogCollectives,
                       absl::StrCat(name, " by hosts ", g.size()), name, " on ",
                       g.size(), " devices over ", layout.num_hosts,
                       " hosts: each host's channel, then each lane's (auto; ",
                       in.size_bytes(), " bytes)");
    }
  }
  auto run = [&](auto zero) {
    using T = decltype(zero);
    if (by_hosts) {
      const Group host = layout.Host(g);
      collectives_internal::ChannelStage lane{layout.Lane(g)};
      absl::StatusOr<collectives_internal::Channel*> for_host =
          collectives_internal::Channel::For(host);
      absl::StatusOr<collectives_internal::Channel*> for_lane =
          for_host.ok() ? collectives_internal::Channel::For(lane.group)
                        : for_host;
      if (!for_lane.ok()) {
        status = for_lane.status();
        return;
      }
      lane.channel = *for_lane;
      const int64_t signature = collectives_internal::CallSignature(
          kind, in.dtype(), in.num_elements(), static_cast<int>(op), &output);
      if (RaceCheckingEnabled()) AnnotateRead(in, "channel staging read");
      status = ChannelReduceByHosts<T>(name, host, *for_host, lane, op, in, out,
                                       signature);
      if (status.ok()) {
        // Repeats go straight to both channels (FindChannelCall above).
        collectives_internal::RememberChannelCall(
            kind, static_cast<int>(op), input, output, host, *for_host,
            signature, options, {}, {}, std::move(lane));
      }
      return;
    }
    if (channel) {
      // Small: every member gets my whole input over the group's channel.
      auto for_group = collectives_internal::Channel::For(g);
      if (!for_group.ok()) {
        status = for_group.status();
        return;
      }
      const int64_t signature = collectives_internal::CallSignature(
          kind, in.dtype(), in.num_elements(), static_cast<int>(op), &output);
      if (RaceCheckingEnabled()) AnnotateRead(in, "channel staging read");
      status = collectives_internal::ChannelReduce<T>(
          *for_group, name, g, op, signature,
          [&](int) { return std::pair(in.data(), in.size_bytes()); },
          in.data_as<const T>(), out);
      if (status.ok()) {
        collectives_internal::RememberChannelCall(kind, static_cast<int>(op),
                                                  input, output, g, *for_group,
                                                  signature, options);
      }
      return;
    }
    status = collectives_internal::RunReductionKernel(
        name, g, options, algorithm,
        collectives_internal::CollectiveKind::kAllReduce, op, in, &output,
        (algorithm == CollectiveAlgorithm::kDirect || host_direct) && !boards,
        private_input, boards,
        [&](bool one_shot_check, const ArrayRef* board) -> absl::Status {
          if (g.size() == 1) {
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
                      collectives_internal::CollectiveKind::kAllReduce,
                      in.dtype(), in.num_elements(), static_cast<int>(op),
                      &output),
                  one_shot_check);
            case CollectiveAlgorithm::kHierarchical:
              return collectives_internal::HierarchicalAllReduce<T>(
                  g, layout, op, in, out, options, host_direct, board);
            case CollectiveAlgorithm::kDirect:
              return collectives_internal::DirectAllReduce<T>(g, op, own, in,
                                                              out, board);
            case CollectiveAlgorithm::kBidirectionalRing:
              return collectives_internal::RingAllReduce<T>(
                  g, op, in, out, 2, options.chunk_bytes, options.num_buffers);
            default:
              return collectives_internal::RingAllReduce<T>(
                  g, op, in, out, 1, options.chunk_bytes, options.num_buffers);
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
