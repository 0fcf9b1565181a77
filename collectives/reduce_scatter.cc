#include "collectives/reduce_scatter.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "collectives/all_reduce.h"
#include "collectives/internal/common.h"
#include "collectives/internal/reduce.h"
#include "collectives/internal/ring.h"
#include "dma/async_copy.h"
#include "dma/kernel.h"
#include "dma/symmetric_memory.h"

namespace meshdma {
namespace {

using internal::Group;

// One-shot reduce-scatter:
//   step 1: push segment j of my input into row r of member j's scratch
//           [n, max segment];
//   step 2: wait for the n-1 rows of my segment and for my pushes to be read;
//   step 3: reduce the rows in group order (my own segment of `in` is row r).
template <typename T>
absl::Status OneShot(const Group& g, ReduceOp op, const ArrayRef& in,
                     const ArrayRef& out) {
  const int n = g.size();
  const int r = g.rank;
  const int64_t count = in.num_elements();
  const int64_t max_seg = (count + n - 1) / n;
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef scratch,
                           AllocateSymmetric(in.dtype(), {n, max_seg}));
  MESHDMA_ASSIGN_OR_RETURN(
      Semaphore send_sem,
      AllocateSemaphore(SemaphoreType::kDma, "one-shot send"));
  MESHDMA_ASSIGN_OR_RETURN(
      Semaphore recv_sem,
      AllocateSemaphore(SemaphoreType::kDma, "one-shot recv"));
  const auto [my_begin, my_len] = ScatterSegment(count, n, r);
  std::vector<AsyncCopyDescriptor> sends;
  for (int j = 1; j < n; ++j) {
    const int pos = (r + j) % n;
    const auto [b, len] = ScatterSegment(count, n, pos);
    if (len == 0) continue;
    ArrayRef row = internal::Range(*scratch.At(r), 0, len);
    sends.push_back(internal::RemoteCopy(internal::Range(in, b, len), row,
                                         send_sem, recv_sem, g.Member(pos)));
    MESHDMA_RETURN_IF_ERROR(sends.back().start());
  }
  if (my_len > 0) {
    for (int j = 1; j < n; ++j) {
      ArrayRef row = internal::Range(*scratch.At(r), 0, my_len);
      MESHDMA_RETURN_IF_ERROR(
          internal::RemoteCopy(row, row, send_sem, recv_sem, g.Peer(-j))
              .wait_recv());
    }
  }
  for (AsyncCopyDescriptor& s : sends) MESHDMA_RETURN_IF_ERROR(s.wait_send());
  std::vector<const T*> sources(n);
  for (int i = 0; i < n; ++i) {
    sources[i] = i == r ? in.data_as<const T>() + my_begin
                        : scratch.data_as<const T>() + i * max_seg;
  }
  internal::ReduceMany<T>(op, sources.data(), n, out.data_as<T>(), my_len);
  return absl::OkStatus();
}

}  // namespace

absl::Status reduce_scatter(ReduceOp op, const ArrayRef& input,
                            const ArrayRef& output,
                            const std::vector<std::string>& axes,
                            const CollectiveOptions& options) {
  const absl::string_view name = op == ReduceOp::kSum   ? "psum_scatter"
                                 : op == ReduceOp::kMax ? "reduce_scatter(max)"
                                 : op == ReduceOp::kMin
                                     ? "reduce_scatter(min)"
                                     : "reduce_scatter(mean)";
  MESHDMA_ASSIGN_OR_RETURN(Group g, internal::ResolveGroup(name, axes));
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef in,
                           internal::Flatten(input, name, "input", g));
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef out,
                           internal::Flatten(output, name, "output", g));
  const int n = g.size();
  const auto [my_begin, my_len] = ScatterSegment(in.num_elements(), n, g.rank);
  if (in.dtype() != out.dtype() || out.num_elements() != my_len) {
    return internal::CollectiveError(
        name, g,
        absl::StrCat("output ", output.ToString(), " must hold ", my_len, " ",
                     DTypeName(in.dtype()), " elements (segment [", my_begin,
                     ", ", my_begin + my_len, ") of input ", input.ToString(),
                     " split ", n, " ways)"));
  }
  if (options.chunk_bytes < 1 || options.num_buffers < 1) {
    return internal::CollectiveError(
        name, g,
        absl::StrCat("chunk_bytes (", options.chunk_bytes,
                     ") and num_buffers (", options.num_buffers,
                     ") must be >= 1"));
  }
  const CollectiveAlgorithm algorithm =
      ChooseAllReduceAlgorithm(in.size_bytes(), n, options);
  absl::Status status;
  auto run = [&](auto zero) {
    using T = decltype(zero);
    status = RunKernel(internal::KernelFor(name), [&]() -> absl::Status {
      if (options.check_peers) {
        MESHDMA_RETURN_IF_ERROR(internal::CheckRingNeighbour(
            name, g, internal::CollectiveKind::kReduceScatter, in.dtype(),
            in.num_elements(), static_cast<int>(op), nullptr));
      }
      if (n == 1) {
        if (in.data() != out.data()) {
          std::memmove(out.data(), in.data(), in.size_bytes());
        }
        return absl::OkStatus();
      }
      switch (algorithm) {
        case CollectiveAlgorithm::kOneShot:
          return OneShot<T>(g, op, in, out);
        case CollectiveAlgorithm::kBidirectionalRing:
          return internal::RingReduceScatter<T>(g, op, in, nullptr, out, 2,
                                                options.chunk_bytes,
                                                options.num_buffers);
        default:
          return internal::RingReduceScatter<T>(g, op, in, nullptr, out, 1,
                                                options.chunk_bytes,
                                                options.num_buffers);
      }
    });
  };
  if (!internal::DispatchReducible(in.dtype(), run)) {
    return internal::CollectiveError(
        name, g,
        absl::StrCat("cannot reduce ", DTypeName(in.dtype()), " (input ",
                     input.ToString(),
                     "); reductions take f32, f64, bf16, f16, i32 or i64"));
  }
  return status;
}

}  // namespace meshdma
