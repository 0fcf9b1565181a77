// A device's loads and stores into peers' memory: where they reach, the
// addresses of peer views and flagged copies, and the waits that poll such
// memory (flags, counters).
#include "absl/strings/str_cat.h"
#include "meshdma/base/checked_math.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/internal/device.h"
#include "meshdma/dma/internal/runtime_impl.h"
#include "meshdma/dma/internal/wait_policy.h"

namespace meshdma::dma_internal {

bool Device::FlaggedReaches(int target_global) const {
  return runtime_->race_checker() == nullptr &&
         runtime_->HeapBase(target_global) != nullptr;
}

bool Device::SharesAddressSpace(int target_global) const {
  return runtime_->race_checker() == nullptr &&
         runtime_->IsLocalDevice(target_global);
}

absl::StatusOr<std::byte*> Device::PeerAddress(const ArrayRef& view,
                                               int target_global,
                                               absl::string_view verb) const {
  if (!view.is_symmetric()) {
    return absl::InvalidArgumentError(absl::StrCat(
        verb, " on ", Name(), ": ", view.ToString(),
        " is not in the symmetric heap; only symmetric memory has an address "
        "on a peer"));
  }
  MESHDMA_RETURN_IF_ERROR(CheckHeapView(view, "view", verb));
  if (target_global != global_index_ && !FlaggedReaches(target_global)) {
    return absl::FailedPreconditionError(absl::StrCat(
        verb, " on ", Name(), ": device ", target_global,
        " cannot be reached by loads and stores from this process (another "
        "host, or checked mode is on); use a DMA"));
  }
  return runtime_->HeapBase(target_global) + view.heap_offset();
}

absl::StatusOr<uint64_t*> Device::FlaggedDestination(
    const ArrayRef& words, int64_t count, uint32_t flag,
    std::optional<int> target_global) const {
  const char* verb = target_global ? "flagged_copy" : "flagged_wait";
  auto error = [&](auto&&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat(verb, " on ", Name(), ": ", parts...));
  };
  if (flag == 0) return error("flag 0 is reserved (memory starts as 0)");
  const std::optional<int64_t> bytes =
      base_internal::CheckedMul(count, int64_t{sizeof(uint64_t)});
  if (!words.is_symmetric() || !words.is_contiguous() ||
      words.data() != heap_.base() + words.heap_offset() ||
      words.heap_offset() % sizeof(uint64_t) != 0) {
    return error("buffer ", words.ToString(),
                 " is not a contiguous, 8-byte aligned view of this device's "
                 "symmetric heap");
  }
  if (!bytes.has_value() || *bytes > words.size_bytes() ||
      words.heap_offset() < kReservedHeapBytes ||
      words.heap_offset() + words.size_bytes() > heap_.bytes()) {
    return error("buffer ", words.ToString(), " holds ", words.size_bytes(),
                 " bytes, fewer than the ", count,
                 " flagged words the message needs");
  }
  const int target = target_global.value_or(global_index_);
  if (target != global_index_ && !FlaggedReaches(target)) {
    return absl::FailedPreconditionError(absl::StrCat(
        verb, " on ", Name(), ": device ", target,
        " cannot be reached by stores from this process (another host, or "
        "checked mode is on); use a DMA"));
  }
  return reinterpret_cast<uint64_t*>(runtime_->HeapBase(target) +
                                     words.heap_offset());
}

absl::Status Device::WaitFlags(const uint64_t* words, int64_t count,
                               uint32_t flag, const ArrayRef& view) {
  auto carries_flag = [&](int64_t w) {
    return static_cast<uint32_t>(__atomic_load_n(words + w, __ATOMIC_ACQUIRE) >>
                                 32) == flag;
  };
  // Often every word is already there: no clock is read then.
  bool all = true;
  for (int64_t k = count; k-- > 0 && all;) all = carries_flag(k);
  if (all) return absl::OkStatus();
  // The last word first: a sender stores in order, so polling it (and not
  // each word as it is written) keeps the cache lines from bouncing between
  // the two cores; the others are then checked, normally at once.
  for (int64_t k = 0; k < count; ++k) {
    const int64_t w = k == 0 ? count - 1 : k - 1;
    if (carries_flag(w)) continue;
    MESHDMA_RETURN_IF_ERROR(SpinUntil(
        *runtime_, "flagged_wait", [this] { return Name(); },
        [&view] { return view.ToString(); }, [&] { return carries_flag(w); },
        [&] {
          return absl::StrCat(
              "word ", w, " of ", view.ToString(), " carries flag ",
              __atomic_load_n(words + w, __ATOMIC_ACQUIRE) >> 32, ", expected ",
              flag);
        }));
  }
  return absl::OkStatus();
}

absl::Status Device::WaitCounter(const uint64_t* counter, uint64_t value,
                                 const ArrayRef& view) {
  auto reached = [&] {
    return __atomic_load_n(counter, __ATOMIC_ACQUIRE) >= value;
  };
  if (reached()) return absl::OkStatus();
  return SpinUntil(
      *runtime_, "counter_wait", [this] { return Name(); },
      [&view] { return view.ToString(); }, reached,
      [&] {
        return absl::StrCat(view.ToString(), " holds ",
                            __atomic_load_n(counter, __ATOMIC_ACQUIRE),
                            ", expected >= ", value);
      });
}

}  // namespace meshdma::dma_internal
