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

CallNote* CallNoteOf(const RuntimeImpl& runtime, int global_device) {
  std::byte* base = runtime.HeapBase(global_device);
  return base == nullptr ? nullptr
                         : reinterpret_cast<CallNote*>(base + kCallNoteOffset);
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
  if (check == nullptr || device == nullptr) return false;
  absl::Status s = check();
  if (s.ok()) return false;
  runtime.Abort(absl::StrCat(device->Name(), " failed: ", s.message()));
  return true;
}

}  // namespace meshdma::dma_internal
