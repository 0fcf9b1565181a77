// Elementwise vector addition, the Pallas quickstart's first kernel, on a
// 1-D grid of `block_size` blocks. Any length: the last block is partial and
// masked (the Triton `offsets < n` pattern of the seed).
#ifndef MESHDMA_KERNELS_OPS_ADD_VECTORS_H_
#define MESHDMA_KERNELS_OPS_ADD_VECTORS_H_

#include "absl/status/status.h"
#include "meshdma/dma/array_ref.h"

namespace meshdma {

struct AddVectorsOptions {
  int64_t block_size = 4096;
};

// out = x + y for 1-D f32 arrays of one length.
absl::Status AddVectors(const ArrayRef& x, const ArrayRef& y,
                        const ArrayRef& out,
                        const AddVectorsOptions& options = {});

}  // namespace meshdma

#endif  // MESHDMA_KERNELS_OPS_ADD_VECTORS_H_
