// Timeline traces: a Chrome trace-event JSON file (open it in Perfetto or
// chrome://tracing) with one track per device: kernels, user spans of compute
// (`TraceSpan`), every DMA from `start()` to completion, signals, and every
// semaphore wait with the semaphore, the value waited for and the count seen
// when the wait began. Under mpirun all processes' events are gathered into
// the one file rank 0 writes (a process per rank, a track per device).
//
// Enable with `RuntimeOptions::trace_path` or MESHDMA_TRACE=FILE; the file is
// written when the runtime shuts down. Tracing off costs one branch per verb.
#ifndef MESHDMA_DMA_TRACE_H_
#define MESHDMA_DMA_TRACE_H_

#include <mpi.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "dma/observer.h"

namespace meshdma {

inline constexpr char kTraceEnv[] = "MESHDMA_TRACE";

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

namespace internal {

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

  // Writes the trace to `path`: with `comm` != MPI_COMM_NULL, collective,
  // rank 0 writes everyone's events.
  absl::Status Write(const std::string& path, MPI_Comm comm) const;

 private:
  void Add(std::string event_json);
  double NowUs() const;

  const int rank_;
  Observer* const next_;
  const int64_t start_ns_;
  mutable std::mutex mu_;
  std::vector<std::string> events_;
};

}  // namespace internal
}  // namespace meshdma

#endif  // MESHDMA_DMA_TRACE_H_
