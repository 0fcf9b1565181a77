// Row softmax of an f32 [rows, cols] array (the Pallas talk's softmax): each
// grid point loads `block_rows` whole rows into VMEM, subtracts the row max,
// exponentiates and divides by the row sum. Rows need not divide evenly.
#ifndef MESHDMA_KERNELS_OPS_SOFTMAX_H_
#define MESHDMA_KERNELS_OPS_SOFTMAX_H_

#include "absl/status/status.h"
#include "meshdma/dma/array_ref.h"

namespace meshdma {

struct SoftmaxOptions {
  int64_t block_rows = 64;
};

absl::Status Softmax(const ArrayRef& x, const ArrayRef& out,
                     const SoftmaxOptions& options = {});

}  // namespace meshdma

#endif  // MESHDMA_KERNELS_OPS_SOFTMAX_H_
