#include "meshdma/dma/internal/allocation_log.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace meshdma::dma_internal {

std::string AllocationRecord::ToString() const {
  const std::string where = absl::StrCat(persistent ? " (persistent)" : "",
                                         " at heap offset ", offset);
  if (semaphores.has_value()) {
    return absl::StrCat(semaphore_count, " ", SemaphoreTypeName(*semaphores),
                        semaphore_count == 1 ? " semaphore" : " semaphores",
                        where);
  }
  return absl::StrCat(
      DTypeName(dtype), "[",
      absl::StrJoin(std::span<const int64_t>(dims.data(), rank), ","), "]",
      where);
}

bool AllocationRecord::SameLayout(const AllocationRecord& other) const {
  return offset == other.offset && bytes == other.bytes &&
         persistent == other.persistent && semaphores == other.semaphores &&
         semaphore_count == other.semaphore_count;
}

void AllocationLog::Reset() {
  hash_ = 0;
  count_ = 0;
  std::lock_guard<std::mutex> lock(mu_);
  kept_.clear();
  next_ = 0;
}

void AllocationLog::Rewind(const Mark& m) {
  if (m.count == count_) return;
  hash_ = m.hash;
  count_ = m.count;
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<AllocationRecord> live;
  for (size_t i = 0; i < kept_.size(); ++i) {
    const AllocationRecord& r = kept_[(next_ + i) % kept_.size()];
    if (r.index < m.count) live.push_back(r);
  }
  kept_ = std::move(live);
  next_ = 0;
}

// splitmix64's finaliser over the running hash: order-sensitive and cheap.
void AllocationLog::Mix(uint64_t v) {
  uint64_t z = hash_ + v + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  hash_ = z ^ (z >> 31);
}

void AllocationLog::NoteArray(int64_t offset, int64_t bytes, DType dtype,
                              std::span<const int64_t> shape, bool persistent) {
  // Only the offset (and below, a semaphore array's type) enters the hash:
  // an allocation of another shape at the same offset is harmless until it
  // shifts the next one.
  Mix(static_cast<uint64_t>(offset) * 2 + (persistent ? 1 : 0));
  AllocationRecord r;
  r.index = count_++;
  r.offset = offset;
  r.bytes = bytes;
  r.dtype = dtype;
  r.rank = static_cast<int>(std::min<size_t>(shape.size(), kMaxRank));
  std::copy(shape.begin(), shape.begin() + r.rank, r.dims.begin());
  r.persistent = persistent;
  std::lock_guard<std::mutex> lock(mu_);
  if (kept_.size() < kKept) {
    kept_.push_back(r);
  } else {
    kept_[next_] = r;
    next_ = (next_ + 1) % kKept;
  }
}

void AllocationLog::MarkSemaphores(SemaphoreType type, int count) {
  Mix((static_cast<uint64_t>(count) << 8) | static_cast<uint64_t>(type));
  std::lock_guard<std::mutex> lock(mu_);
  if (kept_.empty()) return;
  AllocationRecord& last = kept_[(next_ + kept_.size() - 1) % kept_.size()];
  last.semaphores = type;
  last.semaphore_count = count;
}

std::vector<AllocationRecord> AllocationLog::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<AllocationRecord> out;
  out.reserve(kept_.size());
  for (size_t i = 0; i < kept_.size(); ++i) {
    out.push_back(kept_[(next_ + i) % kept_.size()]);
  }
  return out;
}

namespace {

const AllocationRecord* Find(std::span<const AllocationRecord> records,
                             int64_t index) {
  for (const AllocationRecord& r : records) {
    if (r.index == index) return &r;
  }
  return nullptr;
}

}  // namespace

std::string AllocationLog::DescribeDifference(
    std::span<const AllocationRecord> mine, int64_t mine_count,
    const std::string& mine_name, std::span<const AllocationRecord> theirs,
    int64_t theirs_count, const std::string& theirs_name) {
  const int64_t first =
      std::max(mine.empty() ? mine_count : mine[0].index,
               theirs.empty() ? theirs_count : theirs[0].index);
  const int64_t last = std::max(mine_count, theirs_count);
  auto describe = [](const AllocationRecord* r) {
    return r == nullptr ? std::string("nothing") : r->ToString();
  };
  for (int64_t i = first; i < last; ++i) {
    const AllocationRecord* a = Find(mine, i);
    const AllocationRecord* b = Find(theirs, i);
    if (a != nullptr && b != nullptr && a->SameLayout(*b)) {
      continue;
    }
    return absl::StrCat("allocation #", i, " is ", describe(a), " on ",
                        mine_name, " but ", describe(b), " on ", theirs_name);
  }
  return absl::StrCat(mine_name, " made ", mine_count, " allocations and ",
                      theirs_name, " ", theirs_count,
                      "; they differ before the last ", kKept, " of them");
}

}  // namespace meshdma::dma_internal
