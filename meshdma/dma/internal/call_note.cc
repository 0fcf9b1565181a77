#include "meshdma/dma/internal/call_note.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "meshdma/base/deadline.h"
#include "meshdma/dma/internal/device.h"
#include "meshdma/dma/internal/runtime_impl.h"

namespace meshdma::dma_internal {
namespace {

std::atomic<SlowWaitCheck> g_slow_wait_check{nullptr};

}  // namespace

static_assert(sizeof(CallNote) <= kCallNoteBytes);

void CallNote::BeginRun(uint64_t run) {
  const uint64_t v = version_.load(std::memory_order_relaxed);
  version_.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  run_.store(run * 2, std::memory_order_relaxed);
  group_.store(0, std::memory_order_relaxed);
  call_.store(0, std::memory_order_relaxed);
  signature_.store(0, std::memory_order_relaxed);
  version_.store(v + 2, std::memory_order_release);
}

void CallNote::EndRun() {
  const uint64_t v = version_.load(std::memory_order_relaxed);
  version_.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  run_.store(run_.load(std::memory_order_relaxed) | 1,
             std::memory_order_relaxed);
  version_.store(v + 2, std::memory_order_release);
}

std::optional<CallNoteView> CallNote::Read() const {
  const uint64_t before = version_.load(std::memory_order_acquire);
  if (before & 1) return std::nullopt;
  CallNoteView view;
  view.version = before;
  const uint64_t run = run_.load(std::memory_order_relaxed);
  view.run = run / 2;
  view.ended = (run & 1) != 0;
  view.group = group_.load(std::memory_order_relaxed);
  view.call = call_.load(std::memory_order_relaxed);
  view.signature = signature_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < view.detail.size(); ++i) {
    view.detail[i] = detail_[i].load(std::memory_order_relaxed);
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  if (version_.load(std::memory_order_relaxed) != before) return std::nullopt;
  return view;
}

void CallNote::Store(const CallNoteView& view) {
  const uint64_t v = version_.load(std::memory_order_relaxed);
  version_.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  run_.store(view.run * 2 + (view.ended ? 1 : 0), std::memory_order_relaxed);
  group_.store(view.group, std::memory_order_relaxed);
  call_.store(view.call, std::memory_order_relaxed);
  signature_.store(view.signature, std::memory_order_relaxed);
  for (size_t i = 0; i < view.detail.size(); ++i) {
    detail_[i].store(view.detail[i], std::memory_order_relaxed);
  }
  version_.store(v + 2, std::memory_order_release);
}

std::array<int64_t, kCallNoteWords> CallNoteView::ToWords() const {
  return {static_cast<int64_t>(version),
          static_cast<int64_t>(run * 2 + (ended ? 1 : 0)),
          static_cast<int64_t>(group),
          call,
          signature,
          detail[0],
          detail[1],
          detail[2]};
}

CallNoteView CallNoteView::FromWords(
    std::span<const int64_t, kCallNoteWords> words) {
  CallNoteView view;
  view.version = static_cast<uint64_t>(words[0]);
  view.run = static_cast<uint64_t>(words[1]) / 2;
  view.ended = (words[1] & 1) != 0;
  view.group = static_cast<uint64_t>(words[2]);
  view.call = words[3];
  view.signature = words[4];
  view.detail = {words[5], words[6], words[7]};
  return view;
}

CallNote* CallNoteOf(const RuntimeImpl& runtime, int global_device) {
  std::byte* base = runtime.HeapBase(global_device);
  return base == nullptr ? runtime.MirroredCallNote(global_device)
                         : reinterpret_cast<CallNote*>(base + kCallNoteOffset);
}

void PushCallNote(RuntimeImpl& runtime, int global_device) {
  if (!runtime.RemotePeers()) return;
  const CallNote* note = CallNoteOf(runtime, global_device);
  // Only this device's thread writes its note: the read is consistent.
  const std::optional<CallNoteView> view =
      note != nullptr ? note->Read() : std::nullopt;
  if (view.has_value()) runtime.SendCallNote(global_device, view->ToWords());
}

void SetSlowWaitCheck(SlowWaitCheck check) {
  g_slow_wait_check.store(check, std::memory_order_release);
}

bool SlowWaitFails(RuntimeImpl& runtime, int64_t start_ns, int64_t& next_ns) {
  const int64_t now = base_internal::MonotonicNanos();
  if (now - start_ns < kSlowWaitNanos || now < next_ns) return false;
  next_ns = now + kSlowWaitNanos;
  const SlowWaitCheck check = g_slow_wait_check.load(std::memory_order_acquire);
  Device* device = CurrentDevice();
  if (device == nullptr) return false;
  PushCallNote(runtime, device->global_index());
  if (check == nullptr) return false;
  absl::Status s = check();
  if (s.ok()) return false;
  runtime.Abort(absl::StrCat(device->Name(), " failed: ", s.message()));
  return true;
}

}  // namespace meshdma::dma_internal
