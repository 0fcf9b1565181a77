// The timeline tracer behind `MESHDMA_TRACE` (meshdma/dma/trace.h): an
// observer that records every event as Chrome trace-event JSON.
#ifndef MESHDMA_DMA_INTERNAL_TIMELINE_TRACER_H_
#define MESHDMA_DMA_INTERNAL_TIMELINE_TRACER_H_

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "meshdma/dma/observer.h"
#include "meshdma/topology/process_group.h"

namespace meshdma::dma_internal {

// Records events and forwards every callback to `next` (the user's observer,
// or null).
class TimelineTracer : public Observer {
 public:
  TimelineTracer(int rank, Observer* next);

  void OnKernelBegin(int device, absl::string_view kernel) override;
  void OnKernelEnd(int device, absl::string_view kernel) override;
  void OnDmaStart(const DmaEvent& dma) override;
  void OnDmaComplete(const DmaEvent& dma) override;
  void OnSignal(int device, int target_device, Semaphore sem,
                int64_t inc) override;
  void OnWaitBegin(int device, WaitKind kind, Semaphore sem, int64_t value,
                   int64_t observed) override;
  void OnWaitEnd(int device, WaitKind kind, Semaphore sem, int64_t value,
                 bool ok) override;
  void OnSpanBegin(int device, absl::string_view name) override;
  void OnSpanEnd(int device, absl::string_view name) override;

  // Writes the trace to `path`. Collective over `processes`: rank 0 writes
  // every process's events.
  absl::Status Write(const std::string& path, ProcessGroup& processes) const;

 private:
  void Add(std::string event_json);
  double NowUs() const;

  const int rank_;
  Observer* const next_;
  const int64_t start_ns_;
  mutable std::mutex mu_;
  std::vector<std::string> events_;
};

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_INTERNAL_TIMELINE_TRACER_H_
