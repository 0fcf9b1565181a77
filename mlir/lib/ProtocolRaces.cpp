// Happens-before over every schedule, for meshdma-verify-protocol: the entry
// race and data races. Vector clocks (ProtocolClocks.cpp) prove most kernels
// in one or two runs; a kernel they do not prove comes here, to the exact
// check, which reports the race or proves there is none.
//
// The system is monotone: waits are local and everything else only adds to
// counts, so holding one device back never lets another get further. Hence
// event y of device b happens after event i of device a in EVERY schedule
// exactly when, with a held before event i, the others' fixpoint stops b
// before y. A sweep of device a holds it before each of its events in turn
// (releasing one event at a time and running the others to their new
// fixpoint), so one sweep costs one joint run and answers every question
// "does (a, i) happen before (b, j)?".
//
// 1. Order run: one schedule, in which every access gets a time. Sorted by
//    it, the accesses of each byte are checked FastTrack-style against the
//    last write and the reads since, which yields the pairs to decide.
// 2. Sweeps. A local access (a, p) precedes a DMA started at (o, s) iff,
//    with a held at p, o stops at or before s. A DMA precedes an access
//    once a wait observes its completion: a wait of `m` on a slot holding
//    `count` at the hold is sure to include a credit when the credits of
//    its issuer on that slot from that credit on (a DMA's completions into
//    one semaphore are taken to arrive in the order its issuer started
//    them; signals too) exceed count - m. The first such wait on the
//    target observes the write; on the issuer or target, the source read.
// 3. The entry race: while device a is held, a push into it from a call it
//    has not entered (barrier semaphore aside).
// 4. The first undecided pair, in time order, is reported.
#include <algorithm>
#include <map>
#include <string>

#include "ProtocolAccesses.h"
#include "ProtocolTrace.h"
#include "llvm/ADT/DenseMap.h"

using namespace mlir;

namespace meshdma::ir {
namespace {

// The joint run of `calls` back-to-back calls, driven by a work list: a
// device runs until it blocks, and a credit or a completed rendezvous wakes
// it. One device may be held before a given event.
class Engine {
 public:
  // Told of every credit into the held device.
  struct Listener {
    virtual ~Listener() = default;
    virtual void OnCredit(int slot, int from, int64_t from_pos, int64_t amount,
                          bool send_side) = 0;
  };

  Engine(const std::vector<Trace>& traces, int calls) : traces_(traces) {
    n_ = static_cast<int>(traces.size());
    slots_ = 1;
    for (const Trace& t : traces) slots_ = std::max(slots_, t.num_slots);
    len_.resize(n_);
    end_.resize(n_);
    base_.resize(n_ + 1, 0);
    for (int d = 0; d < n_; ++d) {
      len_[d] = static_cast<int64_t>(traces[d].events.size());
      end_[d] = len_[d] * calls;
      base_[d + 1] = base_[d] + end_[d];
    }
  }

  // Every device at its start, nothing credited; `held` (or -1) may run only
  // its events before `hold_at`.
  void Reset(int held, int64_t hold_at, Listener* listener) {
    held_ = held;
    hold_at_ = hold_at;
    listener_ = listener;
    stop_ = false;
    pos_.assign(n_, 0);
    counts_.Reset(n_, slots_);
    meets_.Reset(n_);
    for (int d = 0; d < n_; ++d) counts_.Wake(d);
  }
  // Lets the held device run up to (not including) event `hold_at`.
  void Release(int64_t hold_at) {
    hold_at_ = hold_at;
    counts_.Wake(held_);
  }
  // Runs to the fixpoint (or until Stop). With `seq`, records the order in
  // which events run: seq[Index(d, p)].
  void Run(std::vector<int64_t>* seq = nullptr) {
    seq_ = seq;
    counts_.Drain([&](int d) { Advance(d); }, [&] { return stop_; });
  }
  void Stop() { stop_ = true; }

  int n() const { return n_; }
  int64_t Pos(int d) const { return pos_[d]; }
  int64_t Len(int d) const { return len_[d]; }
  int64_t End(int d) const { return end_[d]; }
  int64_t Index(int d, int64_t p) const { return base_[d] + p; }
  int64_t TotalEvents() const { return base_[n_]; }
  const Event& At(int d, int64_t p) const {
    return traces_[d].events[p % len_[d]];
  }
  int64_t Count(int d, int slot) const { return counts_.Count(d, slot); }
  int64_t steps() const { return steps_; }

 private:
  void Credit(int target, int slot, int64_t amount, int from, bool send) {
    counts_.Credit(target, slot, amount);
    if (target == held_ && listener_)
      listener_->OnCredit(slot, from, pos_[from], amount, send);
  }

  // A barrier or collective: true once every member has arrived.
  bool Meet(int d, const Event& e) {
    return meets_.Arrive(d, traces_[d], e, [&](llvm::ArrayRef<int> members) {
      for (int w : members)
        if (w != d) counts_.Wake(w);
    });
  }

  void Advance(int d) {
    int64_t limit = d == held_ ? std::min(hold_at_, end_[d]) : end_[d];
    while (pos_[d] < limit && !stop_) {
      const Event& e = At(d, pos_[d]);
      switch (e.kind) {
        case EvKind::kDmaStart:
          Credit(e.target, e.slot, e.amount, d, false);
          if (e.send_slot >= 0) Credit(d, e.send_slot, e.amount, d, true);
          break;
        case EvKind::kSignal:
          Credit(e.target, e.slot, e.amount, d, false);
          break;
        case EvKind::kWait:
        case EvKind::kWaitRecv:
        case EvKind::kWaitSend:
          if (!counts_.Take(d, e.slot, e.amount)) return;
          break;
        case EvKind::kBarrier:
        case EvKind::kCollective:
          if (!Meet(d, e)) return;
          break;
      }
      if (seq_) (*seq_)[Index(d, pos_[d])] = seq_next_++;
      ++pos_[d];
      ++steps_;
    }
  }

  const std::vector<Trace>& traces_;
  int n_;
  int slots_;
  std::vector<int64_t> len_, end_, base_;
  int held_ = -1;
  int64_t hold_at_ = 0;
  Listener* listener_ = nullptr;
  bool stop_ = false;
  std::vector<int64_t> pos_;
  JointCounts counts_;
  Rendezvous meets_;
  std::vector<int64_t>* seq_ = nullptr;
  int64_t seq_next_ = 0;
  int64_t steps_ = 0;
};

std::string LineOf(Operation* op) {
  if (auto l = op->getLoc()->findInstanceOf<FileLineColLoc>())
    return "line " + std::to_string(l.getLine());
  return "'" + op->getName().getStringRef().str() + "'";
}

// A pair to decide: does access `a` (earlier in the order run) happen
// before access `b`, which overlaps it in bytes [lo, hi)?
struct Query {
  int64_t a, b;
  int64_t lo, hi;
  bool ok = false;
};

class OrderChecker : public Engine::Listener {
 public:
  OrderChecker(func::FuncOp kernel, const std::vector<Trace>& traces, int calls,
               bool entry_race, const ChainOrder* order)
      : kernel_(kernel),
        traces_(traces),
        calls_(calls),
        entry_race_(entry_race),
        engine_(traces, calls),
        accesses_(traces, calls) {
    order_ = order;
    n_ = static_cast<int>(traces.size());
  }

  LogicalResult Check(int64_t& steps) {
    OrderRun();
    CollectQueries();
    LogicalResult result = Sweep();
    steps += engine_.steps();
    if (failed(result)) return failure();
    return ReportRace();
  }

 private:
  //===------------------------------------------------------------------===//
  // Accesses
  //===------------------------------------------------------------------===//
  Inst Decode(int64_t id) const { return accesses_.Decode(id); }
  int64_t Id(int d, int call, int index) const {
    return accesses_.Id(d, call, index);
  }
  const Access& Acc(const Inst& i) const { return accesses_.Acc(i); }
  int64_t AbsPos(const Inst& i) const { return accesses_.AbsPos(i); }
  // The event that must have run for the access to start: (device, pos).
  std::pair<int, int64_t> StartPoint(const Inst& i) const {
    return {i.issuer, Acc(i).dma ? AbsPos(i) : AbsPos(i) - 1};
  }

  //===------------------------------------------------------------------===//
  // 1. The order run and the pairs to decide
  //===------------------------------------------------------------------===//
  void OrderRun() {
    seq_.assign(engine_.TotalEvents(), INT64_MAX / 4);
    engine_.Reset(-1, 0, nullptr);
    engine_.Run(&seq_);
  }

  // The time of an access in the order run: just after the event before a
  // local access, just after a DMA's start.
  int64_t Time(const Inst& i) const {
    auto [d, p] = StartPoint(i);
    if (p < 0) return 0;
    return 2 * seq_[engine_.Index(d, p)] + 1;
  }

  void CollectQueries() {
    std::vector<std::pair<int64_t, int64_t>> order;  // (time, id)
    for (int64_t id = 0; id < accesses_.size(); ++id)
      order.push_back({Time(Decode(id)), id});
    std::stable_sort(order.begin(), order.end());
    ByteShadow shadow;
    for (const auto& entry : order) {
      const int64_t id = entry.second;  // clang 14 cannot capture a binding
      Inst b = Decode(id);
      asked_.clear();
      shadow.Visit(id, Acc(b), [&](int64_t earlier, int64_t lo, int64_t hi) {
        Ask(earlier, id, b, lo, hi);
      });
    }
  }

  // Records the pair (a, b) unless program order decides it.
  void Ask(int64_t a_id, int64_t b_id, const Inst& b, int64_t lo, int64_t hi) {
    Inst a = Decode(a_id);
    const Access& aa = Acc(a);
    if (!NeedsOrder(a, aa, b, Acc(b))) return;
    if (llvm::is_contained(asked_, a_id)) return;
    asked_.push_back(a_id);
    int64_t q = static_cast<int64_t>(queries_.size());
    queries_.push_back({a_id, b_id, lo, hi});
    if (!aa.dma) {
      holds_[a.issuer].push_back({AbsPos(a), q});
    } else {
      waiting_[a_id].push_back(q);
      sweep_[aa.owner] = 1;
      sweep_[a.issuer] = 1;
      if (aa.write) sweep_[aa.owner] = 1;
    }
  }

  //===------------------------------------------------------------------===//
  // 2.-3. Sweeps
  //===------------------------------------------------------------------===//
  void Answer(int64_t q) {
    Query& query = queries_[q];
    if (query.ok) return;
    auto [d, p] = StartPoint(Decode(query.b));
    if (engine_.Pos(d) <= p) query.ok = true;
  }

  LogicalResult Sweep() {
    for (int a = 0; a < n_; ++a) {
      auto& holds = holds_[a];
      if (!entry_race_ && holds.empty() && !sweep_.count(a)) continue;
      std::sort(holds.begin(), holds.end());
      held_ = a;
      pending_.clear();
      amounts_.clear();
      engine_.Reset(a, 0, this);
      engine_.Run();
      size_t next = 0;
      for (int64_t h = 0;; ++h) {
        if (race_op_) return ReportEntryRace();
        for (; next < holds.size() && holds[next].first == h; ++next)
          Answer(holds[next].second);
        if (h == engine_.End(a) || engine_.Pos(a) < h) break;
        const Event& e = engine_.At(a, h);
        if (e.kind == EvKind::kWait || e.kind == EvKind::kWaitRecv ||
            e.kind == EvKind::kWaitSend)
          Observe(a, e.slot, e.amount);
        engine_.Release(h + 1);
        engine_.Run();
      }
      // Held before the end of a device that cannot go on: the others'
      // fixpoint answers the rest.
      for (; next < holds.size(); ++next) Answer(holds[next].second);
    }
    return success();
  }

  // The wait of `amount` on `slot` of the held device, `a`: the credits it
  // is sure to include end their DMAs' accesses.
  void Observe(int a, int slot, int64_t amount) {
    auto& list = pending_[slot];
    int64_t spare = engine_.Count(a, slot) - amount;
    llvm::erase_if(list, [&](const Pending& c) {
      // The credit and those of its chain that land after it.
      const std::vector<int64_t>& amounts = amounts_[Key(slot, c.from)];
      const std::vector<char>* ordered = nullptr;
      if (order_) {
        auto it = order_->find({a, slot, c.from});
        if (it != order_->end()) ordered = &it->second;
      }
      int64_t after = amounts[c.index];
      for (size_t i = c.index + 1; i < amounts.size(); ++i) {
        if (!ordered || i >= ordered->size() || !(*ordered)[i]) break;
        after += amounts[i];
      }
      if (after <= spare) return false;
      for (int64_t id : {c.read, c.write}) {
        if (id < 0) continue;
        auto it = waiting_.find(id);
        if (it == waiting_.end()) continue;
        for (int64_t q : it->second) Answer(q);
      }
      return true;
    });
  }

  int64_t Key(int slot, int from) const {
    return static_cast<int64_t>(slot) * n_ + from;
  }

  void OnCredit(int slot, int from, int64_t from_pos, int64_t amount,
                bool send_side) override {
    std::vector<int64_t>& amounts = amounts_[Key(slot, from)];
    const Event& e = engine_.At(from, from_pos);
    if (e.kind == EvKind::kDmaStart) {
      // A wait_send sees the whole DMA complete, its target write too.
      (void)send_side;
      int call = static_cast<int>(from_pos / engine_.Len(from));
      int64_t read = Id(from, call, e.read_access);
      int64_t write = Id(from, call, e.write_access);
      if (waiting_.count(read) || (write >= 0 && waiting_.count(write)))
        pending_[slot].push_back({from, amounts.size(), read, write});
    }
    amounts.push_back(amount);
    // 3. A push into the held device from a call it has not entered.
    if (!entry_race_ || from == held_ || slot == kBarrierSlot || race_op_)
      return;
    int64_t len = engine_.Len(held_);
    int64_t entered = len ? (engine_.Pos(held_) + len - 1) / len : 0;
    int call = static_cast<int>(from_pos / engine_.Len(from)) + 1;
    if (call <= entered) return;
    race_op_ = e.op;
    race_from_ = from;
    race_call_ = call;
    engine_.Stop();
  }

  LogicalResult ReportEntryRace() {
    InFlightDiagnostic d =
        race_op_->emitError()
        << "entry race: device " << race_from_ << " pushes into device "
        << held_ << " in call " << race_call_ << " before device " << held_
        << " has entered call " << race_call_
        << " (meshdma.entry_barrier = false, and the kernel's own "
           "handshake does not order this push)";
    d.attachNote(kernel_.getLoc())
        << "hand-shake on the barrier semaphore first, or keep the "
           "runtime's entry barrier";
    return failure();
  }

  //===------------------------------------------------------------------===//
  // 4. The report
  //===------------------------------------------------------------------===//
  std::string Buffer(const Access& acc) const {
    if (!acc.origin) return "kernel argument #" + std::to_string(-acc.root - 1);
    return "the buffer of '" + acc.origin->getName().getStringRef().str() +
           "' at " + LineOf(acc.origin);
  }
  std::string Call(const Inst& i) const {
    return calls_ > 1 ? " in call " + std::to_string(i.call + 1) : "";
  }
  std::string What(const Inst& i) const {
    const Access& acc = Acc(i);
    std::string verb = acc.write ? "written" : "read";
    if (!acc.dma)
      return verb + " by device " + std::to_string(i.issuer) + " at " +
             LineOf(acc.op) + Call(i);
    return verb + " by the DMA device " + std::to_string(i.issuer) +
           " starts at " + LineOf(acc.op) + Call(i) +
           (acc.write ? " (it may land until a wait observes it)"
                      : " (until a wait observes it)");
  }
  // The synchronization that would make `x` happen before `y`.
  std::string Order(const Inst& x, const Inst& y) const {
    const Access& xa = Acc(x);
    std::string before = " before " + LineOf(Acc(y).op) + Call(y);
    if (!xa.dma)
      return "a signal from device " + std::to_string(x.issuer) + " after " +
             LineOf(xa.op) + Call(x) + " awaited by device " +
             std::to_string(y.issuer) + before;
    int observer = xa.write ? xa.owner : x.issuer;
    std::string observe =
        xa.write ? "a wait on device " + std::to_string(xa.owner) +
                       " that only the DMA of " + LineOf(xa.op) + " can satisfy"
                 : "a dma_wait_send on device " + std::to_string(x.issuer) +
                       " for the DMA of " + LineOf(xa.op);
    if (y.issuer == observer) return observe + before;
    return observe + ", then a signal awaited by device " +
           std::to_string(y.issuer) + before;
  }

  LogicalResult ReportRace() {
    for (const Query& q : queries_) {
      if (q.ok) continue;
      Inst a = Decode(q.a), b = Decode(q.b);
      const Access& aa = Acc(a);
      const Access& ba = Acc(b);
      InFlightDiagnostic d =
          ba.op->emitError()
          << "data race on device " << ba.owner << ": bytes [" << q.lo << ", "
          << q.hi << ") of " << Buffer(ba) << " are " << What(a) << " and "
          << What(b) << "; nothing orders them: either " << Order(a, b)
          << ", or " << Order(b, a) << ", would";
      d.attachNote(aa.op->getLoc()) << "the other access";
      return failure();
    }
    return success();
  }

  struct Pending {
    int from;
    size_t index;  // in its chain: the issuer's credits on the slot
    int64_t read, write;
  };

  func::FuncOp kernel_;
  const std::vector<Trace>& traces_;
  int calls_;
  bool entry_race_;
  Engine engine_;
  int n_;
  AccessIndex accesses_;
  std::vector<int64_t> seq_;
  std::vector<Query> queries_;
  std::vector<int64_t> asked_;
  llvm::DenseMap<int, std::vector<std::pair<int64_t, int64_t>>> holds_;
  llvm::DenseMap<int64_t, std::vector<int64_t>> waiting_;
  llvm::DenseMap<int, char> sweep_;
  // The sweep of `held_`.
  int held_ = -1;
  llvm::DenseMap<int, std::vector<Pending>> pending_;
  llvm::DenseMap<int64_t, std::vector<int64_t>> amounts_;
  const ChainOrder* order_ = nullptr;
  Operation* race_op_ = nullptr;
  int race_from_ = -1;
  int race_call_ = 0;
};

}  // namespace

LogicalResult CheckOrdering(func::FuncOp kernel,
                            const std::vector<Trace>& traces, int calls,
                            bool entry_race, int64_t& steps) {
  ChainOrder order;
  if (ProvedByClocks(traces, calls, entry_race, steps, &order))
    return success();
  OrderChecker checker(kernel, traces, calls, entry_race, &order);
  return checker.Check(steps);
}

}  // namespace meshdma::ir
