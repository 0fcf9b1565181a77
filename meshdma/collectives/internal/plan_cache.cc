#include "meshdma/collectives/internal/plan_cache.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "meshdma/dma/symmetric_memory.h"

namespace meshdma::collectives_internal {
namespace {

// A cached plan with its key, copied out of the caller's views.
struct Entry {
  CollectiveKind kind;
  int aux;
  DType dtype;
  absl::InlinedVector<int64_t, 4> input_shape;
  absl::InlinedVector<int64_t, 4> output_shape;
  bool input_symmetric;
  const std::byte* output;
  std::vector<std::string> axes;
  CollectiveOptions options;
  std::vector<std::pair<int, int>> perm;
  PlannedCall call;
};

// This device thread's plans for the current Run, at most kEntries, the
// next to replace at `next`; made by the Run's first cached plan, deleted at
// its end.
constexpr int kEntries = 8;
struct Cache {
  std::vector<Entry> entries;
  int next = 0;
};
thread_local std::unique_ptr<Cache> t_cache;

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

bool Matches(const Entry& e, const CallKey& key) {
  auto same = [](std::span<const int64_t> a, std::span<const int64_t> b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  };
  return e.output == key.output.data() && e.kind == key.kind &&
         e.aux == key.aux && e.dtype == key.input.dtype() &&
         e.dtype == key.output.dtype() &&
         e.input_symmetric == key.input.is_symmetric() &&
         same(e.input_shape, key.input.shape()) &&
         same(e.output_shape, key.output.shape()) &&
         std::equal(e.axes.begin(), e.axes.end(), key.axes.begin(),
                    key.axes.end()) &&
         std::equal(e.perm.begin(), e.perm.end(), key.perm.begin(),
                    key.perm.end()) &&
         SameOptions(e.options, key.options);
}

}  // namespace

const PlannedCall* FindPlannedCall(const CallKey& key) {
  if (t_cache == nullptr || key.input.data() == nullptr) return nullptr;
  for (const Entry& e : t_cache->entries) {
    if (!Matches(e, key)) continue;
    // What Flatten and RequireSymmetric checked on the first call.
    if (!key.input.is_contiguous() || !key.output.is_contiguous() ||
        !key.output.is_symmetric()) {
      return nullptr;
    }
    return &e.call;
  }
  return nullptr;
}

void CachePlannedCall(const CallKey& key, PlannedCall call) {
  if (t_cache == nullptr) {
    if (!AtRunEnd([] { t_cache.reset(); }).ok()) return;
    t_cache = std::make_unique<Cache>();
    t_cache->entries.reserve(kEntries);
  }
  Entry entry{key.kind,
              key.aux,
              key.input.dtype(),
              {key.input.shape().begin(), key.input.shape().end()},
              {key.output.shape().begin(), key.output.shape().end()},
              key.input.is_symmetric(),
              key.output.data(),
              {key.axes.begin(), key.axes.end()},
              key.options,
              {key.perm.begin(), key.perm.end()},
              std::move(call)};
  std::vector<Entry>& entries = t_cache->entries;
  if (static_cast<int>(entries.size()) < kEntries) {
    entries.push_back(std::move(entry));
  } else {
    entries[t_cache->next] = std::move(entry);
  }
  t_cache->next = (t_cache->next + 1) % kEntries;
  // Each group views its own entry's axes, which outlive the caller's.
  for (Entry& e : entries) {
    e.call.group.axes = e.axes;
    if (e.call.next.has_value()) e.call.next->group.axes = e.axes;
  }
}

}  // namespace meshdma::collectives_internal
