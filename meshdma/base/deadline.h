// Deadlines on the monotonic clock, for waits that must end after a timeout.
// Wall-clock time can jump (NTP, an operator), and wall-clock nanoseconds plus
// a huge timeout overflow; a `Deadline` does neither: an infinite timeout
// never expires, and finite ones saturate instead of wrapping.
#ifndef MESHDMA_BASE_DEADLINE_H_
#define MESHDMA_BASE_DEADLINE_H_

#include <time.h>

#include <chrono>
#include <cstdint>
#include <limits>

#include "absl/time/time.h"

namespace meshdma::base_internal {

// Nanoseconds on the monotonic clock (an arbitrary, fixed epoch).
inline int64_t MonotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// MonotonicNanos at the resolution of the kernel's tick (a few ms), for
// timestamps kept for diagnostics on hot paths: it costs a few nanoseconds
// where a precise reading costs tens on a virtual machine. Same epoch.
inline int64_t CoarseMonotonicNanos() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

class Deadline {
 public:
  // `timeout` from now; absl::InfiniteDuration() (or any timeout too large
  // to represent) never expires. A non-positive timeout has already expired.
  static Deadline After(absl::Duration timeout) {
    return Deadline(MonotonicNanos(), timeout);
  }
  // `timeout` after `start_ns` (a MonotonicNanos() value).
  Deadline(int64_t start_ns, absl::Duration timeout) {
    const int64_t ns = absl::ToInt64Nanoseconds(timeout);  // Saturates.
    if (timeout == absl::InfiniteDuration() ||
        __builtin_add_overflow(start_ns, ns, &at_ns_)) {
      at_ns_ = kNever;
    }
  }

  bool Expired() const {
    return at_ns_ != kNever && MonotonicNanos() >= at_ns_;
  }
  // Nanoseconds left (0 when expired; int64 max when it never expires).
  int64_t RemainingNanos() const {
    if (at_ns_ == kNever) return kNever;
    const int64_t left = at_ns_ - MonotonicNanos();
    return left > 0 ? left : 0;
  }

 private:
  static constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  int64_t at_ns_ = kNever;
};

}  // namespace meshdma::base_internal

#endif  // MESHDMA_BASE_DEADLINE_H_
