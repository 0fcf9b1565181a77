#include "meshdma/collectives/internal/direct.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

namespace meshdma::collectives_internal {

namespace {

// True when `holds(peer, DeviceIdType::kLogical)` is true for every peer of
// `g`.
absl::StatusOr<bool> EveryPeer(const Group& g,
                               absl::StatusOr<bool> (*holds)(const DeviceId&,
                                                             DeviceIdType)) {
  for (int j = 1; j < g.size(); ++j) {
    MESHDMA_ASSIGN_OR_RETURN(
        bool yes, holds(DeviceId(g.Peer(j)), DeviceIdType::kLogical));
    if (!yes) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<bool> DirectReaches(const Group& g) {
  return EveryPeer(g, &peer_view_reaches);
}

absl::StatusOr<bool> SharesAddressSpace(const Group& g) {
  return EveryPeer(g, &peer_shares_address_space);
}

absl::StatusOr<bool> ReadsPeerMemory(const Group& g) {
  return EveryPeer(g, &peer_shares_address_space);
}

int64_t ReductionSignature(CollectiveKind kind, DType dtype, int64_t count,
                           int aux, const ArrayRef* symmetric_output,
                           const ArrayRef* direct_input) {
  if (direct_input == nullptr) {
    return CallSignature(kind, dtype, count, aux, symmetric_output);
  }
  return CallSignature(kind, dtype, count, aux | kDirectAux, symmetric_output,
                       direct_input);
}

absl::Status RunReductionKernel(
    absl::string_view name, const Group& g, const CollectiveOptions& options,
    CollectiveAlgorithm algorithm, CollectiveKind kind, ReduceOp op,
    const ArrayRef& in, const ArrayRef* symmetric_output,
    bool reads_peer_inputs, bool private_input, bool publish_input,
    int plan_bits,
    absl::FunctionRef<absl::Status(bool one_shot_check, const ArrayRef* board)>
        body) {
  const bool one_shot = algorithm == CollectiveAlgorithm::kOneShot;
  const bool at_entry = ComparesAtEntry(g, options.check_peers);
  const int aux = static_cast<int>(op) |
                  (private_input ? kPrivateInputAux : 0) |
                  (publish_input ? kBoardInputsAux | kDirectAux : 0);
  KernelOptions kernel = KernelFor(name, g, options.check_peers);
  // The address goes on the board before the entry barrier, which then
  // runs inside the body.
  const bool barrier_in_body = publish_input && kernel.entry_barrier;
  if (publish_input) kernel.entry_barrier = false;
  const int64_t signature = WithPlan(
      ReductionSignature(kind, in.dtype(), in.num_elements(), aux,
                         symmetric_output, reads_peer_inputs ? &in : nullptr),
      plan_bits);
  PublishCall(NotedGroupOf(g), options.check_peers ? signature : 0,
              /*by_channel=*/false, NextPlanPieces());
  return RunKernel(kernel, [&]() -> absl::Status {
    // The board: one line, so that no other data shares it. Every
    // member allocates it at the same point, before the barrier that
    // publishes the address stored into it. No peer reads this line
    // before that barrier (a previous call's readers have signalled
    // that they are done).
    std::optional<ArrayRef> board;
    if (publish_input) {
      MESHDMA_ASSIGN_OR_RETURN(board, AllocateSymmetric<int64_t>({8}));
      const std::byte* address = in.data();
      std::memcpy(board->data(), &address, sizeof(address));
    }
    if (barrier_in_body) MESHDMA_RETURN_IF_ERROR(device_barrier());
    MESHDMA_RETURN_IF_ERROR(EnterKernel(
        name, g, options.check_peers && (at_entry || !one_shot), signature));
    return body(options.check_peers && !at_entry,
                board.has_value() ? &*board : nullptr);
  });
}

absl::StatusOr<std::vector<ArrayRef>> MemberViews(const Group& g,
                                                  const ArrayRef& a) {
  std::vector<ArrayRef> views(g.size());
  for (int i = 0; i < g.size(); ++i) {
    if (i == g.index) {
      views[i] = a;
      continue;
    }
    MESHDMA_ASSIGN_OR_RETURN(
        views[i], peer_view(a, DeviceId(g.members[i]), DeviceIdType::kLogical));
  }
  return views;
}

absl::StatusOr<std::vector<MemberInput>> MemberInputs(const Group& g,
                                                      const ArrayRef& own,
                                                      const ArrayRef& shared,
                                                      const ArrayRef* board) {
  std::vector<MemberInput> inputs(g.size());
  inputs[g.index] = {own.data(), g.members[g.index]};
  if (board == nullptr) {
    MESHDMA_ASSIGN_OR_RETURN(std::vector<ArrayRef> views,
                             MemberViews(g, shared));
    for (int i = 0; i < g.size(); ++i) {
      if (i != g.index) inputs[i] = {views[i].data(), g.members[i]};
    }
    return inputs;
  }
  MESHDMA_ASSIGN_OR_RETURN(std::vector<ArrayRef> boards,
                           MemberViews(g, *board));
  for (int i = 0; i < g.size(); ++i) {
    if (i == g.index) continue;
    // Stored before the entry barrier, which this device has passed.
    std::byte* address = nullptr;
    std::memcpy(&address, boards[i].data(), sizeof(address));
    inputs[i] = {address, g.members[i]};
  }
  return inputs;
}

namespace {

// One contiguous store of step 2.
struct BlockStore {
  const std::byte* source;
  std::byte* destination;
  int64_t bytes;
};

// Step 2's contiguous stores, in order; from kDirectChunkMinStoredBytes in
// all, kDirectChunkBytes of every store before the next kDirectChunkBytes
// (see direct.h). With `stream`, by streaming stores.
void StoreBlocks(std::span<const BlockStore> stores, bool stream) {
  int64_t stored = 0, longest = 0;
  for (const BlockStore& s : stores) {
    stored += s.bytes;
    longest = std::max(longest, s.bytes);
  }
  const int64_t chunk =
      stored >= kDirectChunkMinStoredBytes ? kDirectChunkBytes : longest;
  for (int64_t offset = 0; offset < longest; offset += chunk) {
    for (const BlockStore& s : stores) {
      if (offset >= s.bytes) continue;
      const int64_t length = std::min(chunk, s.bytes - offset);
      if (stream) {
        StreamStore(s.source + offset, s.destination + offset, length);
      } else {
        std::memcpy(s.destination + offset, s.source + offset, length);
      }
    }
  }
  if (stream) _mm_sfence();
}

}  // namespace

absl::Status DirectAllGather(const Group& g, const ArrayRef& in,
                             const ArrayRef& out) {
  std::vector<int64_t> begins(g.size() + 1);
  for (int i = 0; i <= g.size(); ++i) begins[i] = i * in.num_elements();
  MESHDMA_ASSIGN_OR_RETURN(Semaphore done, AllocateDone());
  return DirectAllGather(g, in, out, begins, done);
}

absl::Status DirectAllGather(const Group& g, const ArrayRef& own,
                             const ArrayRef& out,
                             std::span<const int64_t> begins, Semaphore done) {
  MESHDMA_ASSIGN_OR_RETURN(std::vector<ArrayRef> outs, MemberViews(g, out));
  const int64_t elem = DTypeSize(out.dtype());
  const int64_t offset = begins[g.index] * elem;
  const int64_t bytes = (begins[g.index + 1] - begins[g.index]) * elem;
  std::vector<BlockStore> stores;
  stores.reserve(g.size());
  // Starting with the next member, so that not everyone writes to member 0
  // first; my own block last (none when `own` already is it).
  for (int k = 1; k <= g.size(); ++k) {
    std::byte* block = outs[g.PositionAt(k)].data() + offset;
    if (block != own.data()) stores.push_back({own.data(), block, bytes});
  }
  StoreBlocks(stores, out.size_bytes() >= kDirectGatherStreamMinBytes);
  return DirectFinish(g, done);
}

absl::Status DirectShareBlocks(
    const Group& g, const ArrayRef& out,
    std::span<const std::pair<int64_t, int64_t>> blocks, Semaphore done) {
  MESHDMA_ASSIGN_OR_RETURN(std::vector<ArrayRef> outs, MemberViews(g, out));
  const int64_t elem = DTypeSize(out.dtype());
  std::vector<BlockStore> stores;
  stores.reserve(blocks.size() * (g.size() - 1));
  // Starting with the next member, as DirectAllGather.
  for (int k = 1; k < g.size(); ++k) {
    std::byte* peer = outs[g.PositionAt(k)].data();
    for (const auto& [begin, length] : blocks) {
      stores.push_back(
          {out.data() + begin * elem, peer + begin * elem, length * elem});
    }
  }
  StoreBlocks(stores, out.size_bytes() >= kDirectGatherStreamMinBytes);
  return DirectFinish(g, done);
}

absl::Status DirectAllToAll(
    const Group& g, const ArrayRef& in,
    const std::function<ArrayRef(int)>& block,
    const std::function<absl::StatusOr<ArrayRef>(int)>& out_of,
    const std::function<ArrayRef(const ArrayRef&, int)>& slot) {
  MESHDMA_ASSIGN_OR_RETURN(Semaphore done, AllocateDone());
  MESHDMA_ASSIGN_OR_RETURN(
      Semaphore local_sem,
      AllocateSemaphore(SemaphoreType::kDma, "all_to_all local"));
  std::vector<BlockStore> stores;
  stores.reserve(g.size());
  // Starting with the next member, as DirectAllGather; my own block last.
  // Strided blocks go at once, by a local DMA; contiguous ones after, in
  // chunks.
  for (int k = 1; k <= g.size(); ++k) {
    const int j = g.PositionAt(k);
    const ArrayRef src = block(j);
    if (src.num_elements() == 0) continue;
    MESHDMA_ASSIGN_OR_RETURN(const ArrayRef out_j, out_of(j));
    ArrayRef dst_out = out_j;
    if (j != g.index) {
      MESHDMA_ASSIGN_OR_RETURN(dst_out, peer_view(out_j, DeviceId(g.members[j]),
                                                  DeviceIdType::kLogical));
    }
    const ArrayRef dst = slot(dst_out, g.index);
    if (src.is_contiguous() && dst.is_contiguous()) {
      stores.push_back({src.data(), dst.data(), src.size_bytes()});
      continue;
    }
    AsyncCopyDescriptor copy = make_async_copy(src, dst, local_sem);
    MESHDMA_RETURN_IF_ERROR(copy.start());
    MESHDMA_RETURN_IF_ERROR(copy.wait());
  }
  StoreBlocks(stores, in.size_bytes() >= kDirectAllToAllStreamMinBytes);
  return DirectFinish(g, done);
}

namespace {

// Swaps `bytes` at `a` with `bytes` at `b` (disjoint) through a buffer on
// the stack, which stays in L1.
void SwapBytes(std::byte* a, std::byte* b, int64_t bytes) {
  alignas(64) std::byte buffer[kDirectSwapChunkBytes];
  for (int64_t at = 0; at < bytes; at += kDirectSwapChunkBytes) {
    const int64_t m = std::min(kDirectSwapChunkBytes, bytes - at);
    std::memcpy(buffer, a + at, m);
    std::memcpy(a + at, b + at, m);
    std::memcpy(b + at, buffer, m);
  }
}

}  // namespace

absl::Status DirectSwapBlocks(const Group& g, const ArrayRef& out,
                              int64_t block_bytes) {
  MESHDMA_ASSIGN_OR_RETURN(Semaphore done, AllocateDone());
  MESHDMA_ASSIGN_OR_RETURN(std::vector<ArrayRef> outs, MemberViews(g, out));
  const int r = g.index;
  // The lower position of a pair swaps [0, half), the higher [half, end).
  const int64_t half = block_bytes / 2 / 64 * 64;
  // Starting with the next member, as DirectAllGather.
  for (int k = 1; k < g.size(); ++k) {
    const int j = g.PositionAt(k);
    const int64_t begin = r < j ? 0 : half;
    const int64_t end = r < j ? half : block_bytes;
    SwapBytes(outs[r].data() + j * block_bytes + begin,
              outs[j].data() + r * block_bytes + begin, end - begin);
  }
  return DirectFinish(g, done);
}

namespace {

// The first and one-past-last byte that the non-empty view `a` reaches.
std::pair<const std::byte*, const std::byte*> Span(const ArrayRef& a) {
  int64_t low = 0, high = 0;
  for (int d = 0; d < a.rank(); ++d) {
    const int64_t reach = (a.dim(d) - 1) * a.strides()[d];
    (reach < 0 ? low : high) += reach;
  }
  const int64_t elem = DTypeSize(a.dtype());
  return {a.data() + low * elem, a.data() + (high + 1) * elem};
}

}  // namespace

bool ViewsOverlap(const ArrayRef& a, const ArrayRef& b) {
  if (a.num_elements() == 0 || b.num_elements() == 0) return false;
  const auto [a_begin, a_end] = Span(a);
  const auto [b_begin, b_end] = Span(b);
  return a_begin < b_end && b_begin < a_end;
}

int64_t SegmentRowBytes(const ArrayRef& in, int n) {
  const int64_t largest = (in.num_elements() + n - 1) / n;
  return (largest * DTypeSize(in.dtype()) + 63) / 64 * 64;
}

absl::StatusOr<ArrayRef> ShareSegments(const Group& g, const ArrayRef& in) {
  const int n = g.size();
  const int64_t row_bytes = SegmentRowBytes(in, n);
  MESHDMA_ASSIGN_OR_RETURN(
      ArrayRef rows, AllocateSymmetric(DType::kU8, {(n - 1) * row_bytes}));
  MESHDMA_ASSIGN_OR_RETURN(
      Semaphore ready,
      AllocateSemaphore(SemaphoreType::kRegular, "direct segments ready"));
  MESHDMA_ASSIGN_OR_RETURN(std::vector<ArrayRef> peer_rows,
                           MemberViews(g, rows));
  const int64_t elem = DTypeSize(in.dtype());
  std::vector<BlockStore> stores;
  stores.reserve(n - 1);
  // Starting with the next member, as DirectAllGather.
  for (int k = 1; k < n; ++k) {
    const int j = g.PositionAt(k);
    const int64_t b = PartBegin(in.num_elements(), n, j);
    const int64_t e = PartBegin(in.num_elements(), n, j + 1);
    stores.push_back({in.data() + b * elem,
                      peer_rows[j].data() + SegmentRow(g.index, j) * row_bytes,
                      (e - b) * elem});
  }
  StoreBlocks(stores, /*stream=*/false);
  // The handshake of step 3, on `ready`: my stores into the peers' rows are
  // published, and every peer's into mine are done.
  MESHDMA_RETURN_IF_ERROR(DirectFinish(g, ready));
  return rows;
}

absl::StatusOr<Semaphore> AllocateDone() {
  return AllocateSemaphore(SemaphoreType::kRegular, "direct done");
}

absl::Status DirectFinish(const Group& g, Semaphore done) {
  const int n = g.size();
  for (int j = 1; j < n; ++j) {
    MESHDMA_RETURN_IF_ERROR(
        semaphore_signal(done, 1, DeviceId(g.Peer(j)), DeviceIdType::kLogical));
  }
  return semaphore_wait(done, n - 1);
}

}  // namespace meshdma::collectives_internal
