// The device barrier: a dissemination barrier over the mesh whose signals
// also carry the devices' allocation fingerprints (and a compared value).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/internal/device.h"
#include "meshdma/dma/internal/runtime_impl.h"

namespace meshdma::dma_internal {
namespace {

// 30 bits of an allocation hash: two of them fit in one barrier signal.
constexpr int kFingerprintBits = 30;

constexpr uint64_t kFingerprintMask = (uint64_t{1} << kFingerprintBits) - 1;

uint64_t Fingerprint(uint64_t hash) {
  return (hash ^ (hash >> kFingerprintBits) ^ (hash >> 2 * kFingerprintBits)) &
         kFingerprintMask;
}

}  // namespace

absl::Status Device::Barrier() {
  MESHDMA_ASSIGN_OR_RETURN(const bool same, BarrierComparing(std::nullopt));
  if (same) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "device barrier on ", Name(),
      ": another device of the mesh entered a collective's kernel, which "
      "compares its call at entry, while this one entered a device barrier "
      "or a kernel's entry barrier; every device must make the same calls"));
}

absl::StatusOr<bool> Device::BarrierComparing(std::optional<uint64_t> value) {
  MESHDMA_ASSIGN_OR_RETURN(const Mesh* mesh, this->mesh());
  if (mesh->size() > (1 << kMaxBarrierRounds)) {
    return absl::InvalidArgumentError(
        absl::StrCat("device barrier on ", Name(), ": mesh of ", mesh->size(),
                     " devices exceeds 2^", kMaxBarrierRounds));
  }
  const uint64_t allocations = Fingerprint(heap_.allocations().hash());
  // The value, mixed with the allocations (a multiply-xorshift round, so
  // that values differing in any bit land on different fingerprints).
  uint64_t lo = allocations;
  if (value.has_value()) {
    uint64_t mixed =
        (heap_.allocations().hash() ^ *value) * 0x9E3779B97F4A7C15ull;
    mixed ^= mixed >> 29;
    lo = Fingerprint(mixed * 0xBF58476D1CE4E5B9ull);
  }
  uint64_t hi = lo;
  MESHDMA_RETURN_IF_ERROR(Disseminate(*mesh, &lo, &hi));
  if (lo == hi) return true;
  // Every device has seen the mismatch, but some may still wait for the
  // signals that tell them. A second barrier compares the allocations
  // alone: every device learns whether they or the values differ.
  uint64_t alo = allocations, ahi = allocations;
  absl::Status again = Disseminate(*mesh, &alo, &ahi);
  if (!again.ok()) return again;  // Another device failed first.
  // A third before anyone fails: a device leaving it knows that every
  // device has left the second, so the failure this mismatch causes (on
  // this device or another, a plain barrier meeting a compare, say) aborts
  // no device still waiting to learn its answer. An abort during it, from
  // such a failure, changes no answer.
  uint64_t done_lo = 0, done_hi = 0;
  Disseminate(*mesh, &done_lo, &done_hi).IgnoreError();
  if (alo != ahi) return AllocationMismatch(*mesh);
  return false;
}

absl::Status Device::Disseminate(const Mesh& mesh, uint64_t* lo, uint64_t* hi) {
  const int n = mesh.size();
  // Dissemination: in round k signal device (me + 2^k) mod n, wait for the
  // signal of device (me - 2^k) mod n. A partner can run at most one
  // barrier ahead (it cannot leave that one before this device arrives), so
  // alternate barriers use separate cells and each cell holds at most one
  // signal. The signal is 1 + (lo << 30 | hi): the least and greatest
  // allocation fingerprints the sender has seen; after the last round every
  // device has seen every fingerprint (min and max are idempotent), so all
  // agree on whether they differ.
  const int set = static_cast<int>(barrier_epoch_++ & 1);
  in_device_barrier_ = true;
  struct Leave {
    bool& flag;
    ~Leave() { flag = false; }
  } leave{in_device_barrier_};
  for (int k = 0, dist = 1; dist < n; ++k, dist *= 2) {
    const Semaphore sem(kBarrierCellsOffset + (2 * k + set) * kSemaphoreBytes,
                        SemaphoreType::kBarrier);
    MESHDMA_ASSIGN_OR_RETURN(int peer,
                             mesh.GlobalDevice((logical_id_ + dist) % n));
    const int64_t carried =
        static_cast<int64_t>((*lo << kFingerprintBits) | *hi);
    MESHDMA_RETURN_IF_ERROR(Signal(sem, 1 + carried, peer));
    // The signal arrives as one atomic add: wait for any of it, then take
    // the rest.
    MESHDMA_RETURN_IF_ERROR(Wait(sem, 1, WaitKind::kBarrier));
    MESHDMA_ASSIGN_OR_RETURN(int64_t rest, Read(sem));
    if (rest > 0) MESHDMA_RETURN_IF_ERROR(Wait(sem, rest, WaitKind::kBarrier));
    *lo = std::min(*lo, static_cast<uint64_t>(rest) >> kFingerprintBits);
    *hi = std::max(*hi, static_cast<uint64_t>(rest) & kFingerprintMask);
  }
  return absl::OkStatus();
}

absl::Status Device::AllocationMismatch(const Mesh& mesh) const {
  // Every device has left the barrier's waits behind it, so their
  // allocations happened before this read. Name a device of this process
  // whose sequence differs, when there is one.
  const std::vector<AllocationRecord> mine = heap_.allocations().Snapshot();
  std::string detail;
  for (int logical = 0; logical < mesh.size() && detail.empty(); ++logical) {
    const Device* peer =
        runtime_->LocalDevice(mesh.GlobalDevice(logical).value_or(-1));
    if (peer == nullptr || peer == this ||
        peer->heap_.allocations().hash() == heap_.allocations().hash()) {
      continue;
    }
    detail = AllocationLog::DescribeDifference(
        mine, heap_.allocations().count(), Name(),
        peer->heap_.allocations().Snapshot(), peer->heap_.allocations().count(),
        peer->Name());
  }
  if (detail.empty()) {
    // The other sequence is in another process: list this one's latest.
    std::vector<std::string> latest;
    for (size_t i = mine.size() > 4 ? mine.size() - 4 : 0; i < mine.size();
         ++i) {
      latest.push_back(absl::StrCat("allocation #", mine[i].index, " is ",
                                    mine[i].ToString()));
    }
    detail = absl::StrCat(
        "a device of another process made a different sequence; ", Name(),
        " made ", heap_.allocations().count(), " allocations, the latest: ",
        latest.empty() ? std::string("none") : absl::StrJoin(latest, "; "));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "symmetric allocations differ across mesh ", mesh.ToString(),
      " (found by the device barrier on ", Name(), "): ", detail,
      ". Every device must make the same sequence of symmetric allocations, "
      "so that the k-th has the same heap offset everywhere"));
}

}  // namespace meshdma::dma_internal
