// The DMAs a device started that have not completed: what a closing scope
// drains and what hang reports list. The device's thread adds them;
// transports and the copy engine remove them from any thread.
#ifndef MESHDMA_DMA_INTERNAL_INFLIGHT_DMAS_H_
#define MESHDMA_DMA_INTERNAL_INFLIGHT_DMAS_H_

#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "meshdma/dma/transport/transport.h"

namespace meshdma::dma_internal {

class InflightDmas {
 public:
  void Add(DmaOp* op);
  // Removes `op` if listed.
  void Remove(const DmaOp* op);
  // The DMAs listed that were started at scope depth >= `min_depth`.
  size_t Count(int min_depth) const;
  // Those DMAs, "#12 to device 3 (4096 bytes, shm, recv_sem @14336), ...",
  // with `transport_to(device)` naming the path; "none" when there are none.
  std::string Describe(
      int min_depth,
      absl::FunctionRef<absl::string_view(int)> transport_to) const;

 private:
  mutable std::mutex mu_;
  std::vector<DmaOp*> ops_;
};

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_INTERNAL_INFLIGHT_DMAS_H_
