// `vmap`: map a kernel over a batch axis (Pallas's batching rule for
// `pallas_call`, as in the Pallas talk's batched matmul, MHA and MQA).
//
// `vmap(kernel, in_axes, out_axes)` returns a kernel that takes operands with
// one more dimension: input i carries its batch at dimension `in_axes[i]`, or
// is shared by every batch element when `in_axes[i]` is `std::nullopt`
// (`None`: MQA's K and V). Outputs carry the batch at `out_axes[i]` (default
// 0 for each). The batched call prepends a grid axis over the batch; a mapped
// operand's block spec gains a squeezed dimension indexed by it, a shared
// operand's index map ignores it. The body is unchanged and sees the same
// block shapes; `program_id(a)` still counts the kernel's own grid axes. vmap
// composes (batched MHA is vmap of vmap). All mapped operands must agree on
// the batch size; ANY operands cannot be mapped.
#ifndef MESHDMA_KERNELS_VMAP_H_
#define MESHDMA_KERNELS_VMAP_H_

#include <optional>
#include <vector>

#include "meshdma/kernels/pallas_call.h"

namespace meshdma {

inline Kernel vmap(Kernel kernel, std::vector<std::optional<int>> in_axes,
                   std::vector<int> out_axes = {}) {
  kernel.params.batching.push_back(
      BatchAxes{std::move(in_axes), std::move(out_axes)});
  return kernel;
}

}  // namespace meshdma

#endif  // MESHDMA_KERNELS_VMAP_H_
