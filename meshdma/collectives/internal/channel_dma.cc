#include "meshdma/collectives/internal/channel_dma.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/check.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma::collectives_internal {

absl::StatusOr<std::unique_ptr<Credits>> Credits::Create(
    const ChannelRows& rows) {
  std::unique_ptr<Credits> c(new Credits(rows));
  MESHDMA_ASSIGN_OR_RETURN(
      c->credits_, AllocatePersistentSemaphores(SemaphoreType::kRegular,
                                                kGroups, "channel credits"));
  for (std::vector<int>& owed : c->owed_) owed.assign(rows.size(), 0);
  return c;
}

absl::Status Credits::BeforePush(int64_t call,
                                 std::span<const ChannelOutgoing> out) {
  const int q = GroupOf(call);
  if (call % kBatch == 0 && pushed_[q] > 0) {
    MESHDMA_RETURN_IF_ERROR(semaphore_wait(credits_[q], pushed_[q]));
    pushed_[q] = 0;
  }
  pushed_[q] += static_cast<int>(out.size());
  return absl::OkStatus();
}

int64_t Credits::TakeDeferred(int position) {
  if (deferred_ < 0 || owed_[deferred_][position] == 0) return 0;
  const int64_t word =
      (int64_t{owed_[deferred_][position]} << 8) | (deferred_ + 1);
  owed_[deferred_][position] = 0;
  return word;
}

absl::Status Credits::TakeCarried(absl::string_view collective, const Group& g,
                                  const std::byte* rows,
                                  std::span<const ChannelIncoming> in) {
  for (const ChannelIncoming& i : in) {
    int64_t word = 0;
    std::memcpy(
        &word, rows + i.position * rows_.row_bytes + ChannelRows::kDmaRowOffset,
        sizeof(word));
    if (word == 0) continue;
    const int group = static_cast<int>(word & 0xFF) - 1;
    if (group < 0 || group >= kGroups) {
      return CollectiveError(
          collective, g,
          absl::StrCat("device ", rows_.members[i.position],
                       " sent a channel row with a corrupt credit word ",
                       word));
    }
    MESHDMA_RETURN_IF_ERROR(semaphore_signal(credits_[group], word >> 8));
  }
  return absl::OkStatus();
}

absl::Status Credits::AfterConsume(int64_t call,
                                   std::span<const ChannelIncoming> in) {
  const int q = GroupOf(call);
  for (const ChannelIncoming& i : in) ++owed_[q][i.position];
  // The credits deferred at the previous call that its rows could not carry.
  if (deferred_ >= 0) {
    MESHDMA_RETURN_IF_ERROR(Give(deferred_));
    deferred_ = -1;
  }
  if (call % kBatch == kBatch - 1) deferred_ = q;
  return absl::OkStatus();
}

absl::Status Credits::Give(int q) {
  std::vector<int>& owed = owed_[q];
  for (size_t i = 0; i < owed.size(); ++i) {
    if (owed[i] == 0) continue;
    MESHDMA_RETURN_IF_ERROR(semaphore_signal(credits_[q], owed[i],
                                             DeviceId(rows_.members[i]),
                                             DeviceIdType::kLogical));
    owed[i] = 0;
  }
  return absl::OkStatus();
}

absl::Status Credits::GiveOwed() {
  for (int q = 0; q < kGroups; ++q) MESHDMA_RETURN_IF_ERROR(Give(q));
  deferred_ = -1;
  return absl::OkStatus();
}

absl::Status Credits::WaitRowsConsumed() {
  for (int q = 0; q < kGroups; ++q) {
    if (pushed_[q] > 0) {
      MESHDMA_RETURN_IF_ERROR(semaphore_wait(credits_[q], pushed_[q]));
      pushed_[q] = 0;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DmaRows>> DmaRows::Create(ChannelRows& rows,
                                                         Credits& credits) {
  std::unique_ptr<DmaRows> d(new DmaRows(rows, credits));
  const int n = rows.size();
  MESHDMA_ASSIGN_OR_RETURN(
      d->arrived_,
      AllocatePersistentSemaphores(
          SemaphoreType::kDma, ChannelRows::kSlotSets * n, "channel arrived"));
  MESHDMA_ASSIGN_OR_RETURN(
      SemaphoreArray sent,
      AllocatePersistentSemaphores(SemaphoreType::kDma, 1, "channel sent"));
  d->sent_ = sent[0];
  for (int p = 0; p < ChannelRows::kSlotSets; ++p) {
    d->push_[p].resize(n);
    d->arrival_[p].resize(n);
  }
  return d;
}

template <typename Make>
AsyncCopyDescriptor& DmaRows::Reuse(Described& d, int64_t bytes, Make make) {
  if (d.bytes != bytes) {
    d.copy.emplace(make());
    d.bytes = bytes;
  }
  return *d.copy;
}

void DmaRows::Stage(const ChannelOutgoing& o) {
  const int64_t credits = credits_.TakeDeferred(o.position);
  std::memcpy(rows_.staging.data() + o.position * rows_.row_bytes +
                  ChannelRows::kDmaRowOffset,
              &credits, sizeof(credits));
  if (o.bytes > 0) {
    std::memcpy(
        rows_.StagedHeader(o.position) + ChannelRows::kFlaggedHeaderBytes,
        o.payload, o.bytes);
  }
}

absl::StatusOr<const std::byte*> DmaRows::Move(const RowCall& c) {
  const ArrayRef& flat = rows_.flat_slots[c.set];
  const int n = rows_.size(), me = rows_.index;
  const int64_t row = rows_.row_bytes;
  constexpr int64_t kOffset = ChannelRows::kDmaRowOffset;
  // Step 2: one DMA per receiver into row `me` of its set.
  int64_t sent_bytes = 0;
  for (const ChannelOutgoing& o : c.out) {
    Stage(o);
    const int64_t bytes = ChannelRows::kDmaHeaderBytes + o.bytes;
    AsyncCopyDescriptor& push = Reuse(push_[c.set][o.position], bytes, [&] {
      return RemoteCopy(
          Range(rows_.staging_view, o.position * row + kOffset, bytes),
          Range(flat, me * row + kOffset, bytes), sent_,
          arrived_[c.set * n + me], rows_.members[o.position]);
    });
    MESHDMA_RETURN_IF_ERROR(push.start());
    sent_bytes += bytes;
  }
  // Step 3: every expected row is here (wait-only descriptors of its byte
  // count), and my rows have been read.
  for (const ChannelIncoming& i : c.in) {
    const int64_t bytes = ChannelRows::kDmaHeaderBytes + i.bytes;
    MESHDMA_RETURN_IF_ERROR(Reuse(arrival_[c.set][i.position], bytes, [&] {
                              const ArrayRef counted = Range(flat, 0, bytes);
                              return RemoteCopy(
                                  counted, counted, sent_,
                                  arrived_[c.set * n + i.position],
                                  rows_.members[i.position]);
                            }).wait_recv());
  }
  if (sent_bytes > 0) {
    MESHDMA_RETURN_IF_ERROR(
        Reuse(pushes_read_[c.set], sent_bytes, [&] {
          const ArrayRef counted = Range(flat, 0, sent_bytes);
          return RemoteCopy(counted, counted, sent_, arrived_[c.set * n],
                            rows_.members[(me + 1) % n]);
        }).wait_send());
  }
  // Checked mode sees the caller's reads of the rows (raw pointers) as
  // reads of what the DMAs wrote; their ordering is the credits' to prove.
  if (RaceCheckingEnabled()) {
    for (const ChannelIncoming& i : c.in) {
      AnnotateRead(Range(flat, i.position * row + kOffset,
                         ChannelRows::kDmaHeaderBytes + i.bytes),
                   "channel row read");
    }
  }
  return flat.data();
}

}  // namespace meshdma::collectives_internal
