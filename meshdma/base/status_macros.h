// Status propagation helpers. Abseil 20220623 ships no status macros, so
// meshdma keeps this one small header (the shape tensorstore uses).
//
// `MESHDMA_RETURN_IF_ERROR(expr)` returns the status of `expr` when it is not
// OK, appending a "-> file:line" frame to the message so that an error that
// travels up several layers reads as a short stack trace (NCCL's NCCLCHECK).
// `MESHDMA_ASSIGN_OR_RETURN(lhs, expr)` does the same for `StatusOr<T>`.
#ifndef MESHDMA_BASE_STATUS_MACROS_H_
#define MESHDMA_BASE_STATUS_MACROS_H_

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace meshdma::base_internal {

// Returns `status` with " -> file:line" appended to its message.
absl::Status AddCallSite(const absl::Status& status, std::string_view file,
                         int line);

}  // namespace meshdma::base_internal

#define MESHDMA_STATUS_CONCAT_INNER_(a, b) a##b
#define MESHDMA_STATUS_CONCAT_(a, b) MESHDMA_STATUS_CONCAT_INNER_(a, b)

#define MESHDMA_RETURN_IF_ERROR(expr)                                         \
  do {                                                                        \
    ::absl::Status meshdma_status_ = (expr);                                  \
    if (!meshdma_status_.ok()) {                                              \
      return ::meshdma::base_internal::AddCallSite(meshdma_status_, __FILE__, \
                                                   __LINE__);                 \
    }                                                                         \
  } while (0)

#define MESHDMA_ASSIGN_OR_RETURN(lhs, expr) \
  MESHDMA_ASSIGN_OR_RETURN_IMPL_(           \
      MESHDMA_STATUS_CONCAT_(meshdma_statusor_, __LINE__), lhs, expr)

#define MESHDMA_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr)                   \
  auto statusor = (expr);                                                     \
  if (!statusor.ok()) {                                                       \
    return ::meshdma::base_internal::AddCallSite(statusor.status(), __FILE__, \
                                                 __LINE__);                   \
  }                                                                           \
  lhs = std::move(statusor).value()

#endif  // MESHDMA_BASE_STATUS_MACROS_H_
