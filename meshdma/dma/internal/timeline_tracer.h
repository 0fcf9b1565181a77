// The timeline tracer behind `MESHDMA_TRACE` (meshdma/dma/trace.h): an
// observer that records every event and writes Chrome trace-event JSON.
//
// What the file holds: a process per rank and a track per device, named
// "device G (rank R, core C)"; kernels, compute spans, waits (with the
// semaphore's user-given name), DMAs (an async slice from start to
// completion, and a short "dma start" slice on the issuing device), signals,
// a counter of the bytes each device has in flight, and flow arrows from each
// DMA start and each signal to the wait that consumed it.
//
// Flows. A semaphore's count is a queue: DMAs and signals add to it in the
// order they complete, waits take from its front. Rank 0 replays, per
// (device, semaphore), the arrivals in time order against the successful
// waits in time order and links each wait to the arrivals whose units it
// consumed. Send-side DMA semaphores are left out (their arrows would point
// back to the same device).
//
// Clocks. Every process stamps events with its own steady clock, counted from
// its own tracer's creation. At `Write` the processes align them to rank 0's:
// in each of several rounds every process reads its clock on entering and on
// leaving a barrier; since no process leaves before all have entered, rank
// r's offset to rank 0 lies in [enter_r - leave_0, leave_r - enter_0] in
// every round. The intersection over the rounds gives the offset (its
// middle) and a bound on its error (half its width), both recorded in the
// file's "otherData". A rank of rank 0's kernel boot (one machine, read
// from /proc/sys/kernel/random/boot_id) shares its steady clock: its offset
// is the difference of the tracers' starts, exact (error 0, and
// "clock_offset_exact" 1), which the barrier rounds bounded only to tens of
// microseconds on a loaded machine.
//
// Memory. Each process keeps at most `max_events` events, and as many
// arrivals and waits, dropping the oldest first (a ring): a long run keeps
// its last stretch, and the file says per rank how many were dropped
// ("dropped_events"). Flows whose arrival was dropped are not drawn.
#ifndef MESHDMA_DMA_INTERNAL_TIMELINE_TRACER_H_
#define MESHDMA_DMA_INTERNAL_TIMELINE_TRACER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshdma/dma/observer.h"
#include "meshdma/topology/launch.h"
#include "meshdma/topology/process_group.h"

namespace meshdma::dma_internal {

// Records events and forwards every callback to `next` (the user's observer,
// or null).
class TimelineTracer : public Observer {
 public:
  // Events kept per process unless MESHDMA_TRACE_MAX_EVENTS says otherwise.
  static constexpr int64_t kDefaultMaxEvents = int64_t{1} << 18;

  // `launch` names the tracks; it must outlive the tracer. Keeps at most
  // `max_events` (> 0) of each kind of record (see "Memory" above).
  TimelineTracer(const Launch& launch, Observer* next, int64_t max_events);

  // Collective: fails on every process, naming the path and MESHDMA_TRACE,
  // unless rank 0 can create `path`; so a trace that could not be written is
  // an error when the runtime starts rather than a message at exit.
  static absl::Status CheckWritable(const std::string& path,
                                    ProcessGroup& processes);

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

  // Writes the trace to `path`. Collective over `processes` (it aligns the
  // clocks and gathers the events): rank 0 writes every process's events.
  absl::Status Write(const std::string& path, ProcessGroup& processes) const;

 private:
  // An event whose JSON is text[0, split) + timestamp (microseconds) +
  // text[split, end).
  struct Event {
    int64_t ns;
    std::string text;
    uint32_t split;
  };
  // Units added to (device, semaphore): by a DMA (dma_id > 0) or a signal.
  struct Arrival {
    int64_t ns;        // When the units landed.
    int64_t start_ns;  // When the DMA started, or the signal was sent.
    int device;        // The receiving device.
    int64_t sem;       // Heap offset.
    int64_t amount;
    int from_device;
    uint64_t dma_id;  // 0 for a signal.
  };
  // A wait that took `value` units from (device, semaphore).
  struct Consumption {
    int64_t begin_ns, end_ns;
    int device;
    int64_t sem;
    int64_t value;
  };

  // Each rank's clock offset to rank 0's (ns), its error bound, and whether
  // it is exact (one boot, one steady clock).
  struct Clocks {
    std::vector<int64_t> offset, error;
    std::vector<int> exact;
  };

  int64_t NowNs() const;
  // Records one event on `device`'s track (`device` < 0: a counter of this
  // rank); `id` and `dur` are extra fields ("" for none), `args` a JSON
  // object or "".
  void AddEvent(int64_t ns, absl::string_view name, absl::string_view cat,
                char phase, int device, absl::string_view args = "",
                absl::string_view id = "", absl::string_view dur = "");
  // Adds `bytes` (negative: completed) to `device`'s bytes in flight and
  // records the count.
  void AddInFlight(int64_t ns, int device, int64_t bytes);
  // Write's steps: align the clocks (collective), format this process's
  // events and flow records on rank 0's clock, write the file (rank 0).
  absl::StatusOr<Clocks> AlignClocks(ProcessGroup& processes) const;
  void FormatLocal(int64_t shift, std::string* json, std::string* flows) const;
  absl::Status WriteFile(const std::string& path, const Clocks& clocks,
                         std::vector<std::string>& all_json,
                         const std::vector<std::string>& all_flows) const;
  // Rank 0's part of AlignClocks: each rank's offset from its rounds.
  static absl::Status OffsetsFromRounds(const std::vector<std::string>& rounds,
                                        Clocks* clocks);
  // Every rank's flow records (FormatLocal's), sorted by time.
  static void ParseFlows(const std::vector<std::string>& all_flows,
                         std::vector<Arrival>* arrivals,
                         std::vector<Consumption>* waits,
                         std::vector<int64_t>* dropped);
  // Replays every (device, semaphore) queue: each wait takes its units from
  // the earliest arrivals, and each share becomes a flow from the arrival's
  // sender to the waiting device, passed to `emit`.
  static void ReplayFlows(const Launch& launch,
                          const std::vector<Arrival>& arrivals,
                          const std::vector<Consumption>& waits,
                          const std::function<void(absl::string_view)>& emit);
  // Appends to a ring of at most `max_events_` records.
  template <typename T>
  void Keep(std::deque<T>& ring, T record);

  const Launch& launch_;
  const int rank_;
  Observer* const next_;
  const int64_t start_ns_;
  const int64_t max_events_;
  mutable std::mutex mu_;
  std::deque<Event> events_;
  std::deque<Arrival> arrivals_;
  std::deque<Consumption> consumptions_;
  int64_t dropped_ = 0;  // Records of any kind dropped from the rings.
  std::map<uint64_t, int64_t> dma_start_ns_;  // Of DMAs in flight, by id.
  std::map<int, int64_t> bytes_in_flight_;    // By issuing device.
  std::map<int, int64_t> wait_begin_ns_;      // Of the wait a device is in.
};

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_INTERNAL_TIMELINE_TRACER_H_
