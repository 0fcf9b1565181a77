// The DMA ring's receive slots (ring_slots.h).
#include "meshdma/collectives/fused/ring_slots.h"

#include <functional>
#include <memory>
#include <vector>

#include "meshdma/dma/symmetric_memory.h"

namespace meshdma::fused_internal {
namespace {

// This device thread's persistent slots in the current Run, by capacity in
// elements; forgotten when the Run ends (the memory is released then).
struct SlotCache {
  std::vector<ArrayRef> slots;
};
thread_local SlotCache* t_slots = nullptr;

absl::StatusOr<SlotCache*> Cache() {
  if (t_slots != nullptr) return t_slots;
  MESHDMA_RETURN_IF_ERROR(AtRunEnd([] {
    delete t_slots;
    t_slots = nullptr;
  }));
  t_slots = new SlotCache;
  return t_slots;
}

}  // namespace

absl::StatusOr<ArrayRef> RingSlots(const collectives_internal::Group& ring,
                                   std::span<const int64_t> shape) {
  if (ring.mesh == nullptr || ring.size() != ring.mesh->size()) {
    return AllocateSymmetric(DType::kF32, shape);
  }
  int64_t elements = 1;
  for (int64_t d : shape) elements *= d;
  // Step 1: the first persistent allocation that holds them (every member
  // has made the same ones, in the same order).
  MESHDMA_ASSIGN_OR_RETURN(SlotCache * cache, Cache());
  for (const ArrayRef& held : cache->slots) {
    if (held.num_elements() >= elements) {
      MESHDMA_ASSIGN_OR_RETURN(ArrayRef flat, held.Slice(0, 0, elements));
      return flat.Reshape(shape);
    }
  }
  // Step 2: else a new one, kept for the rest of the Run.
  MESHDMA_ASSIGN_OR_RETURN(
      ArrayRef fresh,
      AllocatePersistent(DType::kF32, std::vector<int64_t>{elements},
                         "DMA ring slots"));
  cache->slots.push_back(fresh);
  return fresh.Reshape(shape);
}

}  // namespace meshdma::fused_internal
