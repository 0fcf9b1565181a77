#include "meshdma/dma/trace.h"

#include "meshdma/dma/internal/device.h"
#include "meshdma/dma/internal/runtime_impl.h"

namespace meshdma {

TraceSpan::TraceSpan(absl::string_view name) {
  dma_internal::Device* d = dma_internal::CurrentDevice();
  if (d == nullptr) return;
  if (Observer* obs = d->runtime()->observer()) {
    device_ = d->global_index();
    name_ = std::string(name);
    obs->OnSpanBegin(device_, name_);
  }
}

TraceSpan::~TraceSpan() {
  if (device_ < 0) return;
  if (dma_internal::Device* d = dma_internal::CurrentDevice()) {
    if (Observer* obs = d->runtime()->observer())
      obs->OnSpanEnd(device_, name_);
  }
}

}  // namespace meshdma
