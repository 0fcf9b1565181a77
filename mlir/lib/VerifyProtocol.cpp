// meshdma-verify-protocol: a static check of a kernel's semaphore protocol
// for one concrete mesh shape.
//
// 1. Trace. Each device's kernel is interpreted with its own ids: integer
//    arithmetic is folded, loops with known bounds are unrolled (a grid too),
//    `scf.if`, `scf.while`, `scf.index_switch`, `cf` branches and `func.call`
//    are followed. The result is a trace of events (DMA starts, signals,
//    waits, DMA waits, barriers, collectives) and the allocation sequence.
//    Integer ops of `arith` and `index` are evaluated by the ops' own folders
//    (the compiler's semantics at every width). Anything that decides control
//    flow, a device id, an amount or a size and depends on data (a load,
//    `sem_read`, a non-constant kernel argument, a run-time dimension) makes
//    the kernel *unverifiable*: an error, never a pass. So does code the
//    checker cannot see that could communicate: an indirect call it cannot
//    resolve, a semaphore or buffer handed to a function without a body, an
//    unknown op that takes a semaphore. Loops and calls that only compute are
//    skipped (their integer results evaluated where the checker can), their
//    memory accesses recorded as reads and writes of whole views. Each trace
//    also lists the byte ranges of buffers its device touches between
//    events (loads, stores, copies, a DMA's source and target).
// 2. Static checks on the traces: ids on the mesh, the same allocation
//    sequence on every device, DMA shapes and element types, remote targets in
//    symmetric memory, matching collectives within each group.
// 3. Joint run. Waits are local and everything else only increments counts,
//    so taking one event never disables another device's event: a round-robin
//    run to a fixpoint reaches the one final state every schedule reaches. A
//    DMA credits its semaphores when it starts (DMAs always finish). The run
//    decides deadlock (with the wait-for cycle) and the exit contract (every
//    semaphore back to 0, every DMA wait taking whole DMAs).
// 4. Ordering (ProtocolClocks.cpp, ProtocolRaces.cpp): happens-before over
//    every schedule, for `calls` back-to-back calls without the runtime's
//    entry barrier (2 by default, 1 to 8), else one: no push into a device
//    from a call it has not entered (the entry race), and no two accesses of
//    the same bytes of one device's memory, at least one a write, unordered.
#include <chrono>
#include <deque>
#include <string>
#include <vector>

#include "ProtocolTrace.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallBitVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"
#include "meshdma_mlir/MeshDma.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/CallInterfaces.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

namespace meshdma::ir {
namespace {

constexpr int64_t kMaxStepsPerDevice = 20'000'000;
constexpr int kMaxCallDepth = 64;
// The most back-to-back calls the entry-race check runs (option `calls`).
constexpr int kMaxCalls = 8;
constexpr int64_t kMaxDevices = 4096;
// One abstract value of the interpreter.
struct AVal {
  enum Kind : uint8_t {
    kNone,
    kInt,
    kData,
    kSem,
    kSemArray,
    kBuf,
    kFunc
  } kind = kNone;
  int64_t i = 0;  // kInt: the value (sign-extended from its width; an i1 is
                  // 0 or 1); kData: reason index; kSem: slot; kSemArray: its
                  // first slot (the rest follow); kBuf: buffer index; kFunc:
                  // index into the tracer's functions
};

struct DataReason {
  Operation* origin;  // where the data-dependent value comes from
  std::string what;
};

struct Buffer {
  int root;  // >= 0: allocation index; < 0: -(argument + 1); local
             // (non-symmetric) buffers use root >= kLocalRootBase
  bool symmetric;
  Operation* origin;  // the allocation (nullptr for kernel arguments)
  Type elem;
  llvm::SmallVector<int64_t, 4> shape;  // -1: unknown (dynamic)
  // The elements the view covers: `offset` + sum of index * stride, in
  // elements of the root buffer. Not `exact`: unknown (the whole root).
  int64_t offset = 0;
  llvm::SmallVector<int64_t, 4> strides;
  bool exact = false;
};

// The most contiguous runs an access is tracked by; past it, by its hull.
constexpr int64_t kMaxRuns = 4096;
using ByteRanges = llvm::SmallVector<std::pair<int64_t, int64_t>, 1>;

int64_t ElemSize(Type t) {
  if (int64_t b = ElementBytes(t)) return b;
  if (t.isIntOrFloat()) return (t.getIntOrFloatBitWidth() + 7) / 8;
  return 8;  // index and anything else
}

// Row-major strides of `shape` (all static).
llvm::SmallVector<int64_t, 4> RowMajor(llvm::ArrayRef<int64_t> shape) {
  llvm::SmallVector<int64_t, 4> strides(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * std::max<int64_t>(shape[d + 1], 1);
  return strides;
}

// A root buffer (a kernel argument or an allocation) starts at its own
// byte 0; its strides are its type's when static.
void RootLayout(Buffer& b, MemRefType t) {
  b.offset = 0;
  b.exact = false;
  for (int64_t d : b.shape)
    if (d < 0) return;
  llvm::SmallVector<int64_t> strides;
  int64_t offset;
  if (failed(getStridesAndOffset(t, strides, offset))) return;
  for (int64_t s : strides)
    if (ShapedType::isDynamic(s)) return;
  b.strides.assign(strides.begin(), strides.end());
  b.exact = true;
}

// The bytes of the root that view `b` covers: its contiguous runs, merged
// (the hull past kMaxRuns; everything when the layout is unknown).
ByteRanges Covered(const Buffer& b) {
  const ByteRanges all{{0, INT64_MAX}};
  if (!b.exact || b.strides.size() != b.shape.size()) return all;
  llvm::SmallVector<std::pair<int64_t, int64_t>, 4> dims;  // (size, stride)
  for (auto [n, st] : llvm::zip(b.shape, b.strides)) {
    if (n == 0) return {};
    if (n > 1) dims.push_back({n, st});
  }
  int64_t run = 1, count = 1, last = b.offset;
  while (!dims.empty() && dims.back().second == run) {
    run *= dims.back().first;
    dims.pop_back();
  }
  bool hull = false;
  for (auto [n, st] : dims) {
    hull |= llvm::MulOverflow(count, n, count) || count > kMaxRuns;
    int64_t span;
    if (llvm::MulOverflow(n - 1, st, span) ||
        llvm::AddOverflow(last, span, last) || st < 0)
      return all;
  }
  int64_t eb = ElemSize(b.elem), lo, hi;
  auto bytes = [&](int64_t first, int64_t end) {
    return !llvm::MulOverflow(first, eb, lo) && !llvm::MulOverflow(end, eb, hi);
  };
  if (hull) {
    if (!bytes(b.offset, last + run)) return all;
    return {{lo, hi}};
  }
  std::vector<int64_t> starts{b.offset};
  for (auto [n, st] : dims) {
    std::vector<int64_t> next;
    for (int64_t s : starts)
      for (int64_t i = 0; i < n; ++i) next.push_back(s + i * st);
    starts.swap(next);
  }
  std::sort(starts.begin(), starts.end());
  ByteRanges out;
  for (int64_t s : starts) {
    if (!bytes(s, s + run)) return all;
    if (!out.empty() && out.back().second >= lo)
      out.back().second = std::max(out.back().second, hi);
    else
      out.push_back({lo, hi});
  }
  return out;
}

// Everything that ends a device's interpretation: an error has been emitted.
struct Abort {};
// Ends a speculative run of code that only computes (nothing emitted): its
// results become data.
struct Speculation {};

// The integer attributes ExecIntOp folds with, shared by the devices'
// tracers: uniquing one in the context costs more than the fold itself.
using IntAttrCache = llvm::DenseMap<std::pair<Type, int64_t>, Attribute>;

class DeviceTracer {
 public:
  DeviceTracer(func::FuncOp kernel, const MeshInfo& mesh, int device,
               bool entry_barrier, IntAttrCache& int_attrs)
      : kernel_(kernel),
        mesh_(mesh),
        device_(device),
        entry_barrier_(entry_barrier),
        int_attrs_(int_attrs) {
    num_devices_ = 1;
    for (int64_t s : mesh.shape) num_devices_ *= s;
    int64_t rest = device;
    coords_.resize(mesh.shape.size());
    for (int a = static_cast<int>(mesh.shape.size()) - 1; a >= 0; --a) {
      coords_[a] = rest % mesh.shape[a];
      rest /= mesh.shape[a];
    }
    if (auto g = kernel->getAttrOfType<DenseI64ArrayAttr>(
            MeshDmaDialect::kIterationBoundsAttr))
      grid_.assign(g.asArrayRef().begin(), g.asArrayRef().end());
  }

  // Builds the trace; on failure an error has been emitted.
  LogicalResult Run(Trace& trace) {
    trace_ = &trace;
    if (entry_barrier_)
      trace.events.push_back(Event{EvKind::kBarrier, -1, -1, -1, 0, kernel_});
    llvm::SmallVector<AVal> args;
    for (auto [i, arg] : llvm::enumerate(kernel_.getArguments())) {
      if (auto type = llvm::dyn_cast<MemRefType>(arg.getType())) {
        Buffer b{
            -static_cast<int>(i) - 1, true, nullptr, type.getElementType(), {}};
        for (int64_t d : type.getShape())
          b.shape.push_back(ShapedType::isDynamic(d) ? -1 : d);
        RootLayout(b, type);
        args.push_back(NewBuf(std::move(b)));
      } else {
        args.push_back(
            NewData(kernel_, "kernel argument #" + std::to_string(i)));
      }
    }
    try {
      int64_t points = 1;
      for (int64_t b : grid_) {
        if (llvm::MulOverflow(points, b, points))
          Fail(kernel_, "unverifiable: the grid has more than 2^63 points");
      }
      grid_index_.assign(grid_.size(), 0);
      for (int64_t p = 0; p < points; ++p) {
        int64_t rest = p;
        for (int d = static_cast<int>(grid_.size()) - 1; d >= 0; --d) {
          grid_index_[d] = rest % grid_[d];
          rest /= grid_[d];
        }
        llvm::SmallVector<AVal> results;
        RunRegion(kernel_.getBody(), args, results);
      }
    } catch (const Abort&) {
      return failure();
    }
    return success();
  }

 private:
  //===------------------------------------------------------------------===//
  // Values
  //===------------------------------------------------------------------===//
  AVal NewData(Operation* origin, std::string what) {
    reasons_.push_back({origin, std::move(what)});
    return AVal{AVal::kData, static_cast<int64_t>(reasons_.size() - 1)};
  }
  AVal NewBuf(Buffer b) {
    buffers_.push_back(std::move(b));
    return AVal{AVal::kBuf, static_cast<int64_t>(buffers_.size() - 1)};
  }
  static AVal Int(int64_t v) { return AVal{AVal::kInt, v}; }

  AVal Get(Value v) {
    auto it = values_.find(v);
    if (it == values_.end()) return AVal{};
    return it->second;
  }
  void Set(Value v, AVal a) { values_[v] = a; }

  [[noreturn]] void Fail(Operation* op, const llvm::Twine& msg) {
    if (speculating_) throw Speculation{};
    op->emitError() << msg;
    throw Abort{};
  }
  [[noreturn]] void FailOnDevice(Operation* op, const llvm::Twine& msg) {
    if (speculating_) throw Speculation{};
    op->emitError() << msg << " (device " << device_ << ")";
    throw Abort{};
  }

  // The integer behind `v`, or an "unverifiable" error naming `what`.
  int64_t Known(Value v, Operation* user, llvm::StringRef what) {
    AVal a = Get(v);
    if (a.kind == AVal::kInt) return a.i;
    if (a.kind == AVal::kData) {
      if (speculating_) throw Speculation{};
      const DataReason& r = reasons_[a.i];
      InFlightDiagnostic d = user->emitError()
                             << "unverifiable: " << what << " depends on data ("
                             << r.what << ")";
      d.attachNote(r.origin->getLoc()) << "the data comes from here";
      throw Abort{};
    }
    Fail(user, "unverifiable: " + what +
                   " is not an integer the checker "
                   "can evaluate");
  }
  int Slot(Value v, Operation* user) {
    AVal a = Get(v);
    if (a.kind == AVal::kSem) return static_cast<int>(a.i);
    if (a.kind == AVal::kData) Known(v, user, "the semaphore");
    Fail(user,
         "unverifiable: the semaphore operand is not one the checker "
         "can track");
  }
  const Buffer& Buf(Value v, Operation* user) {
    AVal a = Get(v);
    if (a.kind == AVal::kBuf) return buffers_[a.i];
    if (a.kind == AVal::kData) Known(v, user, "the buffer");
    Fail(user,
         "unverifiable: the buffer operand is not one the checker can "
         "track");
  }
  // Reports a DMA whose length is known only at run time: `role` names the
  // operand ("source", "target", "descriptor"), the message the dimension
  // and where the buffer comes from.
  void RequireStatic(const Buffer& b, Operation* user, llvm::StringRef role) {
    for (size_t d = 0; d < b.shape.size(); ++d) {
      if (b.shape[d] >= 0) continue;
      if (speculating_) throw Speculation{};
      std::string from =
          b.origin ? "the result of '" +
                         b.origin->getName().getStringRef().str() + "'"
                   : "kernel argument #" + std::to_string(-b.root - 1);
      InFlightDiagnostic diag =
          user->emitError()
          << "unverifiable: the DMA's length is known only at run time: "
             "dimension "
          << d << " of its " << role << " (" << from << ") is dynamic";
      if (b.origin)
        diag.attachNote(b.origin->getLoc()) << "the buffer comes from here";
      throw Abort{};
    }
  }
  int64_t Bytes(const Buffer& b, Operation* user) {
    RequireStatic(b, user, "descriptor");
    int64_t n = ElementBytes(b.elem);
    for (int64_t d : b.shape) {
      if (llvm::MulOverflow(n, d, n))
        Fail(user, "unverifiable: the DMA size overflows 64 bits");
    }
    return n;
  }

  //===------------------------------------------------------------------===//
  // Memory accesses
  //===------------------------------------------------------------------===//

  // Records an access of `bytes` of `b` in the memory of device `owner`,
  // just before the next event (for a DMA: its dma_start, emitted next).
  void Record(const Buffer& b, int owner, bool write, bool dma, Operation* op,
              ByteRanges bytes) {
    if (speculating_ || bytes.empty()) return;
    trace_->accesses.push_back({static_cast<int32_t>(trace_->events.size()),
                                owner, b.root, write, dma, op, b.origin,
                                std::move(bytes)});
  }

  // Calls fn(operand, write) for each read and write `op` makes of a memref
  // operand: as its MemoryEffectOpInterface says, else both.
  template <typename F>
  static void ForEachEffect(Operation* op, F fn) {
    auto iface = llvm::dyn_cast<MemoryEffectOpInterface>(op);
    llvm::SmallVector<MemoryEffects::EffectInstance> effects;
    if (iface) iface.getEffects(effects);
    for (Value v : op->getOperands()) {
      if (!llvm::isa<BaseMemRefType>(v.getType())) continue;
      bool read = !iface, write = !iface;
      for (const MemoryEffects::EffectInstance& e : effects) {
        if (e.getValue() && e.getValue() != v) continue;
        read |= llvm::isa<MemoryEffects::Read>(e.getEffect());
        write |= llvm::isa<MemoryEffects::Write>(e.getEffect());
      }
      if (read) fn(v, false);
      if (write) fn(v, true);
    }
  }

  // The accesses of an op the interpreter runs: one element for a load or
  // store at known indices, else the whole view of each memref operand.
  void RecordEffects(Operation* op) {
    if (llvm::isa<ViewLikeOpInterface>(op)) return;
    if (op->getNumRegions() != 0) RecordSkippedOp(op);
    Value mem;
    ValueRange indices;
    if (auto l = llvm::dyn_cast<memref::LoadOp>(op)) {
      mem = l.getMemRef();
      indices = l.getIndices();
    } else if (auto st = llvm::dyn_cast<memref::StoreOp>(op)) {
      mem = st.getMemRef();
      indices = st.getIndices();
    }
    AVal m = mem ? Get(mem) : AVal{};
    if (m.kind == AVal::kBuf) {
      const Buffer& b = buffers_[m.i];
      int64_t x = b.offset;
      bool known = b.exact && indices.size() == b.strides.size();
      for (size_t i = 0; known && i < indices.size(); ++i) {
        AVal v = Get(indices[i]);
        known = v.kind == AVal::kInt && v.i >= 0 &&
                (b.shape[i] < 0 || v.i < b.shape[i]);
        if (known) x += v.i * b.strides[i];
      }
      int64_t eb = ElemSize(b.elem);
      Record(b, device_, llvm::isa<memref::StoreOp>(op), false, op,
             known ? ByteRanges{{x * eb, (x + 1) * eb}} : Covered(b));
      return;
    }
    ForEachEffect(op, [&](Value v, bool write) {
      AVal a = Get(v);
      if (a.kind == AVal::kBuf)
        Record(buffers_[a.i], device_, write, false, op,
               Covered(buffers_[a.i]));
    });
  }

  // Code the checker skips (it only computes) inside `scope`: a loop or
  // branch of the kernel, or a function's body with its memref arguments
  // bound in `args`.
  struct SkipScope {
    SkipScope(Operation* scope, Operation* site, int depth)
        : scope(scope), site(site), depth(depth) {}
    Operation* scope;
    Operation* site;  // where accesses are reported (nullptr: the op)
    int depth;
    llvm::DenseMap<Value, int64_t> args;           // argument -> buffer
    llvm::DenseSet<std::pair<int64_t, int>> seen;  // (buffer, write)
  };
  // The buffer behind `v` in `s`, through views, or -1 (a buffer made
  // inside, or one the checker cannot trace).
  int64_t ResolveBuffer(Value v, const SkipScope& s) {
    for (int hops = 0; hops < 64; ++hops) {
      auto it = s.args.find(v);
      if (it != s.args.end()) return it->second;
      Operation* parent = v.getParentRegion()->getParentOp();
      if (!s.scope->isAncestor(parent)) {
        AVal a = Get(v);
        return a.kind == AVal::kBuf ? a.i : -1;
      }
      auto view = v.getDefiningOp<ViewLikeOpInterface>();
      if (!view) return -1;
      v = view.getViewSource();
    }
    return -1;
  }
  // Records each memory access inside skipped code as a read or write of
  // the whole view of a buffer from outside, at the op (or the call site).
  void RecordSkipped(SkipScope& s) {
    s.scope->walk([&](Operation* inner) {
      if (inner == s.scope || llvm::isa<ViewLikeOpInterface>(inner)) return;
      if (auto call = llvm::dyn_cast<func::CallOp>(inner)) {
        auto callee = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
            inner, call.getCalleeAttr());
        if (!callee || callee.isExternal() || s.depth >= kMaxCallDepth) return;
        SkipScope sub(callee, s.site ? s.site : inner, s.depth + 1);
        for (auto [arg, v] :
             llvm::zip(callee.getArguments(), call.getOperands()))
          if (int64_t b = ResolveBuffer(v, s); b >= 0) sub.args[arg] = b;
        RecordSkipped(sub);
        for (auto key : sub.seen) s.seen.insert(key);
        return;
      }
      ForEachEffect(inner, [&](Value v, bool write) {
        int64_t b = ResolveBuffer(v, s);
        if (b < 0 || !s.seen.insert({b, write}).second) return;
        Record(buffers_[b], device_, write, false, s.site ? s.site : inner,
               Covered(buffers_[b]));
      });
    });
  }
  void RecordSkippedOp(Operation* op) {
    if (speculating_) return;
    SkipScope s(op, nullptr, 0);
    RecordSkipped(s);
  }
  void RecordSkippedCall(Operation* call, func::FuncOp callee,
                         ValueRange operands) {
    if (speculating_) return;
    SkipScope s(callee, call, 1);
    for (auto [arg, v] : llvm::zip(callee.getArguments(), operands)) {
      AVal a = Get(v);
      if (a.kind == AVal::kBuf) s.args[arg] = a.i;
    }
    RecordSkipped(s);
  }

  static unsigned Width(Type t) {
    if (auto i = llvm::dyn_cast<IntegerType>(t)) return i.getWidth();
    return 64;  // index
  }

  //===------------------------------------------------------------------===//
  // Control flow
  //===------------------------------------------------------------------===//

  // Runs `region` from its entry block with `args`; `results` receives the
  // operands of the terminator that leaves the region.
  Operation* RunRegion(Region& region, llvm::ArrayRef<AVal> args,
                       llvm::SmallVectorImpl<AVal>& results) {
    Block* block = &region.front();
    llvm::SmallVector<AVal> block_args(args.begin(), args.end());
    while (true) {
      for (auto [arg, val] : llvm::zip(block->getArguments(), block_args))
        Set(arg, val);
      for (Operation& op : block->without_terminator()) Exec(&op);
      Operation* term = block->getTerminator();
      if (auto br = llvm::dyn_cast<cf::BranchOp>(term)) {
        block_args = Vals(br.getDestOperands());
        block = br.getDest();
        Step(term);
        continue;
      }
      if (auto br = llvm::dyn_cast<cf::CondBranchOp>(term)) {
        bool c = Known(br.getCondition(), term, "the branch condition");
        block_args =
            Vals(c ? br.getTrueDestOperands() : br.getFalseDestOperands());
        block = c ? br.getTrueDest() : br.getFalseDest();
        Step(term);
        continue;
      }
      if (term->getNumSuccessors() != 0)
        Fail(term, "unverifiable: unsupported branch '" +
                       term->getName().getStringRef() + "'");
      results.clear();
      for (Value v : term->getOperands()) results.push_back(Get(v));
      return term;
    }
  }

  llvm::SmallVector<AVal> Vals(ValueRange vs) {
    llvm::SmallVector<AVal> out;
    for (Value v : vs) out.push_back(Get(v));
    return out;
  }

  void Step(Operation* op) {
    if (++steps_ > kMaxStepsPerDevice)
      Fail(op, "unverifiable: the kernel runs more than " +
                   std::to_string(kMaxStepsPerDevice) +
                   " operations per device");
  }

  void SetResults(Operation* op, llvm::ArrayRef<AVal> vals) {
    for (auto [r, v] : llvm::zip(op->getResults(), vals)) Set(r, v);
  }

  void Exec(Operation* op) {
    Step(op);
    llvm::TypeSwitch<Operation*>(op)
        .Case<scf::ForOp>([&](scf::ForOp f) { ExecFor(f); })
        .Case<scf::IfOp>([&](scf::IfOp f) {
          auto run = [&] {
            bool c = Known(f.getCondition(), op, "the scf.if condition");
            llvm::SmallVector<AVal> res;
            Region& r = c ? f.getThenRegion() : f.getElseRegion();
            if (!r.empty()) RunRegion(r, {}, res);
            SetResults(op, res);
          };
          if (!SkipComputeOnly(op, run)) run();
        })
        .Case<scf::WhileOp>([&](scf::WhileOp w) { ExecWhile(w); })
        .Case<scf::IndexSwitchOp>([&](scf::IndexSwitchOp s) {
          auto run = [&] {
            int64_t v = Known(s.getArg(), op, "the scf.index_switch value");
            Region* r = &s.getDefaultRegion();
            for (auto [i, c] : llvm::enumerate(s.getCases()))
              if (c == v) r = &s.getCaseRegions()[i];
            llvm::SmallVector<AVal> res;
            RunRegion(*r, {}, res);
            SetResults(op, res);
          };
          if (!SkipComputeOnly(op, run)) run();
        })
        .Case<scf::ExecuteRegionOp>([&](scf::ExecuteRegionOp e) {
          llvm::SmallVector<AVal> res;
          RunRegion(e.getRegion(), {}, res);
          SetResults(op, res);
        })
        .Case<func::CallOp>([&](func::CallOp call) { ExecCall(call); })
        .Case<func::ConstantOp>([&](func::ConstantOp c) {
          auto f = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
              op, c.getValueAttr());
          if (!f) return Set(c.getResult(), AVal{});
          funcs_.push_back(f);
          Set(c.getResult(),
              AVal{AVal::kFunc, static_cast<int64_t>(funcs_.size() - 1)});
        })
        .Case<func::CallIndirectOp>(
            [&](func::CallIndirectOp call) { ExecCallIndirect(call); })
        .Case<memref::SubViewOp>([&](auto s) { ExecSubView(s); })
        .Case<memref::CastOp>([&](memref::CastOp c) { ExecCast(c); })
        .Case<memref::DimOp>([&](memref::DimOp d) {
          const Buffer& b = Buf(d.getSource(), op);
          int64_t i = Known(d.getIndex(), op, "the memref.dim index");
          if (i < 0 || i >= static_cast<int64_t>(b.shape.size()) ||
              b.shape[i] < 0)
            Set(d.getResult(), NewData(op, "a dynamic dimension"));
          else
            Set(d.getResult(), Int(b.shape[i]));
        })
        .Case<memref::AllocOp, memref::AllocaOp>([&](auto a) {
          // A dynamic size the checker knows is a static one.
          MemRefType t = a.getType();
          Buffer b{kLocalRootBase + next_local_++,
                   false,
                   op,
                   t.getElementType(),
                   {}};
          auto sizes = a.getDynamicSizes().begin();
          for (int64_t d : t.getShape()) {
            AVal n = ShapedType::isDynamic(d) ? Get(*sizes++) : Int(d);
            b.shape.push_back(n.kind == AVal::kInt ? n.i : -1);
          }
          RootLayout(b, t);
          Set(a.getResult(), NewBuf(std::move(b)));
        })
        .Case<memref::CollapseShapeOp, memref::ExpandShapeOp>([&](auto r) {
          Buffer b = Buf(r.getSrc(), op);
          MemRefType t = r.getResultType();
          // A reshape of a row-major view is the row-major view of the new
          // shape; anything else is tracked as the whole root.
          bool row_major =
              b.exact &&
              llvm::all_of(b.shape, [](int64_t d) { return d >= 0; }) &&
              b.strides == RowMajor(b.shape);
          b.shape.clear();
          for (int64_t d : t.getShape())
            b.shape.push_back(ShapedType::isDynamic(d) ? -1 : d);
          b.exact = row_major &&
                    llvm::all_of(b.shape, [](int64_t d) { return d >= 0; });
          if (b.exact) b.strides = RowMajor(b.shape);
          Set(r.getResult(), NewBuf(std::move(b)));
        })
        .Default([&](Operation* op) {
          if (op->getDialect() &&
              op->getDialect()->getNamespace() == "meshdma") {
            ExecMeshDma(op);
            return;
          }
          if (IsIntegerDialectOp(op) && ExecIntOp(op)) return;
          ExecOther(op);
        });
  }

  // Whether `op` (a loop, a function, any op with regions) may communicate,
  // memoised: it holds a meshdma op, an op that takes a semaphore, an
  // indirect or foreign call, a call of a function that may communicate
  // (recursion counts as communicating), or a call that hands a semaphore or
  // buffer to a function without a body. Code that does not communicate only
  // computes on memory, which the checker treats as data anyway.
  bool Communicates(Operation* op) {
    auto it = communicates_.find(op);
    if (it != communicates_.end()) return it->second;
    communicates_[op] = true;  // while in progress: recursion communicates
    bool found = false;
    op->walk([&](Operation* inner) {
      if (inner == op || found) return;
      found = MayCommunicate(inner);
    });
    communicates_[op] = found;
    return found;
  }
  bool MayCommunicate(Operation* op) {
    if (op->getDialect() && op->getDialect()->getNamespace() == "meshdma")
      return true;
    for (Type t : op->getOperandTypes())
      if (llvm::isa<SemaphoreType, SemaphoreArrayType>(t)) return true;
    if (!llvm::isa<CallOpInterface>(op)) return false;
    auto call = llvm::dyn_cast<func::CallOp>(op);
    if (!call) return true;  // call_indirect, llvm.call, ...
    auto callee = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
        op, call.getCalleeAttr());
    if (!callee) return true;
    if (callee.isExternal()) return EscapingOperand(op) >= 0;
    return Communicates(callee);
  }
  // The first operand of `op` that is a semaphore, a buffer or a function
  // (code that could communicate when called back), or -1.
  static int EscapingOperand(Operation* op) {
    for (auto [i, t] : llvm::enumerate(op->getOperandTypes()))
      if (llvm::isa<SemaphoreType, SemaphoreArrayType, BaseMemRefType,
                    FunctionType>(t))
        return static_cast<int>(i);
    return -1;
  }
  static const char* HandleKind(Type t) {
    if (llvm::isa<SemaphoreType>(t)) return "semaphore";
    if (llvm::isa<SemaphoreArrayType>(t)) return "semaphore array";
    return llvm::isa<FunctionType>(t) ? "function" : "buffer";
  }

  // A loop or branch that only computes: skipped when none of its results is
  // an integer; otherwise `run` interprets it speculatively, and its results
  // are data where it cannot (a trip count or condition that depends on
  // data). Returns false for one that may communicate or yields a handle (a
  // buffer, a semaphore, a function): the caller runs it.
  bool SkipComputeOnly(Operation* loop, llvm::function_ref<void()> run) {
    for (Type t : loop->getResultTypes())
      if (llvm::isa<SemaphoreType, SemaphoreArrayType, BaseMemRefType,
                    FunctionType>(t))
        return false;
    if (Communicates(loop)) return false;
    bool integers = false;
    for (Type t : loop->getResultTypes()) integers |= t.isIntOrIndex();
    RecordSkippedOp(loop);
    if (integers) {
      int64_t steps = steps_;
      int depth = depth_;
      ++speculating_;
      try {
        run();
        --speculating_;
        return true;
      } catch (const Speculation&) {
        --speculating_;
        steps_ = steps;
        depth_ = depth;
      }
    }
    for (Value r : loop->getResults())
      Set(r, NewData(loop, "the result of '" +
                               loop->getName().getStringRef().str() +
                               "', which only computes"));
    return true;
  }

  void ExecFor(scf::ForOp f) {
    Operation* op = f;
    if (SkipComputeOnly(op, [&] { RunFor(f); })) return;
    RunFor(f);
  }
  void RunFor(scf::ForOp f) {
    Operation* op = f;
    int64_t lb = Known(f.getLowerBound(), op, "the loop's lower bound");
    int64_t ub = Known(f.getUpperBound(), op, "the loop's upper bound");
    int64_t step = Known(f.getStep(), op, "the loop's step");
    if (step <= 0)
      Fail(op, "loop step must be positive, got " + std::to_string(step));
    // The lowered loop steps with a wrapping add at the induction variable's
    // width: a step past its largest value wraps and goes on.
    unsigned width = Width(f.getInductionVar().getType());
    if (width < 2)
      Fail(op, "unverifiable: a loop over i" + std::to_string(width));
    llvm::SmallVector<AVal> carried = Vals(f.getInitArgs());
    llvm::SmallVector<AVal> args;
    for (int64_t iv = lb; iv < ub;) {
      args.clear();
      args.push_back(Int(iv));
      args.append(carried.begin(), carried.end());
      RunRegion(f.getRegion(), args, carried);
      int64_t last = iv;
      if (llvm::AddOverflow(last, step, iv) ||
          (width < 64 && !llvm::isIntN(width, iv)))
        Fail(op,
             "unverifiable: the loop's induction variable wraps around "
             "after " +
                 std::to_string(last) + " (step " + std::to_string(step) +
                 ", " + std::to_string(width) + " bits)");
    }
    SetResults(op, carried);
  }

  void ExecWhile(scf::WhileOp w) {
    Operation* op = w;
    if (SkipComputeOnly(op, [&] { RunWhile(w); })) return;
    RunWhile(w);
  }
  void RunWhile(scf::WhileOp w) {
    Operation* op = w;
    llvm::SmallVector<AVal> carried = Vals(w.getInits());
    llvm::SmallVector<AVal> res;
    while (true) {
      Operation* term = RunRegion(w.getBefore(), carried, res);
      auto cond = llvm::cast<scf::ConditionOp>(term);
      bool c = Known(cond.getCondition(), term, "the loop condition");
      res = Vals(cond.getArgs());
      if (!c) break;
      RunRegion(w.getAfter(), res, carried);
      Step(op);
    }
    SetResults(op, res);
  }

  // 1. A function without a body must not receive a semaphore, a buffer or
  //    a function (it could communicate with them); its results are data.
  // 2. A function that only computes and returns nothing is skipped.
  // 3. Otherwise the body is interpreted.
  void ExecCall(func::CallOp call) {
    Operation* op = call;
    auto callee = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
        op, call.getCalleeAttr());
    if (!callee)
      Fail(op, "unverifiable: no function @" + call.getCallee() +
                   " the checker can follow");
    if (callee.isExternal()) {
      if (int i = EscapingOperand(op); i >= 0)
        Fail(op, "unverifiable: 'func.call' hands a " +
                     llvm::Twine(HandleKind(op->getOperand(i).getType())) +
                     " (operand #" + llvm::Twine(i) + ") to @" +
                     call.getCallee() +
                     ", a function without a body: the checker cannot see "
                     "what it does with it");
      for (Value r : op->getResults())
        Set(r, NewData(op, "the result of a call to an external function"));
      return;
    }
    if (op->getNumResults() == 0 && !Communicates(callee))
      return RecordSkippedCall(op, callee, call.getOperands());
    RunCallee(op, callee, Vals(call.getOperands()));
  }

  // Follows an indirect call whose callee is a `func.constant` the checker
  // has seen; any other callee is unverifiable.
  void ExecCallIndirect(func::CallIndirectOp call) {
    Operation* op = call;
    AVal f = Get(call.getCallee());
    if (f.kind != AVal::kFunc) {
      if (f.kind == AVal::kData) Known(call.getCallee(), op, "the callee");
      Fail(op,
           "unverifiable: 'func.call_indirect' calls a function the checker "
           "cannot identify (not a func.constant it has seen)");
    }
    func::FuncOp callee = funcs_[f.i];
    if (callee.isExternal())
      Fail(op, "unverifiable: 'func.call_indirect' calls @" +
                   callee.getSymName() +
                   ", a function without a body: the checker cannot see "
                   "what it does");
    RunCallee(op, callee, Vals(call.getArgOperands()));
  }

  void RunCallee(Operation* op, func::FuncOp callee,
                 llvm::ArrayRef<AVal> args) {
    if (++depth_ > kMaxCallDepth)
      Fail(op, "unverifiable: calls nest deeper than " +
                   std::to_string(kMaxCallDepth));
    llvm::SmallVector<AVal> res;
    RunRegion(callee.getBody(), args, res);
    --depth_;
    SetResults(op, res);
  }

  // A cast keeps the buffer; a dimension the result type makes static is
  // static from here on.
  void ExecCast(memref::CastOp c) {
    AVal a = Get(c.getSource());
    auto t = llvm::dyn_cast<MemRefType>(c.getType());
    if (a.kind != AVal::kBuf || !t) return Set(c.getResult(), a);
    Buffer b = buffers_[a.i];
    for (auto [i, d] : llvm::enumerate(t.getShape()))
      if (i < b.shape.size() && !ShapedType::isDynamic(d)) b.shape[i] = d;
    Set(c.getResult(), NewBuf(std::move(b)));
  }

  void ExecSubView(memref::SubViewOp s) {
    Operation* op = s;
    Buffer src = Buf(s.getSource(), op);
    Buffer out = src;
    out.shape.clear();
    llvm::SmallBitVector dropped = s.getDroppedDims();
    out.strides.clear();
    // The static values, a dynamic one (kDynamic) taken from the operands in
    // order (as getMixedOffsets() pairs them, without building attributes).
    auto values = [&](llvm::ArrayRef<int64_t> statics, OperandRange dynamic,
                      llvm::StringRef what) {
      llvm::SmallVector<int64_t, 4> out;
      auto next = dynamic.begin();
      for (int64_t v : statics)
        out.push_back(ShapedType::isDynamic(v) ? Known(*next++, op, what) : v);
      return out;
    };
    auto offsets =
        values(s.getStaticOffsets(), s.getOffsets(), "a subview offset");
    auto sizes = values(s.getStaticSizes(), s.getSizes(), "a subview size");
    auto strides =
        values(s.getStaticStrides(), s.getStrides(), "a subview stride");
    for (size_t d = 0; d < sizes.size(); ++d) {
      int64_t o = offsets[d], n = sizes[d], st = strides[d];
      int64_t dim = d < src.shape.size() ? src.shape[d] : -1;
      if (o < 0 || n < 0 || (dim >= 0 && n > 0 && o + (n - 1) * st >= dim))
        FailOnDevice(op, "subview out of bounds: dimension " +
                             std::to_string(d) + " takes offset " +
                             std::to_string(o) + ", size " + std::to_string(n) +
                             ", stride " + std::to_string(st) +
                             " of a dimension of " + std::to_string(dim));
      if (!dropped.test(d)) out.shape.push_back(n);
      if (!src.exact || d >= src.strides.size()) {
        out.exact = false;
        continue;
      }
      int64_t moved, stride;
      if (llvm::MulOverflow(o, src.strides[d], moved) ||
          llvm::AddOverflow(out.offset, moved, out.offset) ||
          llvm::MulOverflow(st, src.strides[d], stride))
        out.exact = false;
      if (!dropped.test(d)) out.strides.push_back(stride);
    }
    Set(s.getResult(), NewBuf(std::move(out)));
  }

  // The ops ExecIntOp evaluates: those of `arith` and `index`, and math's
  // integer ops (the ones the JIT lowers).
  static bool IsIntegerDialectOp(Operation* op) {
    if (!op->getDialect()) return false;
    llvm::StringRef ns = op->getDialect()->getNamespace();
    if (ns == "arith" || ns == "index") return true;
    return llvm::is_contained(
        {"math.absi", "math.ctlz", "math.cttz", "math.ctpop"},
        op->getName().getStringRef());
  }

  // An integer op of `arith`, `index` or `math` (every operand and result an
  // integer or index), evaluated by the op's own folder: the compiler's
  // semantics at every width. Returns false for other ops.
  // 1. Any operand that is data makes every result data.
  // 2. The operands become attributes and the op folds; an op that does not
  //    fold on known operands has no defined value for them (a division by
  //    zero is an error; a poison shift or overflow, or a value that depends
  //    on the index width, is unverifiable).
  // 3. Results wider than 64 bits are data.
  bool ExecIntOp(Operation* op) {
    if (op->getNumResults() == 0 || op->getNumRegions() != 0) return false;
    for (Type t : op->getResultTypes())
      if (!t.isIntOrIndex()) return false;
    for (Type t : op->getOperandTypes())
      if (!t.isIntOrIndex()) return false;
    llvm::SmallVector<Attribute, 3> attrs;
    for (Value v : op->getOperands()) {
      AVal a = Get(v);
      if (a.kind == AVal::kData) {
        for (Value r : op->getResults()) Set(r, a);
        return true;
      }
      if (a.kind != AVal::kInt) return false;
      Attribute& attr = int_attrs_[{v.getType(), a.i}];
      if (!attr)
        attr = IntegerAttr::get(
            v.getType(),
            llvm::APInt(Width(v.getType()), a.i, /*isSigned=*/true));
      attrs.push_back(attr);
    }
    llvm::SmallVector<OpFoldResult, 2> folded;
    if (failed(op->fold(attrs, folded)) || folded.size() != op->getNumResults())
      FailUndefined(op, attrs);
    for (auto [r, f] : llvm::zip(op->getResults(), folded)) {
      if (auto v = llvm::dyn_cast<Value>(f)) {
        if (v.getDefiningOp() == op) FailUndefined(op, attrs);
        Set(r, Get(v));
        continue;
      }
      auto i = llvm::dyn_cast_if_present<IntegerAttr>(llvm::cast<Attribute>(f));
      if (!i) FailUndefined(op, attrs);
      const llvm::APInt& x = i.getValue();
      if (x.getBitWidth() == 1)
        Set(r, Int(x.getZExtValue()));
      else if (x.isSignedIntN(64))
        Set(r, Int(x.getSExtValue()));
      else
        Set(r, NewData(op, "an integer wider than 64 bits"));
    }
    return true;
  }

  [[noreturn]] void FailUndefined(Operation* op,
                                  llvm::ArrayRef<Attribute> operands) {
    llvm::StringRef name = op->getName().getStringRef();
    bool division = name.contains("div") || name.contains("rem");
    std::string list;
    for (Attribute a : operands) {
      const llvm::APInt& x = llvm::cast<IntegerAttr>(a).getValue();
      if (!list.empty()) list += ", ";
      list += x.getBitWidth() == 1 ? (x.isZero() ? "false" : "true")
                                   : llvm::toString(x, 10, /*Signed=*/true);
    }
    if (division && !operands.empty() &&
        llvm::cast<IntegerAttr>(operands.back()).getValue().isZero())
      FailOnDevice(op, "division by zero");
    Fail(op, "unverifiable: '" + name + "' has no value the checker can " +
                 "compute for the operands (" + list +
                 "): the result is poison, undefined, or depends on the " +
                 "width of index");
  }

  // arith.select on semaphores and buffers chooses a handle.
  bool ExecSelectHandle(Operation* op) {
    auto sel = llvm::dyn_cast<arith::SelectOp>(op);
    if (!sel) return false;
    bool c = Known(sel.getCondition(), op, "the select condition");
    Set(sel.getResult(), Get(c ? sel.getTrueValue() : sel.getFalseValue()));
    return true;
  }

  // Ops the checker does not model: fine if they only compute on data. An op
  // that takes a semaphore, calls code the checker does not follow, or holds
  // an op that may communicate is unverifiable; so is one that yields a
  // semaphore or a buffer.
  void ExecOther(Operation* op) {
    if (ExecSelectHandle(op)) return;
    RecordEffects(op);
    for (auto [i, t] : llvm::enumerate(op->getOperandTypes()))
      if (llvm::isa<SemaphoreType, SemaphoreArrayType>(t))
        Fail(op, "unverifiable: '" + op->getName().getStringRef() +
                     "' takes a semaphore (operand #" + llvm::Twine(i) +
                     ") and the checker does not model it");
    if (llvm::isa<CallOpInterface>(op))
      Fail(op, "unverifiable: the checker does not follow '" +
                   op->getName().getStringRef() + "'");
    if (op->getNumRegions() != 0 && Communicates(op))
      Fail(op, "unverifiable: '" + op->getName().getStringRef() +
                   "' holds meshdma ops or calls the checker cannot "
                   "follow");
    for (Value r : op->getResults()) {
      if (llvm::isa<SemaphoreType, SemaphoreArrayType>(r.getType()) ||
          llvm::isa<MemRefType>(r.getType()))
        Fail(op, "unverifiable: '" + op->getName().getStringRef() +
                     "' yields a semaphore or buffer the checker cannot "
                     "track");
      Set(r, NewData(op, "the result of '" +
                             op->getName().getStringRef().str() + "'"));
    }
  }

  //===------------------------------------------------------------------===//
  // meshdma ops
  //===------------------------------------------------------------------===//

  // The LOGICAL id of a device clause.
  int Target(Operation* op, ValueRange ids, bool logical) {
    if (ids.empty()) return device_;
    if (logical) {
      int64_t id = Known(ids[0], op, "the device id");
      if (id < 0 || id >= num_devices_)
        FailOnDevice(op, "device id off the mesh: LOGICAL id " +
                             std::to_string(id) + " on a mesh of " +
                             std::to_string(num_devices_) + " devices");
      return static_cast<int>(id);
    }
    if (ids.size() != mesh_.shape.size())
      Fail(op, "a MESH device id needs " + std::to_string(mesh_.shape.size()) +
                   " coordinates");
    int64_t linear = 0;
    for (size_t a = 0; a < ids.size(); ++a) {
      int64_t c = Known(ids[a], op, "the device id");
      if (c < 0 || c >= mesh_.shape[a])
        FailOnDevice(op, "device id off the mesh: coordinate " +
                             std::to_string(c) + " along axis '" +
                             mesh_.axes[a] + "' of size " +
                             std::to_string(mesh_.shape[a]));
      linear = linear * mesh_.shape[a] + c;
    }
    return static_cast<int>(linear);
  }

  // `count` new semaphore slots of `op` (once per call in a grid kernel):
  // the first of them.
  int NewSlots(Operation* op, SemaphoreKind kind, int64_t count = 1) {
    if (!grid_.empty()) {
      auto it = memo_.find(op);
      if (it != memo_.end()) return static_cast<int>(it->second.i);
    }
    int slot = trace_->num_slots;
    trace_->num_slots += static_cast<int>(count);
    for (int64_t k = 0; k < count; ++k)
      trace_->allocs.push_back({true, kind, {}, op});
    if (!grid_.empty()) memo_[op] = AVal{AVal::kSem, slot};
    return slot;
  }

  // Semaphore `index` of an array: its slot; an index off the array is an
  // error on this device.
  void ExecSemIndex(SemIndexOp o) {
    Operation* op = o;
    AVal a = Get(o.getArray());
    if (a.kind != AVal::kSemArray)
      Fail(op,
           "unverifiable: the semaphore array is not one the checker can "
           "track");
    int64_t size = o.getArray().getType().getSize();
    int64_t index = Known(o.getIndex(), op, "the semaphore index");
    if (index < 0 || index >= size)
      FailOnDevice(op, "semaphore index " + llvm::Twine(index) +
                           " is off the array of " + llvm::Twine(size) +
                           " semaphores (0 to " + llvm::Twine(size - 1) + ")");
    Set(o.getResult(), AVal{AVal::kSem, a.i + index});
  }

  void Emit(Event e) { trace_->events.push_back(e); }

  // A local buffer: a new root, or inside a grid the one this op allocated
  // on the first grid point (the kernel body runs once per point).
  void ExecAlloc(AllocOp o) {
    Operation* op = o;
    if (!grid_.empty()) {
      auto it = memo_.find(op);
      if (it != memo_.end()) {
        Set(o.getResult(), it->second);
        return;
      }
    }
    MemRefType t = o.getType();
    Buffer b{static_cast<int>(trace_->allocs.size()), true, op,
             t.getElementType(), llvm::SmallVector<int64_t, 4>(t.getShape())};
    RootLayout(b, t);
    trace_->allocs.push_back({false, SemaphoreKind::regular, t, op});
    AVal v = NewBuf(std::move(b));
    if (!grid_.empty()) memo_[op] = v;
    Set(o.getResult(), v);
  }

  // The amount of a sem_signal or sem_wait (`verb`): known on this device
  // and not negative.
  int64_t SemAmount(Value amount, Operation* op, llvm::StringRef verb) {
    int64_t n = Known(amount, op, ("the " + verb + " amount").str());
    if (n < 0)
      FailOnDevice(op, "negative " + verb + " amount " + std::to_string(n));
    return n;
  }

  void ExecSemSignal(SemSignalOp o) {
    Operation* op = o;
    int slot = Slot(o.getSemaphore(), op);
    int64_t amount = SemAmount(o.getAmount(), op, "signal");
    Emit({EvKind::kSignal, slot, -1,
          Target(op, o.getDeviceId(), o.getLogical()), amount, op});
  }

  void ExecSemWait(SemWaitOp o) {
    Operation* op = o;
    int slot = Slot(o.getSemaphore(), op);
    Emit({EvKind::kWait, slot, -1, device_,
          SemAmount(o.getAmount(), op, "wait"), op});
  }

  // Runtime collectives: checked by the runtime's own protocol (and by
  // meshdma-expand-collectives + this pass). Here they read their input,
  // write their output, synchronise their group and must match across it.
  template <typename CollectiveOp>
  void ExecCollective(CollectiveOp o) {
    Operation* op = o;
    const Buffer& in = Buf(o.getInput(), op);
    const Buffer& out = Buf(o.getOutput(), op);
    Record(in, device_, false, false, op, Covered(in));
    Record(out, device_, true, false, op, Covered(out));
    CollectiveRecord rec{op, GroupOf(op, o.getAxes())};
    trace_->collectives.push_back(std::move(rec));
    Emit({EvKind::kCollective,
          static_cast<int32_t>(trace_->collectives.size() - 1), -1, -1, 0, op});
  }

  // Runs one op of the dialect on this device: sets its results' abstract
  // values and appends its events and accesses to the trace.
  void ExecMeshDma(Operation* op) {
    llvm::TypeSwitch<Operation*>(op)
        .Case<DeviceIdOp>([&](auto o) { Set(o.getResult(), Int(device_)); })
        .Case<AxisIndexOp>([&](AxisIndexOp o) {
          Set(o.getResult(), Int(coords_[AxisOf(op, o.getAxis())]));
        })
        .Case<AxisSizeOp>([&](AxisSizeOp o) {
          Set(o.getResult(), Int(mesh_.shape[AxisOf(op, o.getAxis())]));
        })
        .Case<ProgramIdOp>([&](ProgramIdOp o) {
          Set(o.getResult(), Int(grid_index_[o.getDimension()]));
        })
        .Case<NumProgramsOp>([&](NumProgramsOp o) {
          Set(o.getResult(), Int(grid_[o.getDimension()]));
        })
        .Case<SemAllocOp>([&](SemAllocOp o) {
          Set(o.getResult(),
              AVal{AVal::kSem, NewSlots(op, o.getType().getKind())});
        })
        .Case<SemAllocArrayOp>([&](SemAllocArrayOp o) {
          Set(o.getResult(),
              AVal{AVal::kSemArray,
                   NewSlots(op, o.getType().getKind(), o.getType().getSize())});
        })
        .Case<SemIndexOp>([&](SemIndexOp o) { ExecSemIndex(o); })
        .Case<BarrierSemaphoreOp>([&](BarrierSemaphoreOp o) {
          Set(o.getResult(), AVal{AVal::kSem, kBarrierSlot});
        })
        .Case<AllocOp>([&](AllocOp o) { ExecAlloc(o); })
        .Case<SemSignalOp>([&](SemSignalOp o) { ExecSemSignal(o); })
        .Case<SemWaitOp>([&](SemWaitOp o) { ExecSemWait(o); })
        .Case<SemReadOp>([&](SemReadOp o) {
          Slot(o.getSemaphore(), op);
          Set(o.getResult(), NewData(op,
                                     "a semaphore count read by "
                                     "sem_read"));
        })
        .Case<DmaStartOp>([&](DmaStartOp o) { ExecDmaStart(o); })
        .Case<DmaWaitRecvOp>([&](DmaWaitRecvOp o) {
          int slot = Slot(o.getSemaphore(), op);
          Emit({EvKind::kWaitRecv, slot, -1, device_,
                Bytes(Buf(o.getRef(), op), op), op});
        })
        .Case<DmaWaitSendOp>([&](DmaWaitSendOp o) {
          int slot = Slot(o.getSemaphore(), op);
          Emit({EvKind::kWaitSend, slot, -1, device_,
                Bytes(Buf(o.getRef(), op), op), op});
        })
        .Case<DeviceBarrierOp>([&](auto) {
          Emit({EvKind::kBarrier, -1, -1, -1, 0, op});
        })
        .Case<PpermuteOp, AllGatherOp, AllReduceOp, ReduceScatterOp,
              AllToAllOp>([&](auto o) { ExecCollective(o); })
        .Default([&](Operation* op) {
          Fail(op, "unverifiable: the checker does not model '" +
                       op->getName().getStringRef() + "'");
        });
  }

  int AxisOf(Operation* op, llvm::StringRef axis) {
    int a = mesh_.AxisIndex(axis);
    if (a < 0) Fail(op, "unknown mesh axis '" + axis + "'");
    return a;
  }

  std::vector<int> GroupOf(Operation* op, ArrayAttr axes) {
    std::vector<bool> in_group(mesh_.shape.size(), false);
    for (Attribute a : axes)
      in_group[AxisOf(op, llvm::cast<StringAttr>(a).getValue())] = true;
    std::vector<int> members;
    for (int d = 0; d < num_devices_; ++d) {
      int64_t rest = d;
      bool same = true;
      for (int a = static_cast<int>(mesh_.shape.size()) - 1; a >= 0; --a) {
        int64_t c = rest % mesh_.shape[a];
        rest /= mesh_.shape[a];
        if (!in_group[a] && c != coords_[a]) same = false;
      }
      if (same) members.push_back(d);
    }
    return members;
  }

  void ExecDmaStart(DmaStartOp o) {
    Operation* op = o;
    const Buffer& src = Buf(o.getSource(), op);
    const Buffer& dst = Buf(o.getTarget(), op);
    RequireStatic(src, op, "source");
    RequireStatic(dst, op, "target");
    if (src.elem != dst.elem) FailOnDevice(op, "DMA element types differ");
    if (src.shape != dst.shape) {
      std::string s, d;
      for (int64_t x : src.shape)
        s += (s.empty() ? "" : "x") + std::to_string(x);
      for (int64_t x : dst.shape)
        d += (d.empty() ? "" : "x") + std::to_string(x);
      FailOnDevice(op, "DMA shape mismatch: source " + s + " vs target " + d);
    }
    int64_t bytes = Bytes(src, op);
    int recv = Slot(o.getTargetSemaphore(), op);
    int target = Target(op, o.getDeviceId(), o.getLogical());
    int send = -1;
    if (o.getSourceSemaphore()) {
      send = Slot(o.getSourceSemaphore(), op);
      if (!dst.symmetric) {
        InFlightDiagnostic d = op->emitError()
                               << "remote DMA into memory that is not "
                                  "symmetric (device "
                               << device_
                               << "); use meshdma.alloc or a kernel argument";
        if (dst.origin)
          d.attachNote(dst.origin->getLoc()) << "the target is allocated here";
        throw Abort{};
      }
    }
    Event e{EvKind::kDmaStart, recv, send, target, bytes, op};
    auto record = [&](const Buffer& b, int owner, bool write) {
      size_t before = trace_->accesses.size();
      Record(b, owner, write, true, op, Covered(b));
      return trace_->accesses.size() > before ? static_cast<int32_t>(before)
                                              : -1;
    };
    e.read_access = record(src, device_, false);
    e.write_access = record(dst, target, true);
    Emit(e);
  }

  func::FuncOp kernel_;
  const MeshInfo& mesh_;
  int device_;
  bool entry_barrier_;
  IntAttrCache& int_attrs_;
  int64_t num_devices_;
  std::vector<int64_t> coords_;
  std::vector<int64_t> grid_, grid_index_;
  Trace* trace_ = nullptr;
  llvm::DenseMap<Value, AVal> values_;
  llvm::DenseMap<Operation*, AVal> memo_;
  llvm::DenseMap<Operation*, bool> communicates_;
  std::vector<DataReason> reasons_;
  std::vector<Buffer> buffers_;
  int next_local_ = 0;
  int64_t steps_ = 0;
  int depth_ = 0;
  int speculating_ = 0;              // > 0: inside code that only computes
  std::vector<func::FuncOp> funcs_;  // the targets of func.constant
};

//===----------------------------------------------------------------------===//
// Joint run
//===----------------------------------------------------------------------===//

struct Credit {
  Operation* op;
  int from;
  int64_t size;
  int64_t left;
};

struct Mismatch {
  Operation* wait;
  const Credit* credit;
  int64_t wait_bytes;
  int device;
  int slot;
};

class JointRun {
 public:
  JointRun(const std::vector<Trace>& traces, int calls, bool track_credits)
      : traces_(traces),
        n_(static_cast<int>(traces.size())),
        calls_(calls),
        track_(track_credits) {
    slots_ = 1;
    for (const Trace& t : traces) slots_ = std::max(slots_, t.num_slots);
    counts_.assign(static_cast<size_t>(n_) * slots_, 0);
    pos_.assign(n_, 0);
    barriers_.assign(n_, 0);
    arrived_.assign(n_, false);
    colls_.assign(n_, 0);
    coll_arrived_.assign(n_, false);
    if (track_) credits_.resize(static_cast<size_t>(n_) * slots_);
  }

  // Runs to the fixpoint: no device can take its next event.
  void Run() {
    bool progress = true;
    while (progress) {
      progress = false;
      for (int d = 0; d < n_; ++d)
        while (CanStep(d)) progress = true;
    }
  }

  int64_t Len(int d) const {
    return static_cast<int64_t>(traces_[d].events.size());
  }
  bool Done(int d) const { return pos_[d] >= Len(d) * calls_; }
  const Event& Current(int d) const {
    return traces_[d].events[pos_[d] % Len(d)];
  }
  int64_t Count(int d, int slot) const {
    return counts_[static_cast<size_t>(d) * slots_ + slot];
  }
  int Slots() const { return slots_; }
  const std::deque<Credit>& Credits(int d, int slot) const {
    return credits_[static_cast<size_t>(d) * slots_ + slot];
  }
  const std::vector<Mismatch>& mismatches() const { return mismatches_; }
  int64_t steps() const { return steps_; }

  // The devices whose remaining events (this call and later) credit `slot` of
  // device `d`, or that have not yet arrived where `d` waits for them.
  std::vector<int> WaitsFor(int d) const {
    std::vector<int> out;
    const Event& e = Current(d);
    for (int o = 0; o < n_; ++o) {
      if (Done(o) && e.kind != EvKind::kBarrier &&
          e.kind != EvKind::kCollective)
        continue;
      if (e.kind == EvKind::kBarrier) {
        if (o != d && barriers_[o] < barriers_[d]) out.push_back(o);
        continue;
      }
      if (e.kind == EvKind::kCollective) {
        const auto& members = traces_[d].collectives[e.slot].members;
        if (o != d &&
            std::find(members.begin(), members.end(), o) != members.end() &&
            colls_[o] < colls_[d])
          out.push_back(o);
        continue;
      }
      for (int64_t p = pos_[o]; p < Len(o) * calls_; ++p) {
        const Event& x = traces_[o].events[p % Len(o)];
        bool credits = false;
        if (x.kind == EvKind::kSignal && x.target == d && x.slot == e.slot)
          credits = true;
        if (x.kind == EvKind::kDmaStart) {
          if (x.target == d && x.slot == e.slot) credits = true;
          if (o == d && x.send_slot == e.slot && x.send_slot >= 0)
            credits = true;
        }
        if (credits) {
          out.push_back(o);
          break;
        }
      }
    }
    return out;
  }

 private:
  int64_t& At(int d, int slot) {
    return counts_[static_cast<size_t>(d) * slots_ + slot];
  }

  void Credit_(int d, int slot, int64_t amount, Operation* op, int from) {
    At(d, slot) += amount;
    if (track_)
      credits_[static_cast<size_t>(d) * slots_ + slot].push_back(
          {op, from, amount, amount});
  }

  void Consume(int d, int slot, int64_t amount, Operation* wait, bool dma) {
    At(d, slot) -= amount;
    if (!track_) return;
    auto& q = credits_[static_cast<size_t>(d) * slots_ + slot];
    int64_t left = amount;
    while (left > 0 && !q.empty()) {
      Credit& c = q.front();
      int64_t take = std::min(left, c.left);
      c.left -= take;
      left -= take;
      if (c.left == 0) {
        q.pop_front();
      } else if (dma) {
        mismatches_.push_back({wait, nullptr, amount, d, slot});
        mismatch_credit_.push_back(c);
      }
    }
  }

  bool CanStep(int d) {
    if (Done(d)) return false;
    const Event& e = Current(d);
    switch (e.kind) {
      case EvKind::kDmaStart:
        if (e.send_slot >= 0) Credit_(d, e.send_slot, e.amount, e.op, d);
        Credit_(e.target, e.slot, e.amount, e.op, d);
        break;
      case EvKind::kSignal:
        Credit_(e.target, e.slot, e.amount, e.op, d);
        break;
      case EvKind::kWait:
      case EvKind::kWaitRecv:
      case EvKind::kWaitSend:
        if (At(d, e.slot) < e.amount) return false;
        Consume(d, e.slot, e.amount, e.op, e.kind != EvKind::kWait);
        break;
      case EvKind::kBarrier: {
        if (!arrived_[d]) {
          arrived_[d] = true;
          ++barriers_[d];
        }
        for (int o = 0; o < n_; ++o)
          if (barriers_[o] < barriers_[d]) return false;
        arrived_[d] = false;
        break;
      }
      case EvKind::kCollective: {
        if (!coll_arrived_[d]) {
          coll_arrived_[d] = true;
          ++colls_[d];
        }
        for (int o : traces_[d].collectives[e.slot].members)
          if (colls_[o] < colls_[d]) return false;
        coll_arrived_[d] = false;
        break;
      }
    }
    ++pos_[d];
    ++steps_;
    return true;
  }

  const std::vector<Trace>& traces_;
  int n_;
  int calls_;
  bool track_;
  int slots_;
  std::vector<int64_t> counts_;
  std::vector<int64_t> pos_;
  std::vector<int64_t> barriers_;
  std::vector<bool> arrived_;
  std::vector<int64_t> colls_;
  std::vector<bool> coll_arrived_;
  std::vector<std::deque<Credit>> credits_;
  std::vector<Mismatch> mismatches_;

 public:
  std::vector<Credit> mismatch_credit_;

 private:
  int64_t steps_ = 0;
};

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

std::string SlotName(const Trace& t, int slot) {
  if (slot == kBarrierSlot) return "the barrier semaphore";
  const AllocRecord* rec = nullptr;
  int k = 0;
  for (const AllocRecord& a : t.allocs)
    if (a.is_semaphore && ++k == slot) rec = &a;
  std::string kind = rec ? stringifySemaphoreKind(rec->kind).str() : "?";
  return "semaphore #" + std::to_string(slot - 1) + " (" + kind + ")";
}

Operation* SlotOp(const Trace& t, int slot) {
  int k = 0;
  for (const AllocRecord& a : t.allocs)
    if (a.is_semaphore && ++k == slot) return a.op;
  return nullptr;
}

std::string EventWhat(const Event& e) {
  switch (e.kind) {
    case EvKind::kWait:
      return "sem_wait needs " + std::to_string(e.amount);
    case EvKind::kWaitRecv:
      return "dma_wait_recv needs " + std::to_string(e.amount) + " bytes";
    case EvKind::kWaitSend:
      return "dma_wait_send needs " + std::to_string(e.amount) + " bytes";
    case EvKind::kBarrier:
      return "device barrier";
    case EvKind::kCollective:
      return "collective";
    default:
      return "event";
  }
}

struct VerifyProtocolPass
    : public PassWrapper<VerifyProtocolPass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(VerifyProtocolPass)

  VerifyProtocolPass() = default;
  VerifyProtocolPass(const VerifyProtocolPass& other) : PassWrapper(other) {}

  StringRef getArgument() const final { return "meshdma-verify-protocol"; }
  StringRef getDescription() const final {
    return "Proves a meshdma kernel's semaphore protocol for one mesh shape "
           "(deadlock, exit contract, ids, allocations, DMA sizes, entry "
           "race)";
  }

  Option<std::string> mesh_shape_{
      *this, "mesh-shape",
      llvm::cl::desc("Mesh shape, e.g. 8 or 2x4 (fills `?` dimensions)")};
  Option<int> calls_{*this, "calls",
                     llvm::cl::desc("Back-to-back calls to check for the "
                                    "entry race (1 to 8)"),
                     llvm::cl::init(2)};
  Option<bool> stats_{*this, "stats",
                      llvm::cl::desc("Emit a remark with the figures of "
                                     "each verified kernel"),
                      llvm::cl::init(false)};
  Option<std::string> kernel_{*this, "kernel",
                              llvm::cl::desc("Only this kernel")};

  // 1. The options: `calls` in [1, kMaxCalls]; `kernel`, when given, names
  //    a kernel of the module (else nothing would be proved).
  // 2. Every kernel (or the one named) is verified.
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (calls_ < 1 || calls_ > kMaxCalls) {
      module.emitError("meshdma-verify-protocol: option 'calls' must be 1 to ")
          << kMaxCalls << " (back-to-back calls checked for the entry race), "
          << "got " << calls_.getValue();
      return signalPassFailure();
    }
    bool ok = true, found = false;
    std::string kernels;
    module.walk([&](func::FuncOp f) {
      if (!f->hasAttr(MeshDmaDialect::kKernelAttr)) return;
      kernels += (kernels.empty() ? "@" : ", @") + f.getSymName().str();
      if (!kernel_.empty() && f.getSymName() != kernel_) return;
      found = true;
      if (failed(VerifyKernel(f))) ok = false;
    });
    if (!kernel_.empty() && !found) {
      module.emitError("meshdma-verify-protocol: option 'kernel': no kernel @")
          << kernel_ << " in the module (its kernels: "
          << (kernels.empty() ? "none" : kernels) << ")";
      return signalPassFailure();
    }
    if (!ok) signalPassFailure();
  }

  LogicalResult ResolveMesh(func::FuncOp f, MeshInfo& mesh) {
    auto found = GetKernelMesh(f);
    if (!found) return f.emitError("kernel has no resolvable meshdma.mesh");
    mesh = *found;
    llvm::SmallVector<int64_t> given;
    if (!mesh_shape_.empty()) {
      llvm::SmallVector<llvm::StringRef> parts;
      llvm::StringRef(mesh_shape_).split(parts, 'x');
      for (llvm::StringRef p : parts) {
        int64_t v;
        if (p.getAsInteger(10, v) || v < 1)
          return f.emitError("bad mesh-shape '") << mesh_shape_ << "'";
        given.push_back(v);
      }
      if (given.size() != mesh.shape.size())
        return f.emitError("mesh-shape '")
               << mesh_shape_ << "' has rank " << given.size() << ", mesh @"
               << mesh.op.getSymName() << " has rank " << mesh.shape.size();
    }
    for (size_t a = 0; a < mesh.shape.size(); ++a) {
      if (ShapedType::isDynamic(mesh.shape[a])) {
        if (given.empty())
          return f.emitError("mesh @")
                 << mesh.op.getSymName()
                 << " has a dynamic shape; pass mesh-shape=...";
        mesh.shape[a] = given[a];
      } else if (!given.empty() && given[a] != mesh.shape[a]) {
        return f.emitError("mesh-shape '")
               << mesh_shape_ << "' contradicts mesh @" << mesh.op.getSymName()
               << " (axis '" << mesh.axes[a] << "' has size " << mesh.shape[a]
               << ")";
      }
    }
    return success();
  }

  LogicalResult VerifyKernel(func::FuncOp f) {
    auto start = std::chrono::steady_clock::now();
    MeshInfo mesh;
    if (failed(ResolveMesh(f, mesh))) return failure();
    int64_t total = 1;
    bool overflow = false;
    for (int64_t s : mesh.shape) overflow |= llvm::MulOverflow(total, s, total);
    if (overflow || total > kMaxDevices) {
      InFlightDiagnostic d = f.emitError("the checker handles meshes of up to ")
                             << kMaxDevices << " devices, got ";
      if (overflow)
        d << "more than 2^63";
      else
        d << total;
      return d;
    }
    if (total < 1)
      return f.emitError("mesh @") << mesh.op.getSymName() << " has no devices";
    int n = static_cast<int>(total);
    bool entry_barrier = true;
    if (auto b = f->getAttrOfType<BoolAttr>(MeshDmaDialect::kEntryBarrierAttr))
      entry_barrier = b.getValue();

    std::vector<Trace> traces(n);
    IntAttrCache int_attrs;
    for (int d = 0; d < n; ++d) {
      DeviceTracer tracer(f, mesh, d, entry_barrier, int_attrs);
      if (failed(tracer.Run(traces[d]))) return failure();
    }
    if (failed(CheckAllocations(f, traces)) || failed(CheckCollectives(traces)))
      return failure();

    JointRun run(traces, 1, /*track_credits=*/true);
    run.Run();
    if (failed(ReportDeadlock(f, traces, run)) ||
        failed(ReportExit(traces, run)))
      return failure();

    // Happens-before over every schedule: the entry race (without the
    // runtime's entry barrier, over `calls` calls) and data races.
    int64_t steps = run.steps();
    if (failed(CheckOrdering(f, traces, entry_barrier ? 1 : calls_,
                             !entry_barrier, steps)))
      return failure();
    auto end = std::chrono::steady_clock::now();
    if (stats_) {
      int64_t events = 0;
      for (const Trace& t : traces)
        events += static_cast<int64_t>(t.events.size());
      double ms =
          std::chrono::duration<double, std::milli>(end - start).count();
      f.emitRemark() << "protocol verified: " << n << " devices, " << events
                     << " events, " << steps << " steps, "
                     << llvm::formatv("{0:F2}", ms).str() << " ms";
    }
    return success();
  }

  LogicalResult CheckAllocations(func::FuncOp f,
                                 const std::vector<Trace>& traces) {
    const auto& ref = traces[0].allocs;
    auto describe = [](const AllocRecord& a) {
      if (a.is_semaphore)
        return "a " + stringifySemaphoreKind(a.kind).str() + " semaphore";
      std::string s;
      llvm::raw_string_ostream os(s);
      os << "a buffer " << a.type;
      return s;
    };
    for (size_t d = 1; d < traces.size(); ++d) {
      const auto& mine = traces[d].allocs;
      size_t common = std::min(ref.size(), mine.size());
      for (size_t k = 0; k < common; ++k) {
        bool same = ref[k].is_semaphore == mine[k].is_semaphore &&
                    (ref[k].is_semaphore ? ref[k].kind == mine[k].kind
                                         : ref[k].type == mine[k].type);
        if (!same) {
          InFlightDiagnostic diag = mine[k].op->emitError()
                                    << "asymmetric allocation: allocation #"
                                    << k << " is " << describe(mine[k])
                                    << " on device " << d << " but "
                                    << describe(ref[k]) << " on device 0";
          diag.attachNote(ref[k].op->getLoc()) << "device 0 allocates it here";
          return failure();
        }
      }
      if (ref.size() != mine.size())
        return f.emitError("asymmetric allocation: device ")
               << d << " makes " << mine.size() << " allocations, device 0 "
               << ref.size();
    }
    return success();
  }

  LogicalResult CheckCollectives(const std::vector<Trace>& traces) {
    for (size_t d = 0; d < traces.size(); ++d) {
      for (size_t k = 0; k < traces[d].collectives.size(); ++k) {
        const CollectiveRecord& mine = traces[d].collectives[k];
        for (int o : mine.members) {
          const auto& theirs = traces[o].collectives;
          if (k >= theirs.size()) {
            mine.op->emitError("collective mismatch: device ")
                << d << " calls its collective #" << k << " here; device " << o
                << " of its group makes only " << theirs.size();
            return failure();
          }
          Operation* other = theirs[k].op;
          if (other->getName() != mine.op->getName() ||
              other->getAttrDictionary() != mine.op->getAttrDictionary() ||
              other->getOperandTypes() != mine.op->getOperandTypes()) {
            InFlightDiagnostic diag =
                mine.op->emitError("collective mismatch: collective #")
                << k << " of device " << d << " differs from device " << o
                << "'s";
            diag.attachNote(other->getLoc()) << "device " << o << " calls this";
            return failure();
          }
        }
      }
    }
    return success();
  }

  LogicalResult ReportDeadlock(func::FuncOp f, const std::vector<Trace>& traces,
                               const JointRun& run) {
    int n = static_cast<int>(traces.size());
    std::vector<int> stuck;
    for (int d = 0; d < n; ++d)
      if (!run.Done(d)) stuck.push_back(d);
    if (stuck.empty()) return success();
    // Prefer a device on a wait-for cycle.
    int first = stuck[0];
    std::vector<int> cycle;
    for (int start : stuck) {
      std::vector<int> path{start};
      std::vector<int> seen(n, -1);
      seen[start] = 0;
      int cur = start;
      while (true) {
        std::vector<int> next = run.WaitsFor(cur);
        int pick = -1;
        for (int x : next)
          if (!run.Done(x)) {
            pick = x;
            break;
          }
        if (pick < 0) break;
        if (seen[pick] >= 0) {
          cycle.assign(path.begin() + seen[pick], path.end());
          cycle.push_back(pick);
          break;
        }
        seen[pick] = static_cast<int>(path.size());
        path.push_back(pick);
        cur = pick;
      }
      if (!cycle.empty()) {
        first = cycle[0];
        break;
      }
    }
    const Event& e = run.Current(first);
    InFlightDiagnostic diag = e.op->emitError();
    diag << "deadlock: device " << first << " is stuck here: " << EventWhat(e);
    if (e.slot >= 0 && e.kind != EvKind::kCollective)
      diag << " on " << SlotName(traces[first], e.slot) << ", has "
           << run.Count(first, e.slot);
    diag << " (" << stuck.size() << " of " << n << " devices are stuck)";
    if (!cycle.empty()) {
      std::string s;
      for (size_t i = 0; i < cycle.size(); ++i)
        s += (i ? " -> " : "") + std::string("device ") +
             std::to_string(cycle[i]);
      diag.attachNote(e.op->getLoc()) << "wait-for cycle: " << s;
      for (size_t i = 1; i + 1 < cycle.size(); ++i) {
        const Event& x = run.Current(cycle[i]);
        std::string what = EventWhat(x);
        if (x.slot >= 0 && x.kind != EvKind::kCollective)
          what += " on " + SlotName(traces[cycle[i]], x.slot) + ", has " +
                  std::to_string(run.Count(cycle[i], x.slot));
        diag.attachNote(x.op->getLoc())
            << "device " << cycle[i] << " is stuck here: " << what;
      }
    } else {
      std::vector<int> who = run.WaitsFor(first);
      if (who.empty()) {
        diag.attachNote(e.op->getLoc())
            << "no device credits it in the rest of its trace";
      } else {
        for (int o : who) {
          if (run.Done(o)) continue;
          diag.attachNote(run.Current(o).op->getLoc())
              << "device " << o << " could credit it but is stuck here";
          break;
        }
      }
    }
    for (const Mismatch& m : run.mismatches())
      if (m.device == first && m.slot == e.slot)
        diag.attachNote(m.wait->getLoc())
            << "DMA size mismatch: this wait of " << m.wait_bytes
            << " bytes consumed part of a larger DMA";
    (void)f;
    return failure();
  }

  LogicalResult ReportExit(const std::vector<Trace>& traces,
                           const JointRun& run) {
    int n = static_cast<int>(traces.size());
    for (int slot = 0; slot < run.Slots(); ++slot) {
      int bad = 0, first = -1;
      for (int d = 0; d < n; ++d)
        if (run.Count(d, slot) != 0) {
          if (first < 0) first = d;
          ++bad;
        }
      if (first < 0) continue;
      const Trace& t = traces[first];
      // The size mismatch is the root cause where there is one.
      for (size_t i = 0; i < run.mismatches().size(); ++i) {
        const Mismatch& m = run.mismatches()[i];
        if (m.device != first || m.slot != slot) continue;
        const Credit& c = run.mismatch_credit_[i];
        InFlightDiagnostic diag =
            m.wait->emitError()
            << "DMA size mismatch: on device " << first << " this wait of "
            << m.wait_bytes << " bytes consumed part of a " << c.size
            << "-byte DMA from device " << c.from << "; " << SlotName(t, slot)
            << " holds " << run.Count(first, slot) << " at exit";
        diag.attachNote(c.op->getLoc()) << "the DMA starts here";
        return failure();
      }
      Operation* where = SlotOp(t, slot);
      const auto& credits = run.Credits(first, slot);
      if (!where)
        where = credits.empty() ? t.events.front().op : credits.front().op;
      InFlightDiagnostic diag = where->emitError();
      diag << SlotName(t, slot) << " of device " << first << " holds "
           << run.Count(first, slot) << " at exit, the exit contract needs 0";
      if (bad > 1) diag << " (" << bad << " devices)";
      int shown = 0;
      for (const Credit& c : credits) {
        if (++shown > 4) break;
        diag.attachNote(c.op->getLoc())
            << "unmatched: " << c.left << " from device " << c.from << " here";
      }
      return failure();
    }
    // Every count is back to 0, but a DMA wait took part of a DMA: the
    // wait does not tell that DMA's bytes have landed.
    if (!run.mismatches().empty()) {
      const Mismatch& m = run.mismatches().front();
      const Credit& c = run.mismatch_credit_.front();
      InFlightDiagnostic diag =
          m.wait->emitError()
          << "DMA size mismatch: on device " << m.device << " this wait of "
          << m.wait_bytes << " bytes consumed part of a " << c.size
          << "-byte DMA from device " << c.from
          << " (a DMA wait must take whole DMAs: it cannot tell which bytes "
             "have landed)";
      diag.attachNote(c.op->getLoc()) << "the DMA starts here";
      return failure();
    }
    return success();
  }
};

}  // namespace

std::unique_ptr<Pass> CreateVerifyProtocolPass() {
  return std::make_unique<VerifyProtocolPass>();
}

}  // namespace meshdma::ir
