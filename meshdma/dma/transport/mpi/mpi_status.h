// The one conversion of an MPI return code into a Status.
#ifndef MESHDMA_DMA_TRANSPORT_MPI_MPI_STATUS_H_
#define MESHDMA_DMA_TRANSPORT_MPI_MPI_STATUS_H_

#include <mpi.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace meshdma::dma_internal {

// OK for MPI_SUCCESS, else Internal naming `call` and MPI's own message.
inline absl::Status MpiStatus(int code, absl::string_view call) {
  if (code == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(code, text, &len);
  return absl::InternalError(
      absl::StrCat(call, " failed: ", absl::string_view(text, len)));
}

}  // namespace meshdma::dma_internal

// Returns from the enclosing function with `MpiStatus` when `call` fails.
#define MESHDMA_MPI_CALL(call) \
  MESHDMA_RETURN_IF_ERROR(::meshdma::dma_internal::MpiStatus((call), #call))

#endif  // MESHDMA_DMA_TRANSPORT_MPI_MPI_STATUS_H_
