// What both ordering checks of meshdma-verify-protocol share (the vector
// clocks of ProtocolClocks.cpp and the exact check of ProtocolRaces.cpp):
// access instances over `calls` calls, which pairs of accesses need
// happens-before, the per-byte shadow that yields those pairs, and the
// joint run's semaphore counts, work list and rendezvous. Internal to
// mlir/lib.
#ifndef MESHDMA_MLIR_LIB_PROTOCOLACCESSES_H_
#define MESHDMA_MLIR_LIB_PROTOCOLACCESSES_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "ProtocolTrace.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"

namespace meshdma::ir {

// One access of one call: (device whose trace holds it, call, index).
struct Inst {
  int issuer;
  int call;
  int index;
};

// Numbers the access instances of `calls` calls of every device: device d's
// come first by call, then by index in its trace.
class AccessIndex {
 public:
  AccessIndex(const std::vector<Trace>& traces, int calls) : traces_(traces) {
    int n = static_cast<int>(traces.size());
    base_.resize(n + 1, 0);
    len_.resize(n);
    for (int d = 0; d < n; ++d) {
      len_[d] = static_cast<int64_t>(traces[d].events.size());
      base_[d + 1] =
          base_[d] + static_cast<int64_t>(calls) * traces[d].accesses.size();
    }
  }

  // How many instances there are.
  int64_t size() const { return base_.back(); }
  // The first instance of device d.
  int64_t Base(int d) const { return base_[d]; }
  // Access `index` of d's trace in `call`; -1 for index -1 (no access).
  int64_t Id(int d, int64_t call, int32_t index) const {
    if (index < 0) return -1;
    return base_[d] + call * static_cast<int64_t>(traces_[d].accesses.size()) +
           index;
  }
  Inst Decode(int64_t id) const {
    int d = static_cast<int>(std::upper_bound(base_.begin(), base_.end(), id) -
                             base_.begin() - 1);
    int64_t rest = id - base_[d];
    int64_t per = static_cast<int64_t>(traces_[d].accesses.size());
    return {d, static_cast<int>(rest / per), static_cast<int>(rest % per)};
  }
  const Access& Acc(const Inst& i) const {
    return traces_[i.issuer].accesses[i.index];
  }
  // The position of the instance's event in its issuer's calls-long trace.
  int64_t AbsPos(const Inst& i) const {
    return i.call * len_[i.issuer] + Acc(i).pos;
  }

 private:
  const std::vector<Trace>& traces_;
  std::vector<int64_t> base_, len_;
};

// Whether accesses `a` and `b` (of overlapping bytes) need happens-before:
// one writes, one is a DMA's, they are not the two sides of one DMA, and
// `a` is not a device's own access before its own DMA (program order).
inline bool NeedsOrder(const Inst& a, const Access& aa, const Inst& b,
                       const Access& ba) {
  if (!aa.write && !ba.write) return false;
  if (!aa.dma && !ba.dma) return false;  // one device's code, in order
  if (aa.dma && ba.dma && a.issuer == b.issuer && a.call == b.call &&
      aa.pos == ba.pos)
    return false;  // the two sides of one DMA
  return aa.dma || a.issuer != b.issuer;
}

// The accesses of every buffer of every device so far, per byte segment:
// the last write and the reads since (local reads are in program order, so
// the last of them only). Visiting an access in a schedule's order yields
// the earlier ones that must happen before it (FastTrack's shadow).
class ByteShadow {
 public:
  void Clear() { buffers_.clear(); }

  // Records access `id` (`acc`) and calls `ask(earlier, lo, hi)` for each
  // earlier access it overlaps in [lo, hi) that it must follow: the last
  // write, and for a write the reads since. An earlier access may be asked
  // about more than once.
  template <typename Ask>
  void Visit(int64_t id, const Access& acc, Ask ask) {
    auto& segs = buffers_[{acc.owner, acc.root}];
    for (auto [lo, hi] : acc.bytes) {
      Split(segs, lo);
      Split(segs, hi);
      int64_t at = lo;
      auto it = segs.lower_bound(lo);
      while (at < hi) {
        if (it == segs.end() || it->first > at) {
          int64_t next = it == segs.end() ? hi : std::min(hi, it->first);
          it = segs.emplace_hint(it, at, Segment{next, -1, {}});
        }
        Segment& s = it->second;
        if (s.write >= 0) ask(s.write, it->first, s.hi);
        if (acc.write) {
          for (auto [r, dma] : s.reads) ask(r, it->first, s.hi);
          s.write = id;
          s.reads.clear();
        } else {
          if (!acc.dma)
            llvm::erase_if(s.reads, [](const auto& r) { return !r.second; });
          s.reads.push_back({id, acc.dma});
        }
        at = s.hi;
        ++it;
      }
    }
  }

 private:
  struct Segment {
    int64_t hi;
    int64_t write = -1;
    llvm::SmallVector<std::pair<int64_t, bool>, 2> reads;  // (id, dma)
  };
  static void Split(std::map<int64_t, Segment>& segs, int64_t x) {
    auto it = segs.upper_bound(x);
    if (it == segs.begin()) return;
    --it;
    if (it->first >= x || it->second.hi <= x) return;
    Segment right = it->second;
    it->second.hi = x;
    segs.emplace(x, std::move(right));
  }

  std::map<std::pair<int, int>, std::map<int64_t, Segment>> buffers_;
};

// The semaphore counts of a joint run and the work list of devices to run:
// a device runs until it blocks on a slot, and a credit into that slot (or
// a Wake) puts it back on the list.
class JointCounts {
 public:
  void Reset(int n, int slots) {
    slots_ = slots;
    counts_.assign(static_cast<size_t>(n) * slots, 0);
    blocked_.assign(n, -1);
    queued_.assign(n, 0);
    work_.clear();
    head_ = 0;
  }
  int64_t Count(int d, int slot) const { return counts_[Index(d, slot)]; }
  // Adds `amount` to `slot` of `target`, waking it if it waits there.
  void Credit(int target, int slot, int64_t amount) {
    counts_[Index(target, slot)] += amount;
    if (blocked_[target] == slot) Wake(target);
  }
  // Takes `amount` from `slot` of d; false (d now waits on the slot) when it
  // holds less.
  bool Take(int d, int slot, int64_t amount) {
    int64_t& c = counts_[Index(d, slot)];
    if (c < amount) {
      blocked_[d] = slot;
      return false;
    }
    c -= amount;
    blocked_[d] = -1;
    return true;
  }
  void Wake(int d) {
    if (queued_[d]) return;
    queued_[d] = 1;
    work_.push_back(d);
  }
  // Runs `advance(d)` for each device on the list, in order, until the list
  // is empty or `stop()`; a later call goes on from there.
  template <typename Advance, typename Stop>
  void Drain(Advance advance, Stop stop) {
    while (head_ < work_.size() && !stop()) {
      int d = work_[head_++];
      queued_[d] = 0;
      advance(d);
    }
    if (head_ == work_.size()) {
      work_.clear();
      head_ = 0;
    }
  }

 private:
  size_t Index(int d, int slot) const {
    return static_cast<size_t>(d) * slots_ + slot;
  }

  int slots_ = 1;
  std::vector<int64_t> counts_;
  std::vector<int> blocked_;  // the slot a device waits on, or -1
  std::vector<char> queued_;
  std::vector<int> work_;
  size_t head_ = 0;
};

// The barriers and collectives of a joint run: a device's k-th barrier
// meets every device's k-th; its k-th collective meets the k-th of the
// same group (named by its first member).
class Rendezvous {
 public:
  void Reset(int n) {
    n_ = n;
    key_.assign(n, -1);
    barriers_.assign(n, 0);
    collectives_.assign(n, 0);
    meets_.clear();
  }
  // Device d at its barrier or collective event `e` (of `trace`): true when
  // it may go on. The first call of d there is its arrival; the arrival
  // that completes the rendezvous gets `on_complete(members)`, the members
  // in order of arrival, itself last (the others are to be woken).
  template <typename OnComplete>
  bool Arrive(int d, const Trace& trace, const Event& e,
              OnComplete on_complete) {
    if (key_[d] < 0) {
      int size = n_;
      int64_t key;
      if (e.kind == EvKind::kBarrier) {
        key = 2 * barriers_[d]++;
      } else {
        const auto& members = trace.collectives[e.slot].members;
        key = 2 * (collectives_[d]++ * n_ + members.front()) + 1;
        size = static_cast<int>(members.size());
      }
      Meet& m = meets_[key];
      key_[d] = key;
      m.arrived.push_back(d);
      if (static_cast<int>(m.arrived.size()) < size) return false;
      on_complete(llvm::ArrayRef<int>(m.arrived));
      m.done = true;
    }
    if (!meets_[key_[d]].done) return false;
    key_[d] = -1;
    return true;
  }

 private:
  struct Meet {
    bool done = false;
    std::vector<int> arrived;
  };
  int n_ = 0;
  std::vector<int64_t> key_;  // the rendezvous a device is at, or -1
  std::vector<int64_t> barriers_, collectives_;
  llvm::DenseMap<int64_t, Meet> meets_;
};

}  // namespace meshdma::ir

#endif  // MESHDMA_MLIR_LIB_PROTOCOLACCESSES_H_
