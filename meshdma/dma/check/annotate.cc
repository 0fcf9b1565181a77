#include "meshdma/dma/check.h"
#include "meshdma/dma/check/race_checker.h"
#include "meshdma/dma/internal/device.h"
#include "meshdma/dma/internal/runtime_impl.h"

namespace meshdma {
namespace {

void Annotate(const ArrayRef& ref, bool write, absl::string_view what,
              absl::string_view fallback) {
  dma_internal::Device* device = dma_internal::CurrentDevice();
  if (device == nullptr) return;
  dma_internal::RaceChecker* rc = device->runtime()->race_checker();
  if (rc == nullptr || ref.num_elements() == 0) return;
  rc->OnAccess(device->global_index(), device->kernel_name(), ref, write,
               what.empty() ? fallback : what);
}

}  // namespace

void AnnotateRead(const ArrayRef& ref, absl::string_view what) {
  Annotate(ref, /*write=*/false, what, "annotated read");
}

void AnnotateWrite(const ArrayRef& ref, absl::string_view what) {
  Annotate(ref, /*write=*/true, what, "annotated write");
}

bool RaceCheckingEnabled() {
  if (!dma_internal::RaceChecker::AnyLive()) return false;
  dma_internal::Device* device = dma_internal::CurrentDevice();
  return device != nullptr && device->runtime()->race_checker() != nullptr;
}

}  // namespace meshdma
