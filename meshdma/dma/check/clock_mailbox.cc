#include "meshdma/dma/check/clock_mailbox.h"

#include <atomic>
#include <cstring>
#include <new>
#include <thread>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "meshdma/base/deadline.h"

namespace meshdma::dma_internal {
namespace {

// Slots per mailbox (a power of two).
constexpr uint64_t kSlots = 4096;
constexpr size_t kLine = 64;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "the mailbox's counters are shared between processes");
static_assert(std::is_trivially_copyable_v<ViewLayout>);

}  // namespace

// The producers' claim counter and the consumer's position, a line each.
struct ClockMailbox::Header {
  alignas(kLine) std::atomic<uint64_t> claimed;
  alignas(
      kLine) std::atomic<uint64_t> drained;  // Advanced after each is handled.
};

// A slot: `seq` is pos + 1 once the message posted at `pos` is complete, and
// pos + kSlots once it has been drained (the slot is free for that claim).
// The clock's 2·n components follow.
struct ClockMailbox::SlotHead {
  std::atomic<uint64_t> seq;
  int32_t target;
  int32_t issuer;
  int64_t sem_offset;
  uint32_t dma_seq;
  uint32_t has_layout;
  int64_t dst_offset;
  int64_t elem_bytes;
  ViewLayout dst_layout;
};

size_t ClockMailbox::BytesFor(int num_devices) {
  const size_t slot =
      RoundUp(sizeof(SlotHead) + 8 * size_t(num_devices), kLine);
  return RoundUp(sizeof(Header) + kSlots * slot, 4096);
}

ClockMailbox::ClockMailbox(std::byte* region, int num_devices)
    : region_(region),
      num_devices_(num_devices),
      slot_bytes_(RoundUp(sizeof(SlotHead) + 8 * size_t(num_devices), kLine)) {}

ClockMailbox::SlotHead* ClockMailbox::slot(uint64_t pos) const {
  return reinterpret_cast<SlotHead*>(region_ + sizeof(Header) +
                                     (pos & (kSlots - 1)) * slot_bytes_);
}

void ClockMailbox::Format() {
  auto* h = new (region_) Header;
  h->claimed.store(0, std::memory_order_relaxed);
  h->drained.store(0, std::memory_order_relaxed);
  for (uint64_t i = 0; i < kSlots; ++i) {
    auto* s = new (slot(i)) SlotHead;
    s->seq.store(i, std::memory_order_relaxed);
  }
  std::atomic_thread_fence(std::memory_order_release);
}

absl::Status ClockMailbox::Post(const ClockMessage& m, int64_t patience_ns) {
  auto* h = reinterpret_cast<Header*>(region_);
  int64_t full_since = 0;
  uint64_t pos = h->claimed.load(std::memory_order_relaxed);
  SlotHead* s = nullptr;
  for (;;) {
    s = slot(pos);
    const uint64_t seq = s->seq.load(std::memory_order_acquire);
    const int64_t diff = static_cast<int64_t>(seq - pos);
    if (diff == 0) {
      if (h->claimed.compare_exchange_weak(pos, pos + 1,
                                           std::memory_order_relaxed)) {
        break;
      }
    } else if (diff < 0) {  // Full: the owner has not drained this slot.
      const int64_t now = base_internal::MonotonicNanos();
      if (full_since == 0) full_since = now;
      if (now - full_since > patience_ns) {
        return absl::UnavailableError(
            absl::StrCat("checked mode: the clock mailbox of device ", m.target,
                         "'s process stayed full; a clock was dropped"));
      }
      std::this_thread::yield();
      pos = h->claimed.load(std::memory_order_relaxed);
    } else {
      pos = h->claimed.load(std::memory_order_relaxed);
    }
  }
  s->target = m.target;
  s->issuer = m.issuer;
  s->sem_offset = m.sem_offset;
  s->dma_seq = m.dma_seq;
  s->has_layout = m.has_layout ? 1 : 0;
  s->dst_offset = m.dst_offset;
  s->elem_bytes = m.elem_bytes;
  s->dst_layout = m.dst_layout;
  const size_t comps =
      std::min(m.clock.size(), size_t(2) * size_t(num_devices_));
  std::memcpy(reinterpret_cast<std::byte*>(s) + sizeof(SlotHead),
              m.clock.data(), comps * sizeof(uint32_t));
  s->seq.store(pos + 1, std::memory_order_release);
  return absl::OkStatus();
}

bool ClockMailbox::Empty() const {
  auto* h = reinterpret_cast<const Header*>(region_);
  return h->claimed.load(std::memory_order_acquire) ==
         h->drained.load(std::memory_order_acquire);
}

absl::Status ClockMailbox::Drain(
    const std::function<void(const ClockMessage&)>& fn, int64_t patience_ns) {
  auto* h = reinterpret_cast<Header*>(region_);
  const uint64_t end = h->claimed.load(std::memory_order_acquire);
  ClockMessage m;
  m.clock.resize(2 * size_t(num_devices_));
  for (uint64_t pos = h->drained.load(std::memory_order_relaxed); pos != end;
       ++pos) {
    SlotHead* s = slot(pos);
    // Claimed before `end` was read: its producer is filling it now.
    const int64_t start = base_internal::MonotonicNanos();
    while (s->seq.load(std::memory_order_acquire) != pos + 1) {
      if (base_internal::MonotonicNanos() - start > patience_ns) {
        return absl::UnavailableError(
            "checked mode: a peer process stopped while posting a clock");
      }
      std::this_thread::yield();
    }
    m.target = s->target;
    m.issuer = s->issuer;
    m.sem_offset = s->sem_offset;
    m.dma_seq = s->dma_seq;
    m.has_layout = s->has_layout != 0;
    m.dst_offset = s->dst_offset;
    m.elem_bytes = s->elem_bytes;
    m.dst_layout = s->dst_layout;
    std::memcpy(m.clock.data(),
                reinterpret_cast<const std::byte*>(s) + sizeof(SlotHead),
                m.clock.size() * sizeof(uint32_t));
    s->seq.store(pos + kSlots, std::memory_order_release);
    fn(m);
    h->drained.store(pos + 1, std::memory_order_release);
  }
  return absl::OkStatus();
}

}  // namespace meshdma::dma_internal
