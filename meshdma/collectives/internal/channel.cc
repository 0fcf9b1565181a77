#include "meshdma/collectives/internal/channel.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "meshdma/base/env.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/check.h"
#include "meshdma/dma/flagged_copy.h"
#include "meshdma/dma/peer_view.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma::collectives_internal {
namespace {

// This device thread's channels for the current Run, in creation order.
thread_local std::vector<std::unique_ptr<Channel>>* t_channels = nullptr;

// This device thread's remembered calls for the current Run (ChannelCall),
// at most kRememberedCalls, the next to replace at `t_next_call`; deleted
// with the channels they name.
constexpr int kRememberedCalls = 8;
thread_local std::vector<ChannelCall>* t_calls = nullptr;
thread_local int t_next_call = 0;

// Every field of CollectiveOptions (the assertion asks for this comparison
// to grow with the struct).
static_assert(sizeof(CollectiveOptions) == 48,
              "compare a new CollectiveOptions field in SameOptions");
bool SameOptions(const CollectiveOptions& a, const CollectiveOptions& b) {
  return a.algorithm == b.algorithm && a.chunk_bytes == b.chunk_bytes &&
         a.num_buffers == b.num_buffers &&
         a.lane_chunk_bytes == b.lane_chunk_bytes &&
         a.one_shot_max_bytes == b.one_shot_max_bytes &&
         a.check_peers == b.check_peers;
}

// A wait-only descriptor of `bytes` on (send_sem, recv_sem): the DMA layer's
// verbs wait for byte counts through descriptors of that size.
AsyncCopyDescriptor WaitFor(const ArrayRef& bytes_view, Semaphore send_sem,
                            Semaphore recv_sem, int peer) {
  return RemoteCopy(bytes_view, bytes_view, send_sem, recv_sem, peer);
}

// Flagged rows when every member reaches every other by stores: it is
// enough that this device reaches all of them, since reachability (same
// process or same host, checked mode off) is symmetric and the same for
// every member of a group on one host.
absl::StatusOr<bool> UseFlaggedRows(const Group& g) {
  MESHDMA_ASSIGN_OR_RETURN(
      std::optional<std::string> protocol,
      base_internal::EnvChoice(kChannelProtocolEnv, {"auto", "dma"}));
  if (protocol.value_or("auto") == "dma") return false;
  for (int j = 0; j < g.size(); ++j) {
    if (j == g.index) continue;
    MESHDMA_ASSIGN_OR_RETURN(
        bool reaches,
        flagged_copy_reaches(DeviceId(g.members[j]), DeviceIdType::kLogical));
    if (!reaches) return false;
  }
  return true;
}

// Orders the plain stores before it ahead of the flagged stores after it,
// also when the copy used non-temporal stores (which x86 does not order).
void PublishStores() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_sfence();
#endif
  __atomic_thread_fence(__ATOMIC_RELEASE);
}

}  // namespace

int64_t Channel::MaxPayloadBytes(const Group& g) {
  return ChannelPayloadBytes(g.size(), SpansHosts(g), HeapBytes());
}

absl::StatusOr<Channel*> Channel::For(const Group& g) {
  if (t_channels != nullptr) {
    for (auto& c : *t_channels) {
      if (c->mesh_ == g.mesh && c->members_ == g.members) return c.get();
    }
  }
  // First small call over this group in this Run: allocate the persistent
  // state (the same sequence on every member) and register the Run-end drain.
  std::unique_ptr<Channel> c(new Channel());
  const int n = g.size();
  c->members_ = g.members;
  c->mesh_ = g.mesh;
  c->row_bytes_ = kHeaderBytes + MaxPayloadBytes(g);
  const int64_t shape[] = {kSlotSets, n, c->row_bytes_};
  MESHDMA_ASSIGN_OR_RETURN(c->slots_,
                           AllocatePersistent(DType::kU8, shape, "channel"));
  MESHDMA_ASSIGN_OR_RETURN(
      c->arrived_, AllocatePersistentSemaphores(
                       SemaphoreType::kDma, kSlotSets * n, "channel arrived"));
  MESHDMA_ASSIGN_OR_RETURN(
      SemaphoreArray sent,
      AllocatePersistentSemaphores(SemaphoreType::kDma, 1, "channel sent"));
  c->sent_ = sent[0];
  MESHDMA_ASSIGN_OR_RETURN(c->credits_, AllocatePersistentSemaphores(
                                            SemaphoreType::kRegular,
                                            kCreditGroups, "channel credits"));
  for (std::vector<int>& owed : c->owed_) owed.assign(n, 0);
  for (int p = 0; p < kSlotSets; ++p) {
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef set, c->slots_.At(p));
    MESHDMA_ASSIGN_OR_RETURN(c->flat_slots_[p],
                             set.Reshape({set.num_elements()}));
  }
  MESHDMA_ASSIGN_OR_RETURN(c->flagged_, UseFlaggedRows(g));
  if (c->flagged_) {
    const int64_t flagged_shape[] = {kSlotSets, n * kFlaggedRowBytes};
    MESHDMA_ASSIGN_OR_RETURN(
        ArrayRef flagged,
        AllocatePersistent(DType::kU8, flagged_shape, "channel flagged rows"));
    for (int p = 0; p < kSlotSets; ++p) {
      MESHDMA_ASSIGN_OR_RETURN(const ArrayRef set, flagged.At(p));
      // Row i of the set is written by member i only.
      const ArrayRef mine =
          Range(set, g.index * kFlaggedRowBytes, kFlaggedRowBytes);
      for (int i = 0; i < n; ++i) {
        if (i == g.index) {
          c->flagged_in_[p].emplace_back();
          c->flagged_out_[p].emplace_back();
          continue;
        }
        MESHDMA_ASSIGN_OR_RETURN(
            FlaggedBuffer in,
            FlaggedBuffer::ForWait(
                Range(set, i * kFlaggedRowBytes, kFlaggedRowBytes)));
        MESHDMA_ASSIGN_OR_RETURN(
            FlaggedBuffer out,
            FlaggedBuffer::ForCopy(mine, DeviceId(g.members[i]),
                                   DeviceIdType::kLogical));
        c->flagged_in_[p].push_back(std::move(in));
        c->flagged_out_[p].push_back(std::move(out));
      }
    }
    c->received_.resize(static_cast<size_t>(n * c->row_bytes_));
    const int64_t counters_shape[] = {n * kCounterStrideBytes};
    MESHDMA_ASSIGN_OR_RETURN(c->consumed_,
                             AllocatePersistent(DType::kU8, counters_shape,
                                                "channel consumed counters"));
    for (int i = 0; i < n; ++i) {
      c->consumed_words_.push_back(
          Range(c->consumed_, i * kCounterStrideBytes, sizeof(uint64_t)));
    }
    for (int i = 0; i < n; ++i) {
      MESHDMA_ASSIGN_OR_RETURN(
          ArrayRef mine_there,
          peer_view(c->consumed_words_[g.index], DeviceId(g.members[i]),
                    DeviceIdType::kLogical));
      c->consumed_on_peer_.push_back(mine_there.data_as<uint64_t>());
    }
    for (int i = 0; i < n; ++i) {
      MESHDMA_ASSIGN_OR_RETURN(
          ArrayRef slots_there,
          peer_view(c->slots_, DeviceId(g.members[i]), DeviceIdType::kLogical));
      c->slots_on_peer_.push_back(slots_there.data());
    }
    c->known_consumed_.assign(n, 0);
    for (std::vector<int64_t>& last : c->last_row_) last.assign(n, -1);
  }
  for (int p = 0; p < kSlotSets; ++p) {
    c->push_[p].resize(n);
    c->arrival_[p].resize(n);
  }
  c->staging_.resize(static_cast<size_t>(n * c->row_bytes_));
  const int64_t staging_shape[] = {static_cast<int64_t>(c->staging_.size())};
  MESHDMA_ASSIGN_OR_RETURN(
      c->staging_view_,
      ArrayRef::FromPointer(c->staging_.data(), DType::kU8, staging_shape));
  if (t_channels == nullptr) {
    t_channels = new std::vector<std::unique_ptr<Channel>>();
    // A successful Run gives the credits it owes, then waits for those owed
    // to it; any Run, failed or not, forgets its channels, so the next Run
    // allocates them afresh.
    MESHDMA_RETURN_IF_ERROR(AtRunExit([]() -> absl::Status {
      absl::Status status;
      for (auto& channel : *t_channels) {
        absl::Status s = channel->GiveOwedCredits();
        if (status.ok()) status = s;
      }
      for (auto& channel : *t_channels) {
        absl::Status s = channel->WaitRowsConsumed();
        if (status.ok()) status = s;
      }
      return status;
    }));
    MESHDMA_RETURN_IF_ERROR(AtRunEnd([] {
      delete t_calls;
      t_calls = nullptr;
      t_next_call = 0;
      delete t_channels;
      t_channels = nullptr;
    }));
  }
  t_channels->push_back(std::move(c));
  return t_channels->back().get();
}

absl::Status Channel::GiveOwedCredits() {
  for (int q = 0; q < kCreditGroups; ++q) {
    MESHDMA_RETURN_IF_ERROR(GiveOwedCredits(q));
  }
  deferred_ = -1;
  return absl::OkStatus();
}

absl::Status Channel::GiveOwedCredits(int q) {
  std::vector<int>& owed = owed_[q];
  for (size_t i = 0; i < owed.size(); ++i) {
    if (owed[i] == 0) continue;
    MESHDMA_RETURN_IF_ERROR(semaphore_signal(
        credits_[q], owed[i], DeviceId(members_[i]), DeviceIdType::kLogical));
    owed[i] = 0;
  }
  return absl::OkStatus();
}

absl::Status Channel::WaitConsumed(int position, int64_t call) {
  const uint64_t target = static_cast<uint64_t>(call);
  const uint64_t* word = consumed_words_[position].data_as<const uint64_t>();
  if (__atomic_load_n(word, __ATOMIC_ACQUIRE) < target) {
    MESHDMA_RETURN_IF_ERROR(counter_wait(consumed_words_[position], target));
  }
  known_consumed_[position] =
      static_cast<int64_t>(__atomic_load_n(word, __ATOMIC_ACQUIRE));
  return absl::OkStatus();
}

absl::Status Channel::WaitRowsConsumed() {
  if (flagged_) {
    for (size_t i = 0; i < members_.size(); ++i) {
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
  for (int q = 0; q < kCreditGroups; ++q) {
    if (pushed_[q] > 0) {
      MESHDMA_RETURN_IF_ERROR(semaphore_wait(credits_[q], pushed_[q]));
      pushed_[q] = 0;
    }
  }
  return absl::OkStatus();
}

std::byte* Channel::StageRow(const Outgoing& o, int64_t signature, int64_t call,
                             bool dma_row) {
  if (dma_row) {
    // The credit word of a DMA row: the credits of the deferred group owed
    // to its receiver, as (count << 8) | (group + 1); 0 for none.
    int64_t credits = 0;
    if (deferred_ >= 0 && owed_[deferred_][o.position] > 0) {
      credits = (int64_t{owed_[deferred_][o.position]} << 8) | (deferred_ + 1);
      owed_[deferred_][o.position] = 0;
    }
    std::memcpy(staging_.data() + o.position * row_bytes_ + kDmaRowOffset,
                &credits, sizeof(credits));
  }
  std::byte* row = staging_.data() + o.position * row_bytes_ + kHeaderBytes -
                   kFlaggedHeaderBytes;
  std::memcpy(row, &signature, sizeof(signature));
  std::memcpy(row + sizeof(signature), &call, sizeof(call));
  if (dma_row && o.bytes > 0) {
    std::memcpy(row + kFlaggedHeaderBytes, o.payload, o.bytes);
  }
  return row;
}

absl::StatusOr<const std::byte*> Channel::MoveRowsByDma(
    const Group& g, int p, std::span<const Outgoing> out,
    std::span<const Incoming> in) {
  const ArrayRef& flat = flat_slots_[p];
  // `d`'s descriptor, made anew by `make` unless it last moved `bytes`.
  auto described = [](RowDescriptor& d, int64_t bytes,
                      auto make) -> AsyncCopyDescriptor& {
    if (d.bytes != bytes) {
      d.copy.emplace(make());
      d.bytes = bytes;
    }
    return *d.copy;
  };
  // Step 2: one DMA per receiver into row `g.index` of its set p.
  int64_t sent_bytes = 0;
  for (const Outgoing& o : out) {
    const int64_t bytes = kDmaHeaderBytes + o.bytes;
    AsyncCopyDescriptor& push = described(push_[p][o.position], bytes, [&] {
      return RemoteCopy(
          Range(staging_view_, o.position * row_bytes_ + kDmaRowOffset, bytes),
          Range(flat, g.index * row_bytes_ + kDmaRowOffset, bytes), sent_,
          arrived_[p * g.size() + g.index], g.members[o.position]);
    });
    MESHDMA_RETURN_IF_ERROR(push.start());
    sent_bytes += bytes;
  }
  // Step 3: every expected row is here, and my rows have been read.
  for (const Incoming& i : in) {
    const int64_t bytes = kDmaHeaderBytes + i.bytes;
    AsyncCopyDescriptor& arrival =
        described(arrival_[p][i.position], bytes, [&] {
          return WaitFor(Range(flat, 0, bytes), sent_,
                         arrived_[p * g.size() + i.position],
                         g.members[i.position]);
        });
    MESHDMA_RETURN_IF_ERROR(arrival.wait_recv());
  }
  if (sent_bytes > 0) {
    AsyncCopyDescriptor& pushes = described(pushes_read_[p], sent_bytes, [&] {
      return WaitFor(Range(flat, 0, sent_bytes), sent_, arrived_[p * g.size()],
                     g.Peer(1));
    });
    MESHDMA_RETURN_IF_ERROR(pushes.wait_send());
  }
  return flat.data();
}

absl::StatusOr<const std::byte*> Channel::MoveRowsFlagged(
    const Group& g, int p, uint32_t flag, std::span<const Outgoing> out,
    std::span<const Incoming> in) {
  // Step 2: store each row into row `g.index` of the receiver's flagged set
  // p, one cache line: the payload as the plain tail of the flagged header,
  // which publishes it.
  for (const Outgoing& o : out) {
    const std::byte* header = staging_.data() + o.position * row_bytes_ +
                              kHeaderBytes - kFlaggedHeaderBytes;
    MESHDMA_RETURN_IF_ERROR(flagged_out_[p][o.position]->Copy(
        {header, static_cast<size_t>(kFlaggedHeaderBytes)},
        {o.payload, static_cast<size_t>(o.bytes)}, flag));
  }
  // Step 3: every expected header carries this call's flag; unpack it and
  // its payload.
  for (const Incoming& i : in) {
    std::byte* row = received_.data() + i.position * row_bytes_ + kHeaderBytes;
    MESHDMA_RETURN_IF_ERROR(flagged_in_[p][i.position]->Wait(
        flag,
        {row - kFlaggedHeaderBytes, static_cast<size_t>(kFlaggedHeaderBytes)},
        {row, static_cast<size_t>(i.bytes)}));
  }
  return received_.data();
}

absl::StatusOr<const std::byte*> Channel::MoveRowsStored(
    const Group& g, int p, uint32_t flag, std::span<const Outgoing> out,
    std::span<const Incoming> in) {
  const int64_t set_bytes = int64_t{g.size()} * row_bytes_;
  // Step 2: the payload, by plain stores into row `g.index` of the
  // receiver's slot set p; then the header, flagged, which publishes it.
  for (const Outgoing& o : out) {
    if (o.bytes == 0) continue;
    std::memcpy(slots_on_peer_[o.position] + p * set_bytes +
                    g.index * row_bytes_ + kHeaderBytes,
                o.payload, o.bytes);
  }
  PublishStores();
  for (const Outgoing& o : out) {
    const std::byte* header = staging_.data() + o.position * row_bytes_ +
                              kHeaderBytes - kFlaggedHeaderBytes;
    MESHDMA_RETURN_IF_ERROR(flagged_out_[p][o.position]->Copy(
        {header, static_cast<size_t>(kFlaggedHeaderBytes)}, flag));
  }
  // Step 3: each expected header carries this call's flag: its payload is
  // in place in this device's slot set p.
  std::byte* set = flat_slots_[p].data();
  for (const Incoming& i : in) {
    MESHDMA_RETURN_IF_ERROR(flagged_in_[p][i.position]->Wait(
        flag,
        {set + i.position * row_bytes_ + kHeaderBytes - kFlaggedHeaderBytes,
         static_cast<size_t>(kFlaggedHeaderBytes)}));
  }
  return set;
}

absl::Status Channel::Exchange(
    absl::string_view collective, const Group& g, int64_t signature,
    std::span<const Outgoing> out, std::span<const Incoming> in,
    absl::FunctionRef<void(const std::byte* rows)> consume) {
  const int64_t call = calls_++;
  const int p = static_cast<int>(call % kSlotSets);
  const int q = static_cast<int>((call / kCreditBatch) % kCreditGroups);
  // Step 1: the rows this device wrote in group q's sets last time have
  // been read (step 1' in a channel of stores: the receivers of this call
  // have consumed the rows last pushed to them in set p).
  if (flagged_) {
    for (const Outgoing& o : out) {
      int64_t& last = last_row_[p][o.position];
      if (last >= known_consumed_[o.position]) {
        MESHDMA_RETURN_IF_ERROR(WaitConsumed(o.position, last + 1));
      }
      last = call;
    }
  } else if (call % kCreditBatch == 0 && pushed_[q] > 0) {
    MESHDMA_RETURN_IF_ERROR(semaphore_wait(credits_[q], pushed_[q]));
    pushed_[q] = 0;
  }
  // Steps 2-3: move the rows (DMA rows of a channel that always uses them
  // carry the deferred credits, step 5).
  // Flags are never 0 and differ between consecutive uses of a slot set.
  const uint32_t flag = static_cast<uint32_t>(call % 0xFFFFFFFFLL) + 1;
  bool flagged = flagged_;
  for (const Outgoing& o : out) flagged &= o.bytes <= kFlaggedMaxPayloadBytes;
  for (const Incoming& i : in) flagged &= i.bytes <= kFlaggedMaxPayloadBytes;
  const bool stored = flagged_ && !flagged;
  for (const Outgoing& o : out) {
    StageRow(o, signature, call, /*dma_row=*/!flagged_);
  }
  if (!flagged_) pushed_[q] += static_cast<int>(out.size());
  MESHDMA_ASSIGN_OR_RETURN(const std::byte* rows,
                           flagged  ? MoveRowsFlagged(g, p, flag, out, in)
                           : stored ? MoveRowsStored(g, p, flag, out, in)
                                    : MoveRowsByDma(g, p, out, in));
  // Step 4: every sender made this call.
  for (const Incoming& i : in) {
    const std::byte* header =
        rows + i.position * row_bytes_ + kHeaderBytes - kFlaggedHeaderBytes;
    int64_t theirs = 0, their_call = 0;
    std::memcpy(&theirs, header, sizeof(theirs));
    std::memcpy(&their_call, header + sizeof(theirs), sizeof(their_call));
    MESHDMA_RETURN_IF_ERROR(CompareSignatures(collective, g, signature, theirs,
                                              g.members[i.position]));
    if (their_call != call) {
      return CollectiveError(
          collective, g,
          absl::StrCat(
              "device ", g.members[i.position], " is at its call ", their_call,
              " of small collectives over this group, "
              "this device at ",
              call, ": the devices made different sequences of calls"));
    }
  }
  // Checked mode sees the reads of `consume` (raw pointers) as reads of the
  // rows the DMAs wrote; their ordering is the credit protocol's to prove.
  if (!flagged && RaceCheckingEnabled()) {
    for (const Incoming& i : in) {
      AnnotateRead(
          Range(flat_slots_[p], i.position * row_bytes_ + kDmaRowOffset,
                kDmaHeaderBytes + i.bytes),
          "channel row read");
    }
  }
  // Credits that came with the rows (step 5 of their senders).
  if (!flagged_) {
    for (const Incoming& i : in) {
      int64_t credits = 0;
      std::memcpy(&credits, rows + i.position * row_bytes_ + kDmaRowOffset,
                  sizeof(credits));
      if (credits == 0) continue;
      const int group = static_cast<int>(credits & 0xFF) - 1;
      if (group < 0 || group >= kCreditGroups) {
        return CollectiveError(
            collective, g,
            absl::StrCat("device ", g.members[i.position],
                         " sent a channel row with a corrupt credit word ",
                         credits));
      }
      MESHDMA_RETURN_IF_ERROR(semaphore_signal(credits_[group], credits >> 8));
    }
  }
  consume(rows);
  if (flagged_) {
    // Step 5': each sender's row of this call is consumed; a sender's row of
    // this call also tells that it consumed mine of the calls before.
    for (const Incoming& i : in) {
      __atomic_store_n(consumed_on_peer_[i.position],
                       static_cast<uint64_t>(call + 1), __ATOMIC_RELEASE);
      known_consumed_[i.position] = std::max(known_consumed_[i.position], call);
    }
    return absl::OkStatus();
  }
  // Step 5: owe each sender its row back. The credits deferred at the
  // previous call that its rows could not carry are signalled now; at the
  // group's last call, its credits are given (a channel of flagged rows), or
  // deferred to the next call's DMA rows, which carry them to the members
  // they go to for free.
  for (const Incoming& i : in) ++owed_[q][i.position];
  if (deferred_ >= 0) {
    MESHDMA_RETURN_IF_ERROR(GiveOwedCredits(deferred_));
    deferred_ = -1;
  }
  if (call % kCreditBatch == kCreditBatch - 1) deferred_ = q;
  return absl::OkStatus();
}

CallLayout CallLayout::Split(int64_t size, int n, int64_t bytes_per_index,
                             int64_t largest_output_bytes) {
  CallLayout layout;
  layout.part_begin.resize(n + 1);
  for (int j = 0; j <= n; ++j) {
    layout.part_begin[j] = PartBegin(size, n, j) * bytes_per_index;
  }
  layout.largest_output_bytes = largest_output_bytes;
  return layout;
}

const ChannelCall* FindChannelCall(CollectiveKind kind, int aux,
                                   const ArrayRef& input,
                                   const ArrayRef& output,
                                   std::span<const std::string> axes,
                                   const CollectiveOptions& options,
                                   std::span<const std::pair<int, int>> perm) {
  if (t_calls == nullptr || input.data() == nullptr) return nullptr;
  auto same = [](std::span<const int64_t> a, std::span<const int64_t> b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  };
  for (const ChannelCall& c : *t_calls) {
    if (c.output != output.data() || c.kind != kind || c.aux != aux ||
        c.dtype != input.dtype() || c.dtype != output.dtype() ||
        c.input_symmetric != input.is_symmetric() ||
        !same(c.input_shape, input.shape()) ||
        !same(c.output_shape, output.shape()) ||
        !std::equal(c.axes.begin(), c.axes.end(), axes.begin(), axes.end()) ||
        !std::equal(c.perm.begin(), c.perm.end(), perm.begin(), perm.end()) ||
        !SameOptions(c.options, options)) {
      continue;
    }
    // What Flatten and RequireSymmetric checked on the first call.
    if (!input.is_contiguous() || !output.is_contiguous() ||
        !output.is_symmetric()) {
      return nullptr;
    }
    return &c;
  }
  return nullptr;
}

void RememberChannelCall(CollectiveKind kind, int aux, const ArrayRef& input,
                         const ArrayRef& output, const Group& group,
                         Channel* channel, int64_t signature,
                         const CollectiveOptions& options,
                         std::span<const std::pair<int, int>> perm,
                         CallLayout layout, std::optional<ChannelStage> next) {
  // Channels (and the Run-end hook that forgets calls) exist by now.
  if (t_channels == nullptr) return;
  if (t_calls == nullptr) {
    t_calls = new std::vector<ChannelCall>();
    t_calls->reserve(kRememberedCalls);
  }
  ChannelCall call{
      kind,
      aux,
      input.dtype(),
      {input.shape().begin(), input.shape().end()},
      {output.shape().begin(), output.shape().end()},
      input.is_symmetric(),
      output.data(),
      std::vector<std::string>(group.axes.begin(), group.axes.end()),
      options,
      {perm.begin(), perm.end()},
      std::move(layout),
      group,
      channel,
      signature,
      std::move(next)};
  if (static_cast<int>(t_calls->size()) < kRememberedCalls) {
    t_calls->push_back(std::move(call));
  } else {
    (*t_calls)[t_next_call] = std::move(call);
  }
  t_next_call = (t_next_call + 1) % kRememberedCalls;
  // Each group views its own remembered axes, which outlive the caller's.
  for (ChannelCall& c : *t_calls) {
    c.group.axes = c.axes;
    if (c.next.has_value()) c.next->group.axes = c.axes;
  }
}

}  // namespace meshdma::collectives_internal
