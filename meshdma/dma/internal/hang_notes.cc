#include "meshdma/dma/internal/hang_notes.h"

#include <algorithm>

#include "meshdma/base/deadline.h"

namespace meshdma::dma_internal {

HangNotes::HangNotes(int num_devices)
    : num_devices_(num_devices),
      last_sent_sem_(new std::atomic<int64_t>[num_devices]),
      last_sent_ns_(new std::atomic<int64_t>[num_devices]) {
  Reset();
}

void HangNotes::NoteSent(int target, int64_t sem_offset) {
  last_sent_sem_[target].store(sem_offset, std::memory_order_relaxed);
  last_sent_ns_[target].store(base_internal::CoarseMonotonicNanos(),
                              std::memory_order_relaxed);
}

void HangNotes::Block(absl::string_view verb, Semaphore sem, int64_t value,
                      std::string line) {
  std::lock_guard<std::mutex> lock(blocked_mu_);
  blocked_on_ = std::move(line);
  blocked_verb_ = verb;
  blocked_sem_ = sem;
  blocked_value_ = value;
}

void HangNotes::Unblock() {
  std::lock_guard<std::mutex> lock(blocked_mu_);
  blocked_on_.clear();
}

std::string HangNotes::BlockedOn() const {
  std::lock_guard<std::mutex> lock(blocked_mu_);
  return blocked_on_.empty() ? "running (not blocked)" : blocked_on_;
}

void HangNotes::Fill(DeviceHangState& s,
                     absl::FunctionRef<std::string(Semaphore)> name_of,
                     absl::FunctionRef<int64_t(Semaphore)> count_of) const {
  {
    std::lock_guard<std::mutex> lock(blocked_mu_);
    s.waiting = !blocked_on_.empty();
    if (s.waiting) {
      s.verb = std::string(blocked_verb_);
      std::replace(s.verb.begin(), s.verb.end(), ' ', '_');
      s.sem_offset = blocked_sem_.heap_offset();
      s.sem_name = name_of(blocked_sem_);
      s.expected = blocked_value_;
      s.current = count_of(blocked_sem_);
    }
  }
  s.last_sent_sem.resize(num_devices_);
  s.last_sent_ns.resize(num_devices_);
  for (int i = 0; i < num_devices_; ++i) {
    s.last_sent_sem[i] = last_sent_sem_[i].load(std::memory_order_relaxed);
    s.last_sent_ns[i] = last_sent_ns_[i].load(std::memory_order_relaxed);
  }
}

void HangNotes::Reset() {
  Unblock();
  for (int i = 0; i < num_devices_; ++i) {
    last_sent_sem_[i].store(-1, std::memory_order_relaxed);
    last_sent_ns_[i].store(0, std::memory_order_relaxed);
  }
}

}  // namespace meshdma::dma_internal
