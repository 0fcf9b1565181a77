// A device's call note: the collective call it made last, published where
// every device whose process maps its heap (devices of its process, and of
// the processes of its host) can read it, and sent to the processes of other
// hosts from slow waits and at the end of a Run, so that a wait that has been
// blocked for a while can tell a peer that makes another call, or has ended
// its Run, from one that is only slow (docs/semantics.md §6). The note sits
// in the reserved part of the heap (`kCallNoteOffset`), is written only by
// its device's thread, and read by others as a consistent snapshot (a
// sequence lock). What its words mean is the collectives' business: the
// runtime writes the Run's number and its end, and asks the check that the
// collectives set (`SetSlowWaitCheck`) from its slow waits.
#ifndef MESHDMA_DMA_INTERNAL_CALL_NOTE_H_
#define MESHDMA_DMA_INTERNAL_CALL_NOTE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <span>

#include "absl/status/status.h"
#include "meshdma/dma/transport/transport.h"

namespace meshdma::dma_internal {

class RuntimeImpl;

// One snapshot of a note.
struct CallNoteView {
  // Grows with every write within a Run (the heap's recovery zeroes it
  // between Runs): with `run`, which snapshot is later.
  uint64_t version = 0;
  uint64_t run = 0;    // `RuntimeImpl::run_generation()` of its Run.
  bool ended = false;  // The device's function returned (`EndRun`).
  uint64_t group = 0;  // The caller's words (`Publish`).
  int64_t call = 0;
  int64_t signature = 0;
  std::array<int64_t, 3> detail{};

  // As it crosses processes (Transport::SendCallNote), and back.
  std::array<int64_t, kCallNoteWords> ToWords() const;
  static CallNoteView FromWords(std::span<const int64_t, kCallNoteWords> words);
};

class CallNote {
 public:
  // By the owning device thread only.
  void BeginRun(uint64_t run);
  void EndRun();
  void Publish(uint64_t group, int64_t call, int64_t signature,
               const std::array<int64_t, 3>& detail) {
    const uint64_t v = version_.load(std::memory_order_relaxed);
    version_.store(v + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    group_.store(group, std::memory_order_relaxed);
    call_.store(call, std::memory_order_relaxed);
    signature_.store(signature, std::memory_order_relaxed);
    for (size_t i = 0; i < detail.size(); ++i) {
      detail_[i].store(detail[i], std::memory_order_relaxed);
    }
    version_.store(v + 2, std::memory_order_release);
  }
  // By any thread: the note, or nullopt while its owner writes it.
  std::optional<CallNoteView> Read() const;
  // Writes `view` as one snapshot: a copy of a note of another host
  // (`RuntimeImpl::OnCallNote`). One writer at a time.
  void Store(const CallNoteView& view);

 private:
  std::atomic<uint64_t> version_;  // Odd while the owner writes.
  std::atomic<uint64_t> run_;      // run * 2 + ended.
  std::atomic<uint64_t> group_;
  std::atomic<int64_t> call_;
  std::atomic<int64_t> signature_;
  std::atomic<int64_t> detail_[3];
};

// `global_device`'s note as this process maps it; for a device of another
// host, the copy of the latest note it sent here (`PushCallNote`), which
// may be older than the note itself; null where neither exists.
CallNote* CallNoteOf(const RuntimeImpl& runtime, int global_device);

// Sends the calling device's note to every process of another host (a
// few small messages; no-op on a launch of one host). Slow waits push it,
// and every device at the end of its Run.
void PushCallNote(RuntimeImpl& runtime, int global_device);

// The check a slow wait asks: an error when the calling device waits for
// something that a peer's note shows will never come. Set once by the
// collectives; null until then.
using SlowWaitCheck = absl::Status (*)();
void SetSlowWaitCheck(SlowWaitCheck check);

// Waits blocked for `kSlowWaitNanos` since `start_ns` push the device's
// note to other hosts and ask the check, then again every `kSlowWaitNanos`
// (`next_ns` keeps the time, 0 at first). True
// when it failed: the launch is then aborted with its error, which every
// wait reports. The fast path never gets here.
inline constexpr int64_t kSlowWaitNanos = 20'000'000;
bool SlowWaitFails(RuntimeImpl& runtime, int64_t start_ns, int64_t& next_ns);

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_INTERNAL_CALL_NOTE_H_
