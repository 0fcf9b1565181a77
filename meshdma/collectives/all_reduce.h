// All-reduce: `psum`, `pmax`, `pmin`, `pmean` over one or more mesh axes.
//
// Called SPMD from inside `Runtime::Run` by every device of the mesh (the
// kernel's entry barrier spans the mesh), each with its own `input`. Every
// device of a group (the devices whose coordinates differ only along `axes`;
// psum over "x" of a {host, x} mesh runs one ring per host) gets, in
// `output`, the element-wise reduction of the group's inputs. Every member
// gets the same bits.
//
// Operands: `input` and `output` are contiguous arrays of the same dtype and
// element count (shapes may differ); `output` must come from
// `AllocateSymmetric` (peers write into it) unless the group has one device;
// `input` may be any memory and may be `output` itself (in place). Element
// types f32, f64, bf16, f16, i32, i64; bf16 and f16 are combined in f32 and
// rounded once. Integer means truncate. Any element count works: segments of
// a ring are [count*i/n, count*(i+1)/n).
//
// Algorithms (CollectiveOptions::algorithm): kRing (reduce-scatter then
// all-gather, 2(n-1) steps, partial sums pipelined through bounded scratch),
// kBidirectionalRing (two counter-rotating rings on halves), kOneShot (each
// device pushes its input to all, reduces locally; for small messages),
// kHierarchical (groups spanning hosts: reduce-scatter inside each host,
// all-reduce among the hosts one lane per local device, all-gather inside each
// host), kDirect (one host: each device reduces its segment of every
// member's input in place and stores it into every output, one read and one
// write per byte; between processes a private input is first copied, the
// segments the peers read, into the caller's output, where they read them),
// and kAuto, which picks by size and hosts.
#ifndef MESHDMA_COLLECTIVES_ALL_REDUCE_H_
#define MESHDMA_COLLECTIVES_ALL_REDUCE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "meshdma/collectives/options.h"
#include "meshdma/dma/array_ref.h"

namespace meshdma {

absl::Status all_reduce(ReduceOp op, const ArrayRef& input,
                        const ArrayRef& output,
                        const std::vector<std::string>& axes,
                        const CollectiveOptions& options = {});

inline absl::Status psum(const ArrayRef& input, const ArrayRef& output,
                         const std::vector<std::string>& axes,
                         const CollectiveOptions& options = {}) {
  return all_reduce(ReduceOp::kSum, input, output, axes, options);
}
inline absl::Status pmax(const ArrayRef& input, const ArrayRef& output,
                         const std::vector<std::string>& axes,
                         const CollectiveOptions& options = {}) {
  return all_reduce(ReduceOp::kMax, input, output, axes, options);
}
inline absl::Status pmin(const ArrayRef& input, const ArrayRef& output,
                         const std::vector<std::string>& axes,
                         const CollectiveOptions& options = {}) {
  return all_reduce(ReduceOp::kMin, input, output, axes, options);
}
inline absl::Status pmean(const ArrayRef& input, const ArrayRef& output,
                          const std::vector<std::string>& axes,
                          const CollectiveOptions& options = {}) {
  return all_reduce(ReduceOp::kMean, input, output, axes, options);
}

// The algorithm `all_reduce` runs for `bytes` of input on `group_size`
// devices with `options` (logged once per choice under MESHDMA_DEBUG=INFO as
// `collective`'s). `even_hosts`: the hosts the group spans when each holds
// the same number of its devices, else 1. kHierarchical is chosen by kAuto
// above `one_shot_max_bytes` when `even_hosts` > 1; requested with
// `even_hosts` == 1 it falls back to the flat ring. `direct` says kDirect can
// run (every member addressable, checked mode off): auto
// picks it above `one_shot_max_bytes`; requested without it, the flat ring
// runs.
CollectiveAlgorithm ChooseAllReduceAlgorithm(
    int64_t bytes, int group_size, const CollectiveOptions& options,
    absl::string_view collective = "all_reduce", int even_hosts = 1,
    bool direct = false);

}  // namespace meshdma

#endif  // MESHDMA_COLLECTIVES_ALL_REDUCE_H_
