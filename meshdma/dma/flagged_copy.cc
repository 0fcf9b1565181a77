#include "meshdma/dma/flagged_copy.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/internal/device.h"

namespace meshdma {
namespace {

// The 8-byte word of payload bytes [4w, 4w + 4) and `flag`.
uint64_t Word(std::span<const std::byte> payload, int64_t w, uint32_t flag) {
  uint32_t low = 0;
  const int64_t at = w * kFlaggedPayloadBytesPerWord;
  const int64_t n = std::min<int64_t>(
      kFlaggedPayloadBytesPerWord, static_cast<int64_t>(payload.size()) - at);
  std::memcpy(&low, payload.data() + at, n);
  return static_cast<uint64_t>(flag) << 32 | low;
}

}  // namespace

absl::StatusOr<bool> flagged_copy_reaches(const DeviceId& peer,
                                          DeviceIdType type) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("flagged_copy_reaches"));
  MESHDMA_ASSIGN_OR_RETURN(
      int target, d->ResolveTarget(peer, type, "flagged_copy_reaches"));
  return d->FlaggedReaches(target);
}

absl::Status flagged_copy(std::span<const std::byte> payload,
                          const ArrayRef& dst, uint32_t flag,
                          const DeviceId& peer, DeviceIdType type) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("flagged_copy"));
  MESHDMA_ASSIGN_OR_RETURN(int target,
                           d->ResolveTarget(peer, type, "flagged_copy"));
  const int64_t words = FlaggedWords(static_cast<int64_t>(payload.size()));
  MESHDMA_ASSIGN_OR_RETURN(uint64_t * out,
                           d->FlaggedDestination(dst, words, flag, target));
  for (int64_t w = 0; w < words; ++w) {
    __atomic_store_n(out + w, Word(payload, w, flag), __ATOMIC_RELEASE);
  }
  return absl::OkStatus();
}

absl::Status flagged_wait(const ArrayRef& words, uint32_t flag,
                          std::span<std::byte> out) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("flagged_wait"));
  const int64_t n = FlaggedWords(static_cast<int64_t>(out.size()));
  MESHDMA_ASSIGN_OR_RETURN(uint64_t * in,
                           d->FlaggedDestination(words, n, flag, std::nullopt));
  MESHDMA_RETURN_IF_ERROR(d->WaitFlags(in, n, flag, words));
  for (int64_t w = 0; w < n; ++w) {
    const uint32_t low =
        static_cast<uint32_t>(__atomic_load_n(in + w, __ATOMIC_RELAXED));
    const int64_t at = w * kFlaggedPayloadBytesPerWord;
    std::memcpy(out.data() + at, &low,
                std::min<int64_t>(kFlaggedPayloadBytesPerWord,
                                  static_cast<int64_t>(out.size()) - at));
  }
  return absl::OkStatus();
}

}  // namespace meshdma
