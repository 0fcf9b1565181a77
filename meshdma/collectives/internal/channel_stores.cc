#include "meshdma/collectives/internal/channel_stores.h"

#include <algorithm>
#include <cstring>

#include "meshdma/base/status_macros.h"
#include "meshdma/dma/peer_view.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma::collectives_internal {
namespace {

constexpr int64_t kRowBytes = ChannelRows::kFlaggedRowBytes;
constexpr size_t kHead = ChannelRows::kFlaggedHeaderBytes;

// Orders the plain stores before it ahead of the flagged stores after it,
// also when the copy used non-temporal stores (which x86 does not order).
void PublishStores() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_sfence();
#endif
  __atomic_thread_fence(__ATOMIC_RELEASE);
}

}  // namespace

absl::StatusOr<std::unique_ptr<FlaggedSlots>> FlaggedSlots::Create(
    const ChannelRows& rows) {
  auto slots = std::make_unique<FlaggedSlots>();
  const int n = rows.size();
  const int64_t shape[] = {ChannelRows::kSlotSets, n * kRowBytes};
  MESHDMA_ASSIGN_OR_RETURN(
      ArrayRef all,
      AllocatePersistent(DType::kU8, shape, "channel flagged rows"));
  for (int p = 0; p < ChannelRows::kSlotSets; ++p) {
    MESHDMA_ASSIGN_OR_RETURN(const ArrayRef set, all.At(p));
    const ArrayRef mine = Range(set, rows.index * kRowBytes, kRowBytes);
    for (int i = 0; i < n; ++i) {
      if (i == rows.index) {
        slots->in[p].emplace_back();
        slots->out[p].emplace_back();
        continue;
      }
      MESHDMA_ASSIGN_OR_RETURN(
          FlaggedBuffer in,
          FlaggedBuffer::ForWait(Range(set, i * kRowBytes, kRowBytes)));
      MESHDMA_ASSIGN_OR_RETURN(
          FlaggedBuffer out,
          FlaggedBuffer::ForCopy(mine, DeviceId(rows.members[i]),
                                 DeviceIdType::kLogical));
      slots->in[p].push_back(std::move(in));
      slots->out[p].push_back(std::move(out));
    }
  }
  return slots;
}

absl::StatusOr<const std::byte*> FlaggedRows::Move(const RowCall& c) {
  // Step 2: each row into row `index` of the receiver's flagged set, one
  // cache line: the payload as the plain tail of the flagged header.
  for (const ChannelOutgoing& o : c.out) {
    MESHDMA_RETURN_IF_ERROR(slots_.out[c.set][o.position]->Copy(
        {rows_.StagedHeader(o.position), kHead},
        {o.payload, static_cast<size_t>(o.bytes)}, c.flag));
  }
  // Step 3: every expected header carries this call's flag; unpack it and
  // its payload.
  for (const ChannelIncoming& i : c.in) {
    std::byte* row = received_.data() + i.position * rows_.row_bytes +
                     ChannelRows::kHeaderBytes;
    MESHDMA_RETURN_IF_ERROR(slots_.in[c.set][i.position]->Wait(
        c.flag, {row - kHead, kHead}, {row, static_cast<size_t>(i.bytes)}));
  }
  return received_.data();
}

absl::StatusOr<std::unique_ptr<StoredRows>> StoredRows::Create(
    ChannelRows& rows, const FlaggedSlots& slots) {
  std::unique_ptr<StoredRows> s(new StoredRows(rows, slots));
  for (int i = 0; i < rows.size(); ++i) {
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef there,
                             peer_view(rows.slots, DeviceId(rows.members[i]),
                                       DeviceIdType::kLogical));
    s->slots_on_peer_.push_back(there.data());
  }
  return s;
}

absl::StatusOr<const std::byte*> StoredRows::Move(const RowCall& c) {
  const int64_t row = rows_.row_bytes;
  const int64_t set_bytes = int64_t{rows_.size()} * row;
  // Step 2: the payload, by plain stores into row `index` of the
  // receiver's slot set; then the header, flagged, which publishes it.
  for (const ChannelOutgoing& o : c.out) {
    if (o.bytes == 0) continue;
    std::memcpy(slots_on_peer_[o.position] + c.set * set_bytes +
                    rows_.index * row + ChannelRows::kHeaderBytes,
                o.payload, o.bytes);
  }
  PublishStores();
  for (const ChannelOutgoing& o : c.out) {
    MESHDMA_RETURN_IF_ERROR(slots_.out[c.set][o.position]->Copy(
        {rows_.StagedHeader(o.position), kHead}, c.flag));
  }
  // Step 3: each expected header carries this call's flag: its payload is
  // in place in this device's slot set.
  std::byte* set = rows_.flat_slots[c.set].data();
  for (const ChannelIncoming& i : c.in) {
    MESHDMA_RETURN_IF_ERROR(slots_.in[c.set][i.position]->Wait(
        c.flag,
        {const_cast<std::byte*>(rows_.Header(set, i.position)), kHead}));
  }
  return set;
}

absl::StatusOr<std::unique_ptr<ConsumedCounters>> ConsumedCounters::Create(
    const ChannelRows& rows) {
  std::unique_ptr<ConsumedCounters> c(new ConsumedCounters());
  const int n = rows.size();
  const int64_t shape[] = {n * kStrideBytes};
  MESHDMA_ASSIGN_OR_RETURN(
      c->consumed_,
      AllocatePersistent(DType::kU8, shape, "channel consumed counters"));
  for (int i = 0; i < n; ++i) {
    c->consumed_words_.push_back(
        Range(c->consumed_, i * kStrideBytes, sizeof(uint64_t)));
  }
  for (int i = 0; i < n; ++i) {
    MESHDMA_ASSIGN_OR_RETURN(
        ArrayRef mine_there,
        peer_view(c->consumed_words_[rows.index], DeviceId(rows.members[i]),
                  DeviceIdType::kLogical));
    c->consumed_on_peer_.push_back(mine_there.data_as<uint64_t>());
  }
  c->known_consumed_.assign(n, 0);
  for (std::vector<int64_t>& last : c->last_row_) last.assign(n, -1);
  return c;
}

absl::Status ConsumedCounters::WaitConsumed(int position, int64_t call) {
  const uint64_t target = static_cast<uint64_t>(call);
  const uint64_t* word = consumed_words_[position].data_as<const uint64_t>();
  if (__atomic_load_n(word, __ATOMIC_ACQUIRE) < target) {
    MESHDMA_RETURN_IF_ERROR(counter_wait(consumed_words_[position], target));
  }
  known_consumed_[position] =
      static_cast<int64_t>(__atomic_load_n(word, __ATOMIC_ACQUIRE));
  return absl::OkStatus();
}

absl::Status ConsumedCounters::BeforePush(
    int64_t call, std::span<const ChannelOutgoing> out) {
  const int p = static_cast<int>(call % ChannelRows::kSlotSets);
  for (const ChannelOutgoing& o : out) {
    int64_t& last = last_row_[p][o.position];
    if (last >= known_consumed_[o.position]) {
      MESHDMA_RETURN_IF_ERROR(WaitConsumed(o.position, last + 1));
    }
    last = call;
  }
  return absl::OkStatus();
}

absl::Status ConsumedCounters::AfterConsume(
    int64_t call, std::span<const ChannelIncoming> in) {
  // Each sender's row of this call is consumed; a sender's row of this call
  // also tells that it consumed mine of the calls before.
  for (const ChannelIncoming& i : in) {
    __atomic_store_n(consumed_on_peer_[i.position],
                     static_cast<uint64_t>(call + 1), __ATOMIC_RELEASE);
    known_consumed_[i.position] = std::max(known_consumed_[i.position], call);
  }
  return absl::OkStatus();
}

absl::Status ConsumedCounters::WaitRowsConsumed() {
  for (size_t i = 0; i < known_consumed_.size(); ++i) {
    int64_t last = -1;
    for (const std::vector<int64_t>& set : last_row_) {
      last = std::max(last, set[i]);
    }
    if (last >= 0) {
      MESHDMA_RETURN_IF_ERROR(WaitConsumed(static_cast<int>(i), last + 1));
    }
  }
  return absl::OkStatus();
}

}  // namespace meshdma::collectives_internal
