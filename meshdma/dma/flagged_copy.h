// Flagged copies: the low-latency protocol for small messages (NCCL's "LL").
//
// A flagged buffer is a symmetric array of 8-byte words; each word carries 4
// bytes of payload in its low half and a 4-byte flag in its high half, and
// is written with one 8-byte store. A receiver that sees the flag it expects
// in a word therefore sees that word's payload too: one store moves data and
// readiness together, with no semaphore, no DMA record and no completion to
// wait for. It moves twice the bytes, so it pays off for small messages
// only.
//
// Contract:
//   1. `flagged_copy` stores into a peer's memory directly, so it needs a
//      peer the calling device can address: a device of the same process or
//      of a process on the same host (`flagged_copy_reaches`). Elsewhere it
//      is FailedPrecondition; callers keep a DMA path for such peers.
//   2. The sender chooses a flag per message, never 0 and different from
//      the one the buffer's previous message carried (a call number + 1).
//      Reusing a buffer before its receiver has read it is the caller's
//      race to prevent (a credit semaphore, as for DMAs).
//   3. Flagged copies are not DMAs: they do not signal semaphores, are not
//      counted by a kernel's exit contract, and are neither observed (traces)
//      nor race-checked. `flagged_copy_reaches` is false in checked mode, so
//      code that falls back to DMAs stays checkable.
//   4. `flagged_wait` honours the runtime's wait timeout and abort, like
//      every wait.
//   5. A message of a `FlaggedBuffer` may be a flagged head with a plain
//      tail: the tail's bytes are stored at full density right after the
//      head's words, before the head, whose flagged stores publish them (a
//      receiver that sees the head's flag sees the tail). Every message
//      through a buffer that ever carries a tail must have the same head
//      size: a word that held a tail's plain bytes could otherwise carry a
//      later message's flag by chance.
#ifndef MESHDMA_DMA_FLAGGED_COPY_H_
#define MESHDMA_DMA_FLAGGED_COPY_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/dma/semaphore.h"

namespace meshdma {

inline constexpr int64_t kFlaggedPayloadBytesPerWord = 4;

// Words a flagged buffer needs for `payload_bytes`.
constexpr int64_t FlaggedWords(int64_t payload_bytes) {
  return (payload_bytes + kFlaggedPayloadBytesPerWord - 1) /
         kFlaggedPayloadBytesPerWord;
}

// True when the calling device can `flagged_copy` to `peer` (contract 1, 3).
absl::StatusOr<bool> flagged_copy_reaches(
    const DeviceId& peer, DeviceIdType type = DeviceIdType::kMesh);

// Stores `payload` with `flag` into the first FlaggedWords(payload.size())
// words of `dst` on `peer`. `dst` is a contiguous symmetric view of at least
// that many 8-byte words, as this device sees it; `flag` is nonzero.
absl::Status flagged_copy(std::span<const std::byte> payload,
                          const ArrayRef& dst, uint32_t flag,
                          const DeviceId& peer,
                          DeviceIdType type = DeviceIdType::kMesh);

// Waits until the first FlaggedWords(out.size()) words of `words` (this
// device's) carry `flag`, then unpacks their payload into `out`.
absl::Status flagged_wait(const ArrayRef& words, uint32_t flag,
                          std::span<std::byte> out);

namespace dma_internal {
class Device;
}  // namespace dma_internal

// A flagged buffer checked and resolved once, for a series of messages
// through it: what `flagged_copy` and `flagged_wait` do, without finding the
// device, the peer and the address again for every message (a channel's
// rows, NCCL's persistent connections). Valid on the device that made it,
// for the rest of the `Runtime::Run` that made it.
class FlaggedBuffer {
 public:
  // `dst` on `peer`, as `flagged_copy`'s destination; the same errors.
  static absl::StatusOr<FlaggedBuffer> ForCopy(
      const ArrayRef& dst, const DeviceId& peer,
      DeviceIdType type = DeviceIdType::kMesh);
  // `words` of the calling device, as `flagged_wait`'s source.
  static absl::StatusOr<FlaggedBuffer> ForWait(const ArrayRef& words);

  // `flagged_copy(payload, dst, flag, peer)`.
  absl::Status Copy(std::span<const std::byte> payload, uint32_t flag) const;
  // `flagged_wait(words, flag, out)`.
  absl::Status Wait(uint32_t flag, std::span<std::byte> out) const;
  // A flagged `head` and a plain `tail` (contract 5): `tail` is stored at
  // byte 8 * FlaggedWords(head.size()) of the buffer, then `head` as
  // `Copy(head, flag)` does. InvalidArgument unless both fit and a tail has
  // a head (at least 1 byte) to publish it.
  absl::Status Copy(std::span<const std::byte> head,
                    std::span<const std::byte> tail, uint32_t flag) const;
  // Waits for a head of `head.size()` bytes carrying `flag`, then unpacks
  // it into `head` and copies the tail that follows its words into `tail`.
  absl::Status Wait(uint32_t flag, std::span<std::byte> head,
                    std::span<std::byte> tail) const;

 private:
  FlaggedBuffer() = default;
  // InvalidArgument unless `flag` is nonzero and `payload_bytes` (flagged)
  // and `tail_bytes` (plain, after them) fit.
  absl::Status CheckMessage(int64_t payload_bytes, uint32_t flag,
                            const char* verb, int64_t tail_bytes = 0) const;

  dma_internal::Device* device_ = nullptr;
  uint64_t* words_ = nullptr;  // On the peer (ForCopy) or this device.
  int64_t capacity_ = 0;       // Words.
  ArrayRef view_;              // For errors.
};

}  // namespace meshdma

#endif  // MESHDMA_DMA_FLAGGED_COPY_H_
