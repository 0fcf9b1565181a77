#include "meshdma/dma/flagged_copy.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/internal/device.h"

namespace meshdma {
namespace {

// Payload bytes [4w, 4w + 4) (zero-padded past `bytes`) as a 32-bit value.
uint32_t Low(const std::byte* payload, int64_t bytes, int64_t w) {
  uint32_t low = 0;
  const int64_t at = w * kFlaggedPayloadBytesPerWord;
  if (at + kFlaggedPayloadBytesPerWord <= bytes) {
    std::memcpy(&low, payload + at, sizeof(low));  // Inlined: a fixed size.
  } else {
    std::memcpy(&low, payload + at, bytes - at);
  }
  return low;
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

absl::StatusOr<FlaggedBuffer> FlaggedBuffer::ForCopy(const ArrayRef& dst,
                                                     const DeviceId& peer,
                                                     DeviceIdType type) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("flagged_copy"));
  MESHDMA_ASSIGN_OR_RETURN(int target,
                           d->ResolveTarget(peer, type, "flagged_copy"));
  FlaggedBuffer b;
  b.device_ = d;
  b.capacity_ = dst.size_bytes() / static_cast<int64_t>(sizeof(uint64_t));
  b.view_ = dst;
  MESHDMA_ASSIGN_OR_RETURN(
      b.words_, d->FlaggedDestination(dst, b.capacity_, /*flag=*/1, target));
  return b;
}

absl::StatusOr<FlaggedBuffer> FlaggedBuffer::ForWait(const ArrayRef& words) {
  MESHDMA_ASSIGN_OR_RETURN(dma_internal::Device * d,
                           dma_internal::RequireDevice("flagged_wait"));
  FlaggedBuffer b;
  b.device_ = d;
  b.capacity_ = words.size_bytes() / static_cast<int64_t>(sizeof(uint64_t));
  b.view_ = words;
  MESHDMA_ASSIGN_OR_RETURN(
      b.words_,
      d->FlaggedDestination(words, b.capacity_, /*flag=*/1, std::nullopt));
  return b;
}

absl::Status FlaggedBuffer::CheckMessage(int64_t payload_bytes, uint32_t flag,
                                         const char* verb,
                                         int64_t tail_bytes) const {
  const int64_t words = FlaggedWords(payload_bytes);
  const int64_t need =
      words * static_cast<int64_t>(sizeof(uint64_t)) + tail_bytes;
  if (flag != 0 && need <= capacity_ * static_cast<int64_t>(sizeof(uint64_t)) &&
      (tail_bytes == 0 || words > 0)) {
    return absl::OkStatus();
  }
  std::string why;
  if (flag == 0) {
    why = "flag 0 is reserved (memory starts as 0)";
  } else if (words == 0) {
    why = absl::StrCat("a tail of ", tail_bytes,
                       " bytes needs a head of at least 1 byte to publish it");
  } else {
    why = absl::StrCat(
        "buffer ", view_.ToString(), " holds ", view_.size_bytes(),
        " bytes, fewer than the ", need, " that ", words, " flagged words",
        tail_bytes > 0 ? absl::StrCat(" and a tail of ", tail_bytes, " bytes")
                       : std::string(),
        " need");
  }
  return absl::InvalidArgumentError(
      absl::StrCat(verb, " on ", device_->Name(), ": ", why));
}

absl::Status FlaggedBuffer::Copy(std::span<const std::byte> payload,
                                 uint32_t flag) const {
  return Copy(payload, {}, flag);
}

absl::Status FlaggedBuffer::Copy(std::span<const std::byte> head,
                                 std::span<const std::byte> tail,
                                 uint32_t flag) const {
  const int64_t bytes = static_cast<int64_t>(head.size());
  const int64_t words = FlaggedWords(bytes);
  MESHDMA_RETURN_IF_ERROR(CheckMessage(bytes, flag, "flagged_copy",
                                       static_cast<int64_t>(tail.size())));
  // The tail first, plainly: the head's release stores publish it.
  if (!tail.empty()) std::memcpy(words_ + words, tail.data(), tail.size());
  // Each word carries its own flag, so no order among the stores is needed
  // for correctness; x86 keeps them in order anyway, which lets the receiver
  // poll the last word first.
  const uint64_t high = static_cast<uint64_t>(flag) << 32;
  for (int64_t w = 0; w < words; ++w) {
    __atomic_store_n(words_ + w, high | Low(head.data(), bytes, w),
                     __ATOMIC_RELEASE);
  }
  return absl::OkStatus();
}

absl::Status FlaggedBuffer::Wait(uint32_t flag,
                                 std::span<std::byte> out) const {
  return Wait(flag, out, {});
}

absl::Status FlaggedBuffer::Wait(uint32_t flag, std::span<std::byte> head,
                                 std::span<std::byte> tail) const {
  const int64_t bytes = static_cast<int64_t>(head.size());
  MESHDMA_RETURN_IF_ERROR(CheckMessage(bytes, flag, "flagged_wait",
                                       static_cast<int64_t>(tail.size())));
  const int64_t n = FlaggedWords(bytes);
  MESHDMA_RETURN_IF_ERROR(device_->WaitFlags(words_, n, flag, view_));
  const int64_t full = bytes / kFlaggedPayloadBytesPerWord;
  for (int64_t w = 0; w < full; ++w) {
    const uint32_t low =
        static_cast<uint32_t>(__atomic_load_n(words_ + w, __ATOMIC_RELAXED));
    std::memcpy(head.data() + w * kFlaggedPayloadBytesPerWord, &low,
                sizeof(low));
  }
  if (full < n) {
    const uint32_t low =
        static_cast<uint32_t>(__atomic_load_n(words_ + full, __ATOMIC_RELAXED));
    std::memcpy(head.data() + full * kFlaggedPayloadBytesPerWord, &low,
                bytes - full * kFlaggedPayloadBytesPerWord);
  }
  // Ordered after the head by WaitFlags's acquire loads (contract 5).
  if (!tail.empty()) std::memcpy(tail.data(), words_ + n, tail.size());
  return absl::OkStatus();
}

absl::Status flagged_copy(std::span<const std::byte> payload,
                          const ArrayRef& dst, uint32_t flag,
                          const DeviceId& peer, DeviceIdType type) {
  MESHDMA_ASSIGN_OR_RETURN(FlaggedBuffer b,
                           FlaggedBuffer::ForCopy(dst, peer, type));
  return b.Copy(payload, flag);
}

absl::Status flagged_wait(const ArrayRef& words, uint32_t flag,
                          std::span<std::byte> out) {
  MESHDMA_ASSIGN_OR_RETURN(FlaggedBuffer b, FlaggedBuffer::ForWait(words));
  return b.Wait(flag, out);
}

}  // namespace meshdma
