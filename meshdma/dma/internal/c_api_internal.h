// Helpers the C ABI's other translation units share (the collectives' entry
// points live in meshdma/collectives/c_api.cc, above this layer).
#ifndef MESHDMA_DMA_INTERNAL_C_API_INTERNAL_H_
#define MESHDMA_DMA_INTERNAL_C_API_INTERNAL_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/dma/c_api.h"

namespace meshdma::dma_internal {

// The ArrayRef of a C view (`operand` names it in errors); resolves
// MESHDMA_HEAP_OFFSET_RESOLVE against the calling device's heap.
absl::StatusOr<ArrayRef> ViewToArrayRef(const meshdma_view* v,
                                        const char* operand);
// 0 for OK, else the status code, with the message kept for
// meshdma_last_error().
int ReportStatus(const absl::Status& s);

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_INTERNAL_C_API_INTERNAL_H_
