// The message format of the transports whose messages cross processes
// (mpi/: MPI two-sided messages; socket/: TCP streams), and the checks a
// receiver makes of what arrives. Nothing from the wire is trusted: every
// offset, length and layout is checked against the receiving process's heap
// before a byte is written.
//
// A message is a `WireHeader`, then the destination's `ViewLayout` when
// `has_layout` (a put whose destination is not contiguous, or any put in
// checked mode; otherwise the destination is `value` contiguous bytes), then
// the sender's vector clock in checked mode (`check_words` words), then
// `inline_bytes` of payload.
#ifndef MESHDMA_DMA_TRANSPORT_WIRE_H_
#define MESHDMA_DMA_TRANSPORT_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "meshdma/dma/transport/transport.h"

namespace meshdma::dma_internal {

enum class WireKind : int32_t {
  kPut = 1,
  kSignal = 2,
  kAbort = 3,     // Payload: the reason.
  kFlush = 4,     // `value`: the sender's flush epoch (Transport::Quiesce).
  kGoodbye = 5,   // The sender shuts down: nothing follows (socket/).
  kCallNote = 6,  // `src_device`'s call note: kCallNoteWords words inline.
};
// The words of a call note on the wire (Transport::SendCallNote).
inline constexpr int32_t kCallNoteWireBytes =
    kCallNoteWords * static_cast<int32_t>(sizeof(int64_t));

struct WireHeader {
  WireKind kind;
  int32_t dst_device;
  int64_t dst_offset;  // kPut: heap offset of dst; kSignal: semaphore offset.
  int64_t sem_offset;  // kPut: receiver's recv semaphore.
  int64_t value;       // kPut: bytes; kSignal: increment; kFlush: epoch.
  int32_t elem_bytes;
  int32_t inline_bytes;  // Payload bytes after the header's extras.
  int32_t has_layout;    // 1: a ViewLayout follows the header.
  int32_t check_words;
  int32_t src_device;
  uint32_t check_seq;  // Checked mode: numbers a put among its issuer's DMAs.
};
inline constexpr int64_t kWireHeaderBytes = 56;
static_assert(sizeof(WireHeader) == kWireHeaderBytes);

// The header of a put of `op`: devices, destination and semaphore offsets,
// bytes, element size and checked mode's DMA number (no extras yet).
WireHeader PutHeader(const DmaOp& op);
// The header of a signal adding `inc` to the semaphore at `sem_offset` of
// `target_device`.
WireHeader SignalHeader(int target_device, int64_t sem_offset, int64_t inc);

// The bytes between the header and the payload: the layout and the clock.
// -1 when the header's counts are malformed (out of range).
int64_t WireExtrasBytes(const WireHeader& h);

// True when `v` is packed row-major (dimensions of size 1 ignored).
bool IsPacked(const ViewLayout& v, int64_t elem_bytes);
// `v`'s shape, packed row-major.
ViewLayout Packed(const ViewLayout& v, int64_t elem_bytes);
// `src` and `dst` (same shape) with dimensions of size 1 dropped and
// neighbours that both views pack at one stride merged, so that a copy of
// them is cut where their memory really breaks.
void MergeDimensions(ViewLayout& src, ViewLayout& dst);

// Where an arrived put or signal lands in this process.
struct WireTarget {
  std::byte* dst = nullptr;       // kPut: destination element 0.
  ViewLayout dst_layout;          // kPut: as sent, or `value` contiguous bytes.
  SemaphoreCell* cell = nullptr;  // kPut: the receive semaphore; kSignal: it.
};

// Checks a kPut or kSignal header `h` (and `layout`, the layout that
// followed it when `h.has_layout`) that rank `source` sent to this process
// (rank `rank`) against `host`'s devices and heap. On failure, the reason,
// naming both ranks, the device and what lies outside its heap; the caller
// aborts the launch with it.
absl::StatusOr<WireTarget> ResolveWireTarget(TransportHost& host, int rank,
                                             int source, const WireHeader& h,
                                             const ViewLayout* layout);

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_TRANSPORT_WIRE_H_
