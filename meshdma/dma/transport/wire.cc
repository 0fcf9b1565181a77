#include "meshdma/dma/transport/wire.h"

#include <optional>
#include <span>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "meshdma/base/checked_math.h"

namespace meshdma::dma_internal {

WireHeader PutHeader(const DmaOp& op) {
  WireHeader h{};
  h.kind = WireKind::kPut;
  h.dst_device = op.event.dst_device;
  h.dst_offset = op.dst_heap_offset;
  h.sem_offset = op.event.recv_sem;
  h.value = op.event.bytes;
  h.elem_bytes = static_cast<int32_t>(op.elem_bytes);
  h.src_device = op.event.src_device;
  h.check_seq = op.check_seq;
  return h;
}

WireHeader SignalHeader(int target_device, int64_t sem_offset, int64_t inc) {
  WireHeader h{};
  h.kind = WireKind::kSignal;
  h.dst_device = target_device;
  h.dst_offset = sem_offset;
  h.value = inc;
  return h;
}

int64_t WireExtrasBytes(const WireHeader& h) {
  // A clock holds a word per device: far below this.
  constexpr int32_t kMaxCheckWords = 1 << 20;
  if (h.has_layout < 0 || h.has_layout > 1 || h.check_words < 0 ||
      h.check_words > kMaxCheckWords || h.inline_bytes < 0) {
    return -1;
  }
  return (h.has_layout == 1 ? int64_t{sizeof(ViewLayout)} : 0) +
         int64_t{h.check_words} * int64_t{sizeof(uint32_t)};
}

bool IsPacked(const ViewLayout& v, int64_t elem_bytes) {
  int64_t stride = elem_bytes;
  for (int d = v.rank - 1; d >= 0; --d) {
    if (v.shape[d] != 1 && v.byte_strides[d] != stride) return false;
    stride *= v.shape[d];
  }
  return true;
}

ViewLayout Packed(const ViewLayout& v, int64_t elem_bytes) {
  ViewLayout p = v;
  int64_t stride = elem_bytes;
  for (int d = v.rank - 1; d >= 0; --d) {
    p.byte_strides[d] = stride;
    stride *= v.shape[d];
  }
  return p;
}

void MergeDimensions(ViewLayout& src, ViewLayout& dst) {
  int rank = 0;
  for (int d = 0; d < src.rank; ++d) {
    if (src.shape[d] == 1) continue;
    const bool merges =
        rank > 0 &&
        src.byte_strides[rank - 1] == src.shape[d] * src.byte_strides[d] &&
        dst.byte_strides[rank - 1] == src.shape[d] * dst.byte_strides[d];
    if (merges) {
      src.shape[rank - 1] *= src.shape[d];
      src.byte_strides[rank - 1] = src.byte_strides[d];
      dst.byte_strides[rank - 1] = dst.byte_strides[d];
    } else {
      src.shape[rank] = src.shape[d];
      src.byte_strides[rank] = src.byte_strides[d];
      dst.byte_strides[rank] = dst.byte_strides[d];
      ++rank;
    }
  }
  if (rank == 0) {  // A single element.
    src.shape[0] = 1;
    src.byte_strides[0] = dst.byte_strides[0] = 1;
    rank = 1;
  }
  src.rank = dst.rank = rank;
  dst.shape = src.shape;
}

absl::StatusOr<WireTarget> ResolveWireTarget(TransportHost& host, int rank,
                                             int source, const WireHeader& h,
                                             const ViewLayout* layout) {
  // Step 1: a device this process holds.
  std::byte* heap = host.HeapBase(h.dst_device);
  if (heap == nullptr || !host.IsLocalDevice(h.dst_device)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " received a message for device ",
                     h.dst_device, ", which it does not hold"));
  }
  const int64_t heap_bytes = host.heap_bytes();
  auto fits = [&](int64_t offset, int64_t lo, int64_t hi) {
    return offset >= 0 && offset <= heap_bytes && offset + lo >= 0 &&
           hi <= heap_bytes - offset;
  };
  auto reject = [&](const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " received from rank ", source,
                     " a message for device ", h.dst_device, " ", what,
                     ", outside its ", heap_bytes, "-byte heap; dropped"));
  };
  const int64_t cell = static_cast<int64_t>(sizeof(SemaphoreCell));
  // Step 2: a signal's semaphore inside the heap.
  WireTarget target;
  if (h.kind == WireKind::kSignal) {
    if (!fits(h.dst_offset, 0, cell)) {
      return reject(
          absl::StrCat("signalling a semaphore at offset ", h.dst_offset));
    }
    target.cell = reinterpret_cast<SemaphoreCell*>(heap + h.dst_offset);
    return target;
  }
  if (h.kind != WireKind::kPut) {
    return reject(absl::StrCat("of unknown kind ", static_cast<int>(h.kind)));
  }
  // Step 3: a put's layout (sent, or contiguous bytes), which must hold
  // exactly the bytes sent.
  ViewLayout& dst_layout = target.dst_layout;
  if (h.has_layout == 1 && layout != nullptr) {
    dst_layout = *layout;
  } else if (h.elem_bytes > 0 && h.value >= 0) {
    dst_layout.rank = 1;
    dst_layout.shape[0] = h.value / h.elem_bytes;
    dst_layout.byte_strides[0] = h.elem_bytes;
  }
  std::optional<base_internal::ByteExtent> extent;
  if (dst_layout.rank >= 0 && dst_layout.rank <= kMaxRank && h.elem_bytes > 0 &&
      h.elem_bytes <= 16) {
    const std::span<const int64_t> shape(dst_layout.shape.data(),
                                         dst_layout.rank);
    extent = base_internal::CheckedByteExtent(
        shape,
        std::span<const int64_t>(dst_layout.byte_strides.data(),
                                 dst_layout.rank),
        1);
    const std::optional<int64_t> elements =
        base_internal::CheckedProduct(shape);
    if (!elements.has_value() ||
        base_internal::CheckedMul(*elements, h.elem_bytes) != h.value) {
      extent.reset();  // The layout does not hold the bytes sent.
    }
  }
  // Step 4: its semaphore and every byte it writes inside the heap.
  if (!fits(h.sem_offset, 0, cell) || !extent.has_value() || h.value < 0 ||
      (h.inline_bytes > 0 && h.inline_bytes != h.value)) {
    return reject(absl::StrCat("with a malformed put (", h.value, " bytes, ",
                               h.inline_bytes, " inline, semaphore at ",
                               h.sem_offset, ")"));
  }
  if (h.value > 0 &&
      !fits(h.dst_offset, extent->lo, extent->hi + h.elem_bytes - 1)) {
    return reject(
        absl::StrCat("writing ", h.value, " bytes at offset ", h.dst_offset));
  }
  target.dst = heap + h.dst_offset;
  target.cell = reinterpret_cast<SemaphoreCell*>(heap + h.sem_offset);
  return target;
}

}  // namespace meshdma::dma_internal
