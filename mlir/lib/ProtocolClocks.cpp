// The fast proof of meshdma-verify-protocol's ordering checks (the entry
// race and data races), by vector clocks.
//
// 1. One run of `calls` back-to-back calls (a work list: a device runs until
//    it blocks; a credit or a completed rendezvous wakes it) carries a
//    vector clock per device: entry d of device e's clock is how many of
//    d's events precede e's current point in EVERY schedule. A credit
//    carries its issuer's clock; a barrier or collective joins its members'.
// 2. A wait joins only the credits it is sure to include. The credits of
//    one issuer into one slot form a chain that lands in issue order (a
//    DMA's completions into one semaphore in the order its issuer started
//    them; signals too). A wait that brings the slot's consumption to W has
//    seen, of chain o, at least W minus what the other chains can have
//    landed before it: their credits not known to follow the wait. Those
//    are known from the previous run, so the runs repeat until they agree
//    (each is sound; each knows more). Credits in order form runs, and a
//    run's sure credits are its prefix (found by bisection), so a wait
//    costs the runs it crosses, the credits it includes and one join: not
//    the chain's pending credits.
// 3. Each access is checked, in the run's order, FastTrack-style against
//    the last write of its bytes and the reads since: a local access
//    (d, p) precedes B when B's clock holds more than p events of d; a
//    DMA's access ends at the first wait sure to include its completion
//    (on the target for its write; on the target or issuer for its source
//    read).
// 4. The entry race: a push into device R from its call c needs R's first
//    event of call c in the pusher's clock (the barrier semaphore aside).
// 5. A kernel no run proves goes to the exact check (ProtocolRaces.cpp),
//    which reports the race or proves there is none: a wait's clock knows
//    only what every credit it may include knows in common, which a credit
//    set chosen among alternatives (one chain or another) can miss.
#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <string>

#include "ProtocolAccesses.h"
#include "ProtocolTrace.h"
#include "llvm/ADT/DenseMap.h"

namespace meshdma::ir {
namespace {

// A vector clock shared copy-on-write; its owner's own entry is kept apart.
using Clock = std::shared_ptr<std::vector<int32_t>>;

// A device's clock as of one of its events: entry `self` is `own`.
struct Stamp {
  Clock clock;
  int self;
  int64_t own;
  int64_t At(int d) const { return d == self ? own : (*clock)[d]; }
};

// A device's credits to one of its slots, as SeedOrder replays its trace.
struct SelfCredits {
  std::vector<int64_t> amounts, reads;  // per credit; a read may be -1
  std::vector<char> sure;  // per credit: a wait is sure to have included it
  int64_t all = 0, consumed = 0;
  size_t first = 0;  // the credits before it are sure to have been included
};

// A credit issued and not yet sure to be included by a wait.
struct Pending {
  Stamp stamp;
  int64_t read, write;  // a DMA's access instances it ends, or -1
  int write_owner;      // the DMA's target
  bool done = false;    // a wait is sure to have included it
};

// The credits of one issuer into one slot of one device, over all calls, in
// issue order.
struct Chain {
  std::vector<int64_t> prefix{0};  // prefix[j]: the amounts of credits < j
  // after[j]: how many of the target's events credit j is known to follow
  // (from the previous run; non-decreasing in j); next: this run's.
  std::vector<int64_t> after, next;
  // ordered[j]: credit j lands after credit j - 1 (previous run; this run's
  // in ordered_next). Signals arrive in order; a DMA's completion after the
  // previous one's only when its issuer saw that one complete first.
  std::vector<char> ordered, ordered_next;
  // run_end[j]: the first credit after j not in order (by `ordered`), or
  // the chain's length: credits j..run_end[j]-1 land in order.
  std::vector<int64_t> run_end;
  std::vector<Pending> issued;  // this run's credits so far
  std::vector<int64_t> breaks;  // the issued credits not in order, ascending
  int64_t first = 0;            // the first credit not yet sure
};

constexpr int kMaxRuns = 3;

class ClockChecker {
 public:
  ClockChecker(const std::vector<Trace>& traces, int calls, bool entry_race)
      : traces_(traces),
        calls_(calls),
        entry_race_(entry_race),
        accesses_(traces, calls) {
    n_ = static_cast<int>(traces.size());
    slots_ = 1;
    for (const Trace& t : traces) slots_ = std::max(slots_, t.num_slots);
    len_.resize(n_);
    for (int d = 0; d < n_; ++d)
      len_[d] = static_cast<int64_t>(traces[d].events.size());
    BuildChains();
  }

  // What the last run learned of the chains' order.
  void Export(ChainOrder& order) const {
    for (auto [key, k] : chain_of_) {
      int issuer = static_cast<int>(key % n_);
      int64_t slot = key / n_;
      order[{static_cast<int>(slot / slots_), static_cast<int>(slot % slots_),
             issuer}] = chains_[k].ordered;
    }
  }

  // True when no run finds a race; false when the last one still does.
  bool Proves(int64_t& steps) {
    // A run that finds no race proves there is none; another run can only
    // order more.
    for (int run = 1; run <= kMaxRuns; ++run) {
      Run();
      steps += steps_;
      if (!race_op_ && race_b_ < 0) return true;
      bool settled = true;
      for (Chain& c : chains_) {
        settled &= c.after == c.next && c.ordered == c.ordered_next;
        c.after.swap(c.next);
        c.ordered.swap(c.ordered_next);
      }
      if (settled) break;
    }
    return false;
  }

 private:
  //===------------------------------------------------------------------===//
  // Accesses and chains
  //===------------------------------------------------------------------===//
  int64_t Slot(int d, int slot) const {
    return static_cast<int64_t>(d) * slots_ + slot;
  }
  int64_t ChainKey(int target, int slot, int issuer) const {
    return Slot(target, slot) * n_ + issuer;
  }

  void AddCredit(int target, int slot, int issuer, int64_t amount, int64_t at,
                 bool signal) {
    auto [it, fresh] = chain_of_.try_emplace(ChainKey(target, slot, issuer),
                                             static_cast<int>(chains_.size()));
    if (fresh) {
      chains_.emplace_back();
      auto& list = slot_chains_[Slot(target, slot)];
      list.push_back(it->second);
    }
    Chain& c = chains_[it->second];
    c.prefix.push_back(c.prefix.back() + amount);
    // A device's credits to itself follow its earlier events; signals land
    // in order.
    c.after.push_back(target == issuer ? at : -1);
    c.ordered.push_back(signal);
  }
  void BuildChains() {
    for (int o = 0; o < n_; ++o)
      for (int call = 0; call < calls_; ++call)
        for (auto [i, e] : llvm::enumerate(traces_[o].events)) {
          int64_t at = call * len_[o] + static_cast<int64_t>(i);
          bool signal = e.kind == EvKind::kSignal;
          if (signal || e.kind == EvKind::kDmaStart)
            AddCredit(e.target, e.slot, o, e.amount, at, signal);
          if (e.kind == EvKind::kDmaStart && e.send_slot >= 0)
            AddCredit(o, e.send_slot, o, e.amount, at, false);
        }
    for (int o = 0; o < n_; ++o) SeedOrder(o);
    for (Chain& c : chains_) {
      c.next = c.after;
      c.ordered_next = c.ordered;
    }
  }

  // Which of device o's DMAs follow its own wait for the previous DMA of the
  // same chain, from its trace alone: a wait on a slot only o credits (a
  // send slot, a local DMA's) includes the credits the rule of step 2 says,
  // with every earlier credit of o landable. The first run starts from it.
  void SeedOrder(int o) {
    llvm::DenseMap<int, int64_t> last_read;  // chain -> its last DMA's read
    llvm::DenseMap<int, SelfCredits> self;   // slot -> o's credits to it
    llvm::DenseSet<int64_t> seen;  // reads whose completion o has waited for
    std::vector<int64_t> issued(chains_.size(), 0);
    auto credit = [&](int target, int slot, int64_t read, int64_t amount) {
      int k = chain_of_.find(ChainKey(target, slot, o))->second;
      auto [it, fresh] = last_read.try_emplace(k, read);
      chains_[k].ordered[issued[k]++] = !fresh && seen.count(it->second);
      it->second = read;
      if (target != o) return;
      SelfCredits& mine = self[slot];
      mine.amounts.push_back(amount);
      mine.reads.push_back(read);
      mine.sure.push_back(0);
      mine.all += amount;
    };
    for (int64_t call = 0; call < calls_; ++call)
      for (const Event& e : traces_[o].events) {
        if (e.kind == EvKind::kSignal) {
          ++issued[chain_of_.find(ChainKey(e.target, e.slot, o))->second];
        } else if (e.kind == EvKind::kDmaStart) {
          int64_t read = Id(o, call, e.read_access);
          credit(e.target, e.slot, read, e.amount);
          if (e.send_slot >= 0) credit(o, e.send_slot, read, e.amount);
        } else if (e.kind == EvKind::kWaitRecv || e.kind == EvKind::kWaitSend) {
          const auto& list = slot_chains_[Slot(o, e.slot)];
          auto it = self.find(e.slot);
          if (list.size() != 1 || it == self.end()) continue;
          SeedWait(it->second, chains_[list[0]].ordered, e.amount, seen);
        }
      }
  }
  // A wait of `amount` on a slot credited by one chain of o's own, whose
  // credits so far are `mine`: the reads of the credits it is sure to
  // include go to `seen`. Those before `mine.first` went there already.
  static void SeedWait(SelfCredits& mine, const std::vector<char>& ordered,
                       int64_t amount, llvm::DenseSet<int64_t>& seen) {
    int64_t spare = mine.all - (mine.consumed += amount), run = 0;
    size_t size = mine.amounts.size();
    for (size_t j = size; j-- > mine.first;) {
      run = mine.amounts[j] + (j + 1 < size && ordered[j + 1] ? run : 0);
      if (run <= spare || mine.sure[j]) continue;
      mine.sure[j] = 1;
      if (mine.reads[j] >= 0) seen.insert(mine.reads[j]);
    }
    while (mine.first < size && mine.sure[mine.first]) ++mine.first;
  }

  //===------------------------------------------------------------------===//
  // 1. The run
  //===------------------------------------------------------------------===//
  void Run() {
    pos_.assign(n_, 0);
    index_.assign(n_, 0);
    call_.assign(n_, 0);
    counts_.Reset(n_, slots_);
    consumed_.assign(static_cast<size_t>(n_) * slots_, 0);
    meets_.Reset(n_);
    cursor_index_.assign(n_, 0);
    cursor_call_.assign(n_, 0);
    for (int d = 0; d < n_; ++d)
      if (traces_[d].accesses.empty()) cursor_call_[d] = calls_;
    clocks_.clear();
    for (int d = 0; d < n_; ++d)
      clocks_.push_back(std::make_shared<std::vector<int32_t>>(n_, 0));
    for (Chain& c : chains_) {
      c.issued.clear();
      c.breaks.clear();
      c.first = 0;
      int64_t size = static_cast<int64_t>(c.ordered.size());
      c.run_end.assign(size, size);
      for (int64_t j = size - 2; j >= 0; --j)
        c.run_end[j] = c.ordered[j + 1] ? c.run_end[j + 1] : j + 1;
    }
    observer_.assign(2 * accesses_.size(), {-1, -1});
    shadow_.Clear();
    race_op_ = nullptr;
    race_b_ = -1;
    steps_ = 0;
    for (int d = 0; d < n_; ++d) counts_.Wake(d);
    counts_.Drain([&](int d) { Advance(d); }, [] { return false; });
  }

  // How many of d's events device `e`'s clock knows.
  int64_t Known(int e, int d) const {
    return e == d ? pos_[e] : (*clocks_[e])[d];
  }

  void Advance(int d) {
    int64_t end = len_[d] * calls_;
    while (pos_[d] < end) {
      Touch(d, false);
      const Event& e = traces_[d].events[index_[d]];
      switch (e.kind) {
        case EvKind::kDmaStart: {
          Touch(d, true);
          int64_t call = call_[d];
          int64_t read = Id(d, call, e.read_access);
          int64_t write = Id(d, call, e.write_access);
          Credit(d, e.target, e.slot, e.amount, read, write, e.target);
          if (e.send_slot >= 0)
            Credit(d, d, e.send_slot, e.amount, read, write, e.target);
          break;
        }
        case EvKind::kSignal:
          Credit(d, e.target, e.slot, e.amount, -1, -1, -1);
          break;
        case EvKind::kWait:
        case EvKind::kWaitRecv:
        case EvKind::kWaitSend:
          if (!counts_.Take(d, e.slot, e.amount)) return;
          Include(d, e.slot, e.amount);
          break;
        case EvKind::kBarrier:
        case EvKind::kCollective:
          if (!Meet(d, e)) return;
          break;
      }
      ++pos_[d];
      if (++index_[d] == len_[d]) {
        index_[d] = 0;
        ++call_[d];
      }
      ++steps_;
    }
    Touch(d, false);
  }

  int64_t Id(int d, int64_t call, int32_t index) const {
    return accesses_.Id(d, call, index);
  }

  // A credit from `from`'s current event into `slot` of `target`, carrying
  // `from`'s clock. 4. A push into a device that has not entered its call
  // is the entry race.
  void Credit(int from, int target, int slot, int64_t amount, int64_t read,
              int64_t write, int write_owner) {
    counts_.Credit(target, slot, amount);
    Chain& c = chains_[chain_of_.find(ChainKey(target, slot, from))->second];
    size_t j = c.issued.size();
    c.next[j] = target == from ? pos_[from] : Known(from, target);
    // In order after the previous credit: a signal; a DMA whose issuer has
    // seen the previous DMA of the chain complete.
    c.ordered_next[j] =
        read < 0 || (j > 0 && c.issued[j - 1].read >= 0 &&
                     observer_[2 * c.issued[j - 1].read].first == from);
    if (!c.ordered_next[j]) c.breaks.push_back(static_cast<int64_t>(j));
    c.issued.push_back(
        {{clocks_[from], from, pos_[from] + 1}, read, write, write_owner});
    if (!entry_race_ || target == from || slot == kBarrierSlot || race_op_)
      return;
    int64_t call = call_[from];
    if (len_[target] && Known(from, target) >= call * len_[target] + 1) return;
    race_op_ = traces_[from].events[index_[from]].op;
    race_from_ = from;
    race_to_ = target;
    race_call_ = static_cast<int>(call) + 1;
  }

  // 2. The wait of `amount` on `slot` of device d (at its current event)
  // joins the credits it is sure to include.
  void Include(int d, int slot, int64_t amount) {
    int64_t need = consumed_[Slot(d, slot)] += amount;
    const auto& list = slot_chains_[Slot(d, slot)];
    int64_t w = pos_[d];
    // 2a. What can have landed before the wait: per chain, the credits
    //     not known to follow it.
    int64_t all = 0;
    for (int k : list) {
      Chain& c = chains_[k];
      auto it = std::upper_bound(c.after.begin(), c.after.end(), w);
      landable_[k] = it - c.after.begin();
      all += c.prefix[landable_[k]];
    }
    // 2b. Credit j is sure when what can land without it (and without the
    //     credits that land after it) is less than the wait needs.
    for (int k : list) IncludeSure(d, chains_[k], landable_[k], all - need);
  }
  // Of chain `c`'s first `end` credits, those a wait of device d with
  // `spare` credit to spare is sure to include. Credits in order form runs;
  // within a run [s, t) credit j is sure when its amount and those after
  // it in the run exceed `spare`: a prefix of the run, found by bisection.
  // A wait thus costs the runs it crosses and the credits it includes.
  void IncludeSure(int d, Chain& c, int64_t end, int64_t spare) {
    int64_t issued = c.issued.size(), top = std::min(end, issued);
    int64_t last = -1, w = pos_[d];
    auto brk = std::upper_bound(c.breaks.begin(), c.breaks.end(), c.first);
    int64_t s = brk == c.breaks.begin() ? 0 : *std::prev(brk);
    while (s < top) {
      // 1. The run's end: the next issued break; past the issued credits,
      //    the previous run's order.
      int64_t t = brk != c.breaks.end() ? *brk++ : issued;
      if (t == issued && issued < end && c.ordered[issued])
        t = c.run_end[issued];
      t = std::min(t, end);
      // 2. Its sure prefix [s, sure).
      int64_t sure =
          std::lower_bound(c.prefix.begin() + s, c.prefix.begin() + t,
                           c.prefix[t] - spare) -
          c.prefix.begin();
      // 3. Each issued credit of it not included yet ends its accesses.
      for (int64_t j = std::max(s, c.first); j < std::min(sure, top); ++j) {
        Pending& p = c.issued[j];
        if (p.done) continue;
        p.done = true;
        Observe(p.read, p.stamp.self == d ? 0 : 1, d, w);
        Observe(p.write, p.write_owner == d ? 0 : 1, d, w);
        last = j;
      }
      s = t;
    }
    // 4. Stamps grow along a chain: the latest sure credit's covers the rest.
    if (last >= 0) Join(d, c.issued[last].stamp);
    for (; c.first < issued && c.issued[c.first].done; ++c.first)
      c.issued[c.first].stamp.clock.reset();
  }
  // The first wait on device d (at its event w) sure to include a DMA's
  // completion ends its access `id`: entry 0 on the memory's owner, 1 on
  // the other device (the target, for a source read).
  void Observe(int64_t id, int side, int d, int64_t w) {
    if (id < 0) return;
    auto& o = observer_[2 * id + side];
    if (o.first < 0) o = {d, w};
  }
  // Device d's clock joins stamp `s`. A stamp of d's own is a no-op: its
  // clock only grows, and its own entry is its position. A shared clock is
  // replaced by the join, built in one pass.
  void Join(int d, const Stamp& s) {
    if (s.self == d) return;
    const int32_t* __restrict x = s.clock->data();
    const int n = n_;  // a local: the stores below cannot change it
    if (clocks_[d].use_count() > 1) {
      auto joined = std::make_shared<std::vector<int32_t>>(n);
      const int32_t* __restrict v = clocks_[d]->data();
      int32_t* __restrict j = joined->data();
      for (int i = 0; i < n; ++i) j[i] = v[i] < x[i] ? x[i] : v[i];
      clocks_[d] = std::move(joined);
    } else {
      int32_t* __restrict v = clocks_[d]->data();
      for (int i = 0; i < n; ++i) v[i] = v[i] < x[i] ? x[i] : v[i];
    }
    int32_t& own = (*clocks_[d])[s.self];
    own = std::max<int32_t>(own, static_cast<int32_t>(s.own));
  }

  // A barrier or collective: true once every member has arrived; the last
  // arrival joins the members' clocks.
  bool Meet(int d, const Event& e) {
    return meets_.Arrive(d, traces_[d], e, [&](llvm::ArrayRef<int> members) {
      auto joined = std::make_shared<std::vector<int32_t>>(n_, 0);
      int32_t* __restrict j = joined->data();
      for (int w : members) {
        const int32_t* __restrict x = clocks_[w]->data();
        for (int i = 0, n = n_; i < n; ++i) j[i] = j[i] < x[i] ? x[i] : j[i];
      }
      for (int w : members) j[w] = static_cast<int32_t>(pos_[w] + 1);
      for (int w : members) {
        clocks_[w] = joined;
        if (w != d) counts_.Wake(w);
      }
    });
  }

  //===------------------------------------------------------------------===//
  // 3. Accesses, FastTrack-style
  //===------------------------------------------------------------------===//
  // Checks device d's accesses at its current point: the local ones before
  // its next event, or (`dma`) those of the DMA it starts.
  void Touch(int d, bool dma) {
    const auto& accesses = traces_[d].accesses;
    while (cursor_call_[d] < calls_) {
      const Access& a = accesses[cursor_index_[d]];
      if (cursor_call_[d] * len_[d] + a.pos != pos_[d] || a.dma != dma) return;
      Inst b{d, static_cast<int>(cursor_call_[d]),
             static_cast<int>(cursor_index_[d])};
      int64_t id = Id(d, cursor_call_[d], b.index);
      if (++cursor_index_[d] == accesses.size()) {
        cursor_index_[d] = 0;
        ++cursor_call_[d];
      }
      asked_.clear();
      shadow_.Visit(id, a, [&](int64_t earlier, int64_t lo, int64_t hi) {
        Ask(earlier, id, b, a, lo, hi);
      });
    }
  }

  // Does access `a` (earlier in this run) happen before access `b`, which
  // overlaps it in [lo, hi)? Records the first pair that does not.
  void Ask(int64_t a_id, int64_t b_id, const Inst& b, const Access& ba,
           int64_t lo, int64_t hi) {
    if (llvm::is_contained(asked_, a_id)) return;
    asked_.push_back(a_id);
    Inst a = accesses_.Decode(a_id);
    const Access& aa = accesses_.Acc(a);
    if (!NeedsOrder(a, aa, b, ba)) return;
    bool ordered;
    if (!aa.dma) {
      ordered = Known(b.issuer, a.issuer) >= accesses_.AbsPos(a) + 1;
    } else {
      ordered = false;
      for (int side = 0; side < 2 && !ordered; ++side) {
        auto [t, w] = observer_[2 * a_id + side];
        ordered = t >= 0 && Known(b.issuer, t) >= w + 1;
      }
    }
    if (ordered || race_b_ >= 0) return;
    race_a_ = a_id;
    race_b_ = b_id;
    race_lo_ = lo;
    race_hi_ = hi;
  }

  const std::vector<Trace>& traces_;
  int calls_;
  bool entry_race_;
  int n_;
  int slots_;
  std::vector<int64_t> len_;
  AccessIndex accesses_;
  // Chains: by (target, slot, issuer); the chains of each (target, slot).
  std::vector<Chain> chains_;
  llvm::DenseMap<int64_t, int> chain_of_;
  llvm::DenseMap<int64_t, llvm::SmallVector<int, 2>> slot_chains_;
  llvm::DenseMap<int, int64_t> landable_;  // Include's scratch, per chain
  // One run.
  std::vector<int64_t> pos_, consumed_;
  JointCounts counts_;
  std::vector<int64_t> index_, call_;  // pos_ as (call, event of the call)
  Rendezvous meets_;
  std::vector<Clock> clocks_;
  // The next access instance of each device: call and index.
  std::vector<size_t> cursor_index_;
  std::vector<int64_t> cursor_call_;
  std::vector<std::pair<int, int64_t>> observer_;
  ByteShadow shadow_;
  std::vector<int64_t> asked_;
  int64_t steps_ = 0;
  // The first races of the run.
  mlir::Operation* race_op_ = nullptr;
  int race_from_ = -1, race_to_ = -1, race_call_ = 0;
  int64_t race_a_ = -1, race_b_ = -1, race_lo_ = 0, race_hi_ = 0;
};

}  // namespace

bool ProvedByClocks(const std::vector<Trace>& traces, int calls,
                    bool entry_race, int64_t& steps, ChainOrder* order) {
  ClockChecker checker(traces, calls, entry_race);
  if (checker.Proves(steps)) return true;
  checker.Export(*order);
  return false;
}

}  // namespace meshdma::ir
