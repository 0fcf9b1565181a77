// The receiving half shared by the one-shot algorithms (all-reduce and
// reduce-scatter): n rows of scratch, row i pushed by member i as a 64-byte
// header (the caller's call signature, when checked) followed by its data;
// this member's own contribution stays in place and stands for row `g.index`.
#ifndef MESHDMA_COLLECTIVES_INTERNAL_ONE_SHOT_H_
#define MESHDMA_COLLECTIVES_INTERNAL_ONE_SHOT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/internal/common.h"
#include "meshdma/collectives/internal/reduce.h"

namespace meshdma::collectives_internal {

inline constexpr int64_t kOneShotHeaderBytes = 64;

// Step 3: every peer's header must carry my signature.
inline absl::Status CheckRowSignatures(absl::string_view name, const Group& g,
                                       int64_t signature, const std::byte* rows,
                                       int64_t row_bytes) {
  for (int i = 0; i < g.size(); ++i) {
    if (i == g.index) continue;
    int64_t theirs;
    std::memcpy(&theirs, rows + i * row_bytes, sizeof(theirs));
    MESHDMA_RETURN_IF_ERROR(
        CompareSignatures(name, g, signature, theirs, g.members[i]));
  }
  return absl::OkStatus();
}

// Step 4: `out[k] = reduce_i row_i[k]` over the members in group order, with
// `mine` for my own row; `header` bytes precede each row's data.
template <typename T>
void ReduceRows(ReduceOp op, const Group& g, const T* mine,
                const std::byte* rows, int64_t row_bytes, int64_t header,
                T* out, int64_t count) {
  std::vector<const T*> sources(g.size());
  for (int i = 0; i < g.size(); ++i) {
    sources[i] =
        i == g.index
            ? mine
            : reinterpret_cast<const T*>(rows + i * row_bytes + header);
  }
  ReduceMany<T>(op, sources.data(), g.size(), out, count);
}

}  // namespace meshdma::collectives_internal

#endif  // MESHDMA_COLLECTIVES_INTERNAL_ONE_SHOT_H_
