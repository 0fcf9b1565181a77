#include "meshdma/collectives/internal/channel.h"

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "meshdma/base/config.h"
#include "meshdma/base/env.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/internal/channel_dma.h"
#include "meshdma/collectives/internal/channel_stores.h"
#include "meshdma/dma/check.h"
#include "meshdma/dma/flagged_copy.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma::collectives_internal {
namespace {

// This device thread's channels for the current Run, in creation order:
// made with the Run's first channel, deleted at its end.
using Channels = std::vector<std::unique_ptr<Channel>>;
thread_local std::unique_ptr<Channels> t_channels;

// At the first channel of a Run: a successful Run gives the credits it
// owes, then waits for those owed to it; any Run, failed or not, forgets
// its channels, so the next Run allocates them afresh.
absl::Status StartChannels() {
  t_channels = std::make_unique<Channels>();
  MESHDMA_RETURN_IF_ERROR(AtRunExit([]() -> absl::Status {
    absl::Status status;
    for (auto& channel : *t_channels) status.Update(channel->GiveOwed());
    for (auto& channel : *t_channels) {
      status.Update(channel->WaitRowsConsumed());
    }
    return status;
  }));
  return AtRunEnd([] { t_channels.reset(); });
}

// A channel of stores when every member reaches every other by stores: it
// is enough that this device reaches all of them, since reachability (same
// process or same host, checked mode off) is symmetric and the same for
// every member of a group on one host. MESHDMA_CHANNEL_PROTOCOL=dma
// (base/config.h) forces DMA rows.
absl::StatusOr<bool> ByStores(const Group& g) {
  MESHDMA_ASSIGN_OR_RETURN(std::optional<std::string> protocol,
                           base_internal::EnvChoice(config::kChannelProtocol));
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

}  // namespace

Channel::Channel() = default;
Channel::~Channel() = default;

int64_t Channel::MaxPayloadBytes(const Group& g) {
  return ChannelPayloadBytes(g.size(), SpansHosts(g), HeapBytes());
}

absl::StatusOr<Channel*> Channel::For(const Group& g) {
  if (t_channels != nullptr) {
    for (auto& c : *t_channels) {
      if (c->mesh_ == g.mesh && c->rows_.members == g.members) return c.get();
    }
  }
  // The group's first small call in this Run: allocate the persistent state
  // (the same sequence on every member).
  std::unique_ptr<Channel> c(new Channel());
  c->mesh_ = g.mesh;
  c->noted_ = NotedGroupOf(g);
  MESHDMA_RETURN_IF_ERROR(c->AllocateRows(g));
  MESHDMA_RETURN_IF_ERROR(c->MakeProtocols(g));
  if (t_channels == nullptr) MESHDMA_RETURN_IF_ERROR(StartChannels());
  t_channels->push_back(std::move(c));
  return t_channels->back().get();
}

absl::Status Channel::AllocateRows(const Group& g) {
  const int n = g.size();
  rows_.members = g.members;
  rows_.index = g.index;
  rows_.row_bytes = kHeaderBytes + MaxPayloadBytes(g);
  const int64_t shape[] = {kSlotSets, n, rows_.row_bytes};
  MESHDMA_ASSIGN_OR_RETURN(rows_.slots,
                           AllocatePersistent(DType::kU8, shape, "channel"));
  for (int p = 0; p < kSlotSets; ++p) {
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef set, rows_.slots.At(p));
    MESHDMA_ASSIGN_OR_RETURN(rows_.flat_slots[p],
                             set.Reshape({set.num_elements()}));
  }
  rows_.staging.resize(static_cast<size_t>(n * rows_.row_bytes));
  const int64_t staging_shape[] = {static_cast<int64_t>(rows_.staging.size())};
  MESHDMA_ASSIGN_OR_RETURN(
      rows_.staging_view,
      ArrayRef::FromPointer(rows_.staging.data(), DType::kU8, staging_shape));
  return absl::OkStatus();
}

absl::Status Channel::MakeProtocols(const Group& g) {
  MESHDMA_ASSIGN_OR_RETURN(const bool by_stores, ByStores(g));
  if (!by_stores) {
    MESHDMA_ASSIGN_OR_RETURN(std::unique_ptr<Credits> credits,
                             Credits::Create(rows_));
    MESHDMA_ASSIGN_OR_RETURN(dma_rows_, DmaRows::Create(rows_, *credits));
    flow_ = std::move(credits);
    return absl::OkStatus();
  }
  MESHDMA_ASSIGN_OR_RETURN(flagged_slots_, FlaggedSlots::Create(rows_));
  flagged_rows_ = std::make_unique<FlaggedRows>(rows_, *flagged_slots_);
  MESHDMA_ASSIGN_OR_RETURN(stored_rows_,
                           StoredRows::Create(rows_, *flagged_slots_));
  MESHDMA_ASSIGN_OR_RETURN(flow_, ConsumedCounters::Create(rows_));
  return absl::OkStatus();
}

RowProtocol& Channel::RowsFor(std::span<const Outgoing> out,
                              std::span<const Incoming> in) {
  if (dma_rows_ != nullptr) return *dma_rows_;
  bool fits = true;
  for (const Outgoing& o : out) fits &= o.bytes <= kFlaggedMaxPayloadBytes;
  for (const Incoming& i : in) fits &= i.bytes <= kFlaggedMaxPayloadBytes;
  return fits ? *flagged_rows_ : *stored_rows_;
}

absl::Status Channel::CheckHeaders(absl::string_view collective, const Group& g,
                                   int64_t signature, int64_t call,
                                   const std::byte* rows,
                                   std::span<const Incoming> in) const {
  for (const Incoming& i : in) {
    const std::byte* header = rows_.Header(rows, i.position);
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
              " of small collectives over this group, this device "
              "at ",
              call, ": the devices made different sequences of calls"));
    }
  }
  return absl::OkStatus();
}

absl::Status Channel::Exchange(
    absl::string_view collective, const Group& g, int64_t signature,
    const ArrayRef* input, const ArrayRef* output,
    std::span<const Outgoing> out, std::span<const Incoming> in,
    absl::FunctionRef<void(const std::byte* rows)> consume) {
  if (input != nullptr && RaceCheckingEnabled()) {
    AnnotateRead(*input, "channel staging read");
  }
  const int64_t call = calls_++;
  PublishCall(noted_, signature, /*by_channel=*/true);
  // Flags are never 0 and differ between consecutive uses of a slot set.
  const RowCall rows{call, static_cast<int>(call % kSlotSets),
                     static_cast<uint32_t>(call % 0xFFFFFFFFLL) + 1, out, in};
  // Step 1: the receivers have consumed the rows this call overwrites.
  MESHDMA_RETURN_IF_ERROR(flow_->BeforePush(call, out));
  // Steps 2-3: stage each row's header [signature | call], move the rows.
  for (const Outgoing& o : out) {
    std::byte* header = rows_.StagedHeader(o.position);
    std::memcpy(header, &signature, sizeof(signature));
    std::memcpy(header + sizeof(signature), &call, sizeof(call));
  }
  MESHDMA_ASSIGN_OR_RETURN(const std::byte* received,
                           RowsFor(out, in).Move(rows));
  // Step 4: every sender made this call; what flow control came with the
  // rows; the caller reads them.
  MESHDMA_RETURN_IF_ERROR(
      CheckHeaders(collective, g, signature, call, received, in));
  MESHDMA_RETURN_IF_ERROR(flow_->TakeCarried(collective, g, received, in));
  if (output != nullptr && RaceCheckingEnabled()) {
    AnnotateWrite(*output, absl::StrCat(collective, " write of its output"));
  }
  consume(received);
  // Step 5: the rows are consumed.
  return flow_->AfterConsume(call, in);
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

}  // namespace meshdma::collectives_internal
