// Explicit access annotations for checked mode (docs/checked_mode.md).
//
// Checked mode (`MESHDMA_CHECK=races` or `RuntimeOptions::check`) tracks
// every DMA's source read and destination write and the kernel layer's `Ref`
// loads and stores. Code that reads or writes device memory through raw
// pointers tells it so with these calls, made on the device's thread just
// before (or after) the access. Outside `Runtime::Run`, or with checked mode
// off, they do nothing and cost one branch.
#ifndef MESHDMA_DMA_CHECK_H_
#define MESHDMA_DMA_CHECK_H_

#include "absl/strings/string_view.h"
#include "meshdma/dma/array_ref.h"

namespace meshdma {

// `what` names the access in race reports ("annotated read" by default).
void AnnotateRead(const ArrayRef& ref, absl::string_view what = "");
void AnnotateWrite(const ArrayRef& ref, absl::string_view what = "");

// True when checked mode tracks races in the current Run on this thread.
bool RaceCheckingEnabled();

}  // namespace meshdma

#endif  // MESHDMA_DMA_CHECK_H_
