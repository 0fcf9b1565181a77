// Timeline traces: a Chrome trace-event JSON file (open it in Perfetto or
// chrome://tracing) with one track per device: kernels, user spans of compute
// (`TraceSpan`), every DMA from `start()` to completion, signals, and every
// semaphore wait with the semaphore, the value waited for and the count seen
// when the wait began. Under mpirun all processes' events are gathered into
// the one file rank 0 writes (a process per rank, a track per device).
//
// Enable with `RuntimeOptions::trace_path` or MESHDMA_TRACE=FILE; the file is
// written when the runtime shuts down. Tracing off costs one branch per verb.
//
// Memory is bounded: each process keeps its last MESHDMA_TRACE_MAX_EVENTS
// events (default 262144, older ones dropped first; a process peaks near
// 0.9 KB per kept event while the file is written), and
// the file's "otherData" says how many each rank dropped.
#ifndef MESHDMA_DMA_TRACE_H_
#define MESHDMA_DMA_TRACE_H_

#include <string>

#include "absl/strings/string_view.h"
#include "meshdma/base/config.h"

namespace meshdma {

inline constexpr const char* kTraceEnv = config::kTrace.name;
inline constexpr const char* kTraceMaxEventsEnv = config::kTraceMaxEvents.name;

// Marks the calling device's work between construction and destruction as a
// named span ("flash_attention block 3"). A no-op when nobody observes.
class TraceSpan {
 public:
  explicit TraceSpan(absl::string_view name);
  ~TraceSpan();
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  int device_ = -1;
  std::string name_;
};

}  // namespace meshdma

#endif  // MESHDMA_DMA_TRACE_H_
