// `iota`: out[i] = i for a 1-D i32 or f32 array, one block per grid point;
// each block computes its offset from `program_id(0)`.
#ifndef MESHDMA_KERNELS_OPS_IOTA_H_
#define MESHDMA_KERNELS_OPS_IOTA_H_

#include "absl/status/status.h"
#include "meshdma/dma/array_ref.h"

namespace meshdma {

struct IotaOptions {
  int64_t block_size = 4096;
};

absl::Status Iota(const ArrayRef& out, const IotaOptions& options = {});

}  // namespace meshdma

#endif  // MESHDMA_KERNELS_OPS_IOTA_H_
