// The meshdma dialect: registration, mesh lookup and op verifiers. Each
// verifier message names the operand, what was expected and what was found.
#include <set>

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"
#include "meshdma_mlir/MeshDma.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Transforms/InliningUtils.h"

using namespace mlir;
using namespace meshdma::ir;

#include "meshdma_mlir/MeshDmaDialect.cpp.inc"
#include "meshdma_mlir/MeshDmaEnums.cpp.inc"
#define GET_TYPEDEF_CLASSES
#include "meshdma_mlir/MeshDmaTypes.cpp.inc"
#define GET_OP_CLASSES
#include "meshdma_mlir/MeshDmaOps.cpp.inc"

namespace {
// meshdma ops carry no region-specific state, so they inline anywhere (the
// lowering inlines helper functions into their kernels).
struct MeshDmaInlinerInterface : public DialectInlinerInterface {
  using DialectInlinerInterface::DialectInlinerInterface;
  bool isLegalToInline(Operation*, Region*, bool, IRMapping&) const final {
    return true;
  }
  bool isLegalToInline(Region*, Region*, bool, IRMapping&) const final {
    return true;
  }
};
}  // namespace

void MeshDmaDialect::initialize() {
  addInterfaces<MeshDmaInlinerInterface>();
  addTypes<
#define GET_TYPEDEF_LIST
#include "meshdma_mlir/MeshDmaTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "meshdma_mlir/MeshDmaOps.cpp.inc"
      >();
}

namespace meshdma::ir {

int MeshInfo::AxisIndex(llvm::StringRef axis) const {
  for (auto [i, name] : llvm::enumerate(axes))
    if (name == axis) return static_cast<int>(i);
  return -1;
}

std::optional<int64_t> MeshInfo::GroupSize(ArrayAttr names) const {
  int64_t n = 1;
  for (Attribute a : names) {
    auto s = llvm::dyn_cast<StringAttr>(a);
    if (!s) return std::nullopt;
    int i = AxisIndex(s.getValue());
    if (i < 0 || ShapedType::isDynamic(shape[i]) || shape[i] < 1)
      return std::nullopt;
    // Neither an empty axis nor a group of more than 2^63 devices has a size
    // that the shape checks could divide by or multiply with.
    if (llvm::MulOverflow(n, shape[i], n)) return std::nullopt;
  }
  return n;
}

std::optional<MeshInfo> GetKernelMesh(func::FuncOp func) {
  if (!func) return std::nullopt;
  auto ref = func->getAttrOfType<FlatSymbolRefAttr>(MeshDmaDialect::kMeshAttr);
  if (!ref) return std::nullopt;
  auto mesh = SymbolTable::lookupNearestSymbolFrom<mesh::MeshOp>(func, ref);
  if (!mesh) return std::nullopt;
  MeshInfo info;
  info.op = mesh;
  info.shape.assign(mesh.getShape().begin(), mesh.getShape().end());
  auto names = mesh->getAttrOfType<ArrayAttr>(MeshDmaDialect::kAxesAttr);
  for (size_t i = 0; i < info.shape.size(); ++i) {
    if (names && i < names.size() && llvm::isa<StringAttr>(names[i]))
      info.axes.push_back(llvm::cast<StringAttr>(names[i]).str());
    else
      info.axes.push_back(std::to_string(i));
  }
  return info;
}

std::optional<MeshInfo> GetEnclosingMesh(Operation* op) {
  return GetKernelMesh(op->getParentOfType<func::FuncOp>());
}

int64_t ElementBytes(Type type) {
  if (type.isInteger(8)) return 1;
  if (type.isInteger(32) || type.isF32()) return 4;
  if (type.isInteger(64) || type.isF64()) return 8;
  if (type.isF16() || type.isBF16()) return 2;
  return 0;
}

}  // namespace meshdma::ir

namespace {

std::string ShapeString(ShapedType t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  llvm::interleave(
      t.getShape(), os,
      [&](int64_t d) {
        if (ShapedType::isDynamic(d))
          os << "?";
        else
          os << d;
      },
      "x");
  return s.empty() ? "scalar" : s;
}

std::string TypeString(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  return s;
}

std::string AxisList(const MeshInfo& mesh) {
  std::string s;
  for (auto [i, a] : llvm::enumerate(mesh.axes)) s += (i ? ", " : "") + a;
  return s;
}

SemaphoreKind KindOf(Value v) {
  return llvm::cast<SemaphoreType>(v.getType()).getKind();
}

// Checks a device clause: `logical` needs exactly one id; a MESH id has one
// coordinate per axis of the enclosing kernel's mesh.
LogicalResult VerifyDeviceId(Operation* op, ValueRange ids, bool logical) {
  if (logical && ids.size() != 1)
    return op->emitOpError("a LOGICAL device id is one i32, got ")
           << ids.size();
  if (logical || ids.empty()) return success();
  if (auto mesh = GetEnclosingMesh(op)) {
    if (ids.size() != mesh->axes.size())
      return op->emitOpError(
                 "a MESH device id needs one coordinate per mesh "
                 "axis (")
             << mesh->axes.size() << ", mesh @" << mesh->op.getSymName()
             << " has axes " << AxisList(*mesh) << "), got " << ids.size();
  }
  return success();
}

// Collective axes: non-empty, unique, and axes of the kernel's mesh.
LogicalResult VerifyAxes(Operation* op, ArrayAttr axes) {
  if (axes.empty()) return op->emitOpError("needs at least one mesh axis");
  std::set<std::string> seen;
  auto mesh = GetEnclosingMesh(op);
  for (Attribute a : axes) {
    std::string name = llvm::cast<StringAttr>(a).str();
    if (!seen.insert(name).second)
      return op->emitOpError("mesh axis '") << name << "' is listed twice";
    if (mesh && mesh->AxisIndex(name) < 0)
      return op->emitOpError("unknown mesh axis '")
             << name << "' (mesh @" << mesh->op.getSymName() << " has axes "
             << AxisList(*mesh) << ")";
  }
  return success();
}

LogicalResult VerifyAxisName(Operation* op, llvm::StringRef axis) {
  auto mesh = GetEnclosingMesh(op);
  if (mesh && mesh->AxisIndex(axis) < 0)
    return op->emitOpError("unknown mesh axis '")
           << axis << "' (mesh @" << mesh->op.getSymName() << " has axes "
           << AxisList(*mesh) << ")";
  return success();
}

std::optional<int64_t> GroupSizeAt(Operation* op, ArrayAttr axes) {
  auto mesh = GetEnclosingMesh(op);
  if (!mesh) return std::nullopt;
  return mesh->GroupSize(axes);
}

LogicalResult VerifySameElementType(Operation* op, MemRefType in,
                                    MemRefType out) {
  if (in.getElementType() != out.getElementType())
    return op->emitOpError("input and output element types differ (")
           << in.getElementType() << " vs " << out.getElementType() << ")";
  return success();
}

std::optional<int64_t> NumElements(MemRefType t) {
  if (!t.hasStaticShape()) return std::nullopt;
  return t.getNumElements();
}

DenseI64ArrayAttr GridOf(Operation* op) {
  auto func = op->getParentOfType<func::FuncOp>();
  if (!func) return {};
  return func->getAttrOfType<DenseI64ArrayAttr>(
      MeshDmaDialect::kIterationBoundsAttr);
}

LogicalResult VerifyGridDimension(Operation* op, int64_t dim) {
  DenseI64ArrayAttr grid = GridOf(op);
  if (!grid)
    return op->emitOpError(
        "needs an enclosing kernel with meshdma.iteration_bounds");
  if (dim < 0 || dim >= static_cast<int64_t>(grid.size()))
    return op->emitOpError("grid dimension ")
           << dim << " is out of range for a grid of rank " << grid.size();
  return success();
}

}  // namespace

//===----------------------------------------------------------------------===//
// Attributes on foreign ops: kernels and meshes.
//===----------------------------------------------------------------------===//

namespace {

// `meshdma.axes` on a mesh.mesh: one distinct name per mesh dimension.
LogicalResult VerifyMeshAxesAttr(Operation* op, StringRef name,
                                 Attribute value) {
  auto mesh = llvm::dyn_cast<mesh::MeshOp>(op);
  if (!mesh) return op->emitError() << name << " belongs on a mesh.mesh";
  auto names = llvm::dyn_cast<ArrayAttr>(value);
  if (!names || !llvm::all_of(names, [](Attribute a) {
        return llvm::isa<StringAttr>(a);
      }))
    return op->emitError() << name << " must be an array of axis names";
  if (static_cast<int64_t>(names.size()) != mesh.getRank())
    return op->emitError() << name << " names " << names.size()
                           << " axes but mesh @" << mesh.getSymName()
                           << " has rank " << mesh.getRank();
  std::set<llvm::StringRef> seen;
  for (Attribute a : names)
    if (!seen.insert(llvm::cast<StringAttr>(a).getValue()).second)
      return op->emitError()
             << name << ": axis '" << llvm::cast<StringAttr>(a).getValue()
             << "' is named twice";
  return success();
}

// The kernel marker: a unit attribute on a function with a mesh and no
// results.
LogicalResult VerifyKernelAttr(func::FuncOp func, StringRef name,
                               Attribute value) {
  Operation* op = func;
  if (!llvm::isa<UnitAttr>(value))
    return op->emitError() << name << " is a unit attribute";
  if (!func->hasAttr(MeshDmaDialect::kMeshAttr))
    return op->emitError() << "a meshdma kernel needs "
                           << MeshDmaDialect::kMeshAttr << " = @mesh";
  if (func.getFunctionType().getNumResults() != 0)
    return op->emitError() << "a meshdma kernel returns no values, got "
                           << func.getFunctionType().getNumResults();
  return success();
}

// The kernel's mesh: a symbol naming a mesh.mesh.
LogicalResult VerifyMeshRefAttr(Operation* op, StringRef name,
                                Attribute value) {
  auto ref = llvm::dyn_cast<FlatSymbolRefAttr>(value);
  if (!ref) return op->emitError() << name << " must be a symbol (@mesh)";
  if (!SymbolTable::lookupNearestSymbolFrom<mesh::MeshOp>(op, ref))
    return op->emitError() << name << " " << ref
                           << " does not name a mesh.mesh";
  return success();
}

// The grid: every bound at least 1.
LogicalResult VerifyIterationBoundsAttr(Operation* op, StringRef name,
                                        Attribute value) {
  auto bounds = llvm::dyn_cast<DenseI64ArrayAttr>(value);
  if (!bounds) return op->emitError() << name << " must be array<i64: ...>";
  for (auto [i, b] : llvm::enumerate(bounds.asArrayRef()))
    if (b < 1)
      return op->emitError() << name << ": grid dimension " << i
                             << " has bound " << b << ", must be >= 1";
  return success();
}

// One "parallel" or "arbitrary" per grid dimension.
LogicalResult VerifyDimensionSemanticsAttr(func::FuncOp func, StringRef name,
                                           Attribute value) {
  Operation* op = func;
  auto sems = llvm::dyn_cast<ArrayAttr>(value);
  auto grid = func->getAttrOfType<DenseI64ArrayAttr>(
      MeshDmaDialect::kIterationBoundsAttr);
  if (!sems || !grid || sems.size() != grid.size())
    return op->emitError() << name << " needs one entry per dimension of "
                           << MeshDmaDialect::kIterationBoundsAttr;
  for (Attribute a : sems) {
    auto s = llvm::dyn_cast<StringAttr>(a);
    if (!s || (s.getValue() != "parallel" && s.getValue() != "arbitrary"))
      return op->emitError()
             << name << ": entries are \"parallel\" or \"arbitrary\"";
  }
  return success();
}

// One dictionary per argument; its `window_bounds`, when present, divide
// the argument's static shape dimension by dimension.
LogicalResult VerifyWindowParamsAttr(func::FuncOp func, StringRef name,
                                     Attribute value) {
  Operation* op = func;
  auto params = llvm::dyn_cast<ArrayAttr>(value);
  if (!params || params.size() != func.getNumArguments())
    return op->emitError() << name << " needs one dictionary per argument ("
                           << func.getNumArguments() << ")";
  for (auto [i, p] : llvm::enumerate(params)) {
    auto dict = llvm::dyn_cast<DictionaryAttr>(p);
    if (!dict)
      return op->emitError() << name << "[" << i << "] must be a dictionary";
    auto bounds = dict.getAs<DenseI64ArrayAttr>("window_bounds");
    if (!bounds) continue;  // the whole operand
    auto type = llvm::dyn_cast<MemRefType>(func.getArgument(i).getType());
    if (!type || !type.hasStaticShape())
      return op->emitError() << name << "[" << i
                             << "]: window_bounds need a static memref "
                                "argument";
    if (static_cast<int64_t>(bounds.size()) != type.getRank())
      return op->emitError()
             << name << "[" << i << "]: window_bounds have rank "
             << bounds.size() << ", argument has rank " << type.getRank();
    for (auto [d, b] : llvm::enumerate(bounds.asArrayRef()))
      if (b < 1 || type.getDimSize(d) % b != 0)
        return op->emitError() << name << "[" << i << "]: window bound " << b
                               << " does not divide dimension " << d
                               << " of size " << type.getDimSize(d);
  }
  return success();
}

}  // namespace

LogicalResult MeshDmaDialect::verifyOperationAttribute(Operation* op,
                                                       NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  Attribute value = attr.getValue();
  // 1. The mesh's axis names sit on a mesh.mesh.
  if (name == kAxesAttr) return VerifyMeshAxesAttr(op, name, value);

  // 2. Every other attribute sits on a func.func.
  auto func = llvm::dyn_cast<func::FuncOp>(op);
  if (!func) return op->emitError() << name << " belongs on a func.func";
  if (name == kKernelAttr) return VerifyKernelAttr(func, name, value);
  if (name == kMeshAttr) return VerifyMeshRefAttr(op, name, value);
  if (name == kEntryBarrierAttr) {
    if (!llvm::isa<BoolAttr>(value))
      return op->emitError() << name << " must be true or false";
    return success();
  }
  if (name == kCollectiveIdAttr) {
    auto id = llvm::dyn_cast<IntegerAttr>(value);
    if (!id || id.getInt() < 0 || id.getInt() >= 64)
      return op->emitError() << name << " must be an integer in [0, 64)";
    return success();
  }
  if (name == kIterationBoundsAttr)
    return VerifyIterationBoundsAttr(op, name, value);
  if (name == kDimensionSemanticsAttr)
    return VerifyDimensionSemanticsAttr(func, name, value);
  if (name == kWindowParamsAttr)
    return VerifyWindowParamsAttr(func, name, value);
  return op->emitError() << "unknown meshdma attribute " << name;
}

//===----------------------------------------------------------------------===//
// Op verifiers
//===----------------------------------------------------------------------===//

LogicalResult AxisIndexOp::verify() { return VerifyAxisName(*this, getAxis()); }
LogicalResult AxisSizeOp::verify() { return VerifyAxisName(*this, getAxis()); }
LogicalResult ProgramIdOp::verify() {
  return VerifyGridDimension(*this, getDimension());
}
LogicalResult NumProgramsOp::verify() {
  return VerifyGridDimension(*this, getDimension());
}

LogicalResult SemAllocOp::verify() {
  if (getType().getKind() == SemaphoreKind::barrier)
    return emitOpError(
        "cannot allocate a BARRIER semaphore; use "
        "meshdma.barrier_semaphore");
  return success();
}

// The largest semaphore array: the checker and the lowering hold one slot
// per semaphore.
constexpr int64_t kMaxSemaphoreArray = 1 << 16;

LogicalResult SemAllocArrayOp::verify() {
  SemaphoreArrayType t = getType();
  if (t.getKind() == SemaphoreKind::barrier)
    return emitOpError(
        "cannot allocate BARRIER semaphores; use meshdma.barrier_semaphore");
  if (t.getSize() < 1 || t.getSize() > kMaxSemaphoreArray)
    return emitOpError("an array of ")
           << t.getSize() << " semaphores; the size must be 1 to "
           << kMaxSemaphoreArray;
  return success();
}

LogicalResult SemIndexOp::verify() {
  auto array = llvm::cast<SemaphoreArrayType>(getArray().getType());
  if (getType().getKind() != array.getKind())
    return emitOpError("indexes an array of ")
           << stringifySemaphoreKind(array.getKind())
           << " semaphores but returns " << getType();
  return success();
}

LogicalResult BarrierSemaphoreOp::verify() {
  if (getType().getKind() != SemaphoreKind::barrier)
    return emitOpError("returns a !meshdma.semaphore<barrier>, not ")
           << getType();
  auto func = (*this)->getParentOfType<func::FuncOp>();
  if (!func || !func->hasAttr(MeshDmaDialect::kCollectiveIdAttr))
    return emitOpError("needs an enclosing kernel with ")
           << MeshDmaDialect::kCollectiveIdAttr;
  return success();
}

LogicalResult AllocOp::verify() {
  MemRefType type = getType();
  if (!type.hasStaticShape())
    return emitOpError("symmetric scratch needs a static shape, got ") << type;
  if (!type.getLayout().isIdentity())
    return emitOpError("symmetric scratch needs the identity layout, got ")
           << type;
  return success();
}

LogicalResult SemSignalOp::verify() {
  SemaphoreKind kind = KindOf(getSemaphore());
  if (kind == SemaphoreKind::dma)
    return emitOpError(
        "cannot signal a DMA semaphore: DMA semaphores count "
        "bytes and move only with DMAs");
  if (getLogical() && getDeviceId().empty())
    return emitOpError("'logical' needs a device(...) id");
  return VerifyDeviceId(*this, getDeviceId(), getLogical());
}

LogicalResult SemWaitOp::verify() {
  if (KindOf(getSemaphore()) == SemaphoreKind::dma)
    return emitOpError(
        "cannot sem_wait on a DMA semaphore; use "
        "dma_wait_recv or dma_wait_send");
  return success();
}

LogicalResult DmaStartOp::verify() {
  auto src = llvm::cast<MemRefType>(getSource().getType());
  auto dst = llvm::cast<MemRefType>(getTarget().getType());
  if (src.getElementType() != dst.getElementType())
    return emitOpError("source and target element types differ (")
           << src.getElementType() << " vs " << dst.getElementType() << ")";
  if (src.getShape() != dst.getShape())
    return emitOpError("source and target shapes differ (")
           << ShapeString(src) << " vs " << ShapeString(dst) << ")";
  if (src.getRank() > 6)
    return emitOpError("rank ")
           << src.getRank() << " exceeds the runtime's maximum of 6";
  if (KindOf(getTargetSemaphore()) != SemaphoreKind::dma)
    return emitOpError(
               "the target (recv) semaphore must be a DMA "
               "semaphore, got ")
           << getTargetSemaphore().getType();
  bool remote = !getDeviceId().empty();
  if (getLogical() && !remote)
    return emitOpError("'logical' needs a device(...) id");
  if (remote && !getSourceSemaphore())
    return emitOpError(
        "a remote DMA (device given) needs a source (send) "
        "semaphore");
  if (!remote && getSourceSemaphore())
    return emitOpError(
        "a local DMA (no device) takes no source (send) "
        "semaphore");
  if (getSourceSemaphore() &&
      KindOf(getSourceSemaphore()) != SemaphoreKind::dma)
    return emitOpError(
               "the source (send) semaphore must be a DMA "
               "semaphore, got ")
           << getSourceSemaphore().getType();
  return VerifyDeviceId(*this, getDeviceId(), getLogical());
}

template <typename WaitOp>
static LogicalResult VerifyDmaWait(WaitOp op) {
  if (KindOf(op.getSemaphore()) != SemaphoreKind::dma)
    return op.emitOpError("needs a DMA semaphore, got ")
           << op.getSemaphore().getType() << " (use sem_wait)";
  return success();
}
LogicalResult DmaWaitRecvOp::verify() { return VerifyDmaWait(*this); }
LogicalResult DmaWaitSendOp::verify() { return VerifyDmaWait(*this); }

LogicalResult PpermuteOp::verify() {
  if (failed(VerifyAxes(*this, getAxes()))) return failure();
  auto in = llvm::cast<MemRefType>(getInput().getType());
  auto out = llvm::cast<MemRefType>(getOutput().getType());
  if (failed(VerifySameElementType(*this, in, out))) return failure();
  if (getInput() == getOutput())
    return emitOpError(
        "output must not be the input (a peer may write it "
        "while this device still reads)");
  auto ni = NumElements(in), no = NumElements(out);
  if (ni && no && *ni != *no)
    return emitOpError("input and output element counts differ (")
           << *ni << " vs " << *no << ")";
  if (getPerm().has_value() == getOffset().has_value())
    return emitOpError("needs exactly one of 'perm' and 'offset'");
  if (getRotate() && !getOffset())
    return emitOpError("'rotate' goes with 'offset'");
  if (auto perm = getPerm()) {
    llvm::ArrayRef<int64_t> p = *perm;
    if (p.size() % 2)
      return emitOpError("'perm' holds (source, destination) pairs; got ")
             << p.size() << " entries";
    std::optional<int64_t> n = GroupSizeAt(*this, getAxes());
    std::set<int64_t> sources, dests;
    for (size_t i = 0; i < p.size(); i += 2) {
      for (int64_t pos : {p[i], p[i + 1]})
        if (pos < 0 || (n && pos >= *n))
          return emitOpError("position ")
                 << pos << " is off the group"
                 << (n ? " of size " + std::to_string(*n) : std::string());
      if (!sources.insert(p[i]).second)
        return emitOpError("position ") << p[i] << " is a source twice";
      if (!dests.insert(p[i + 1]).second)
        return emitOpError("position ")
               << p[i + 1] << " is a destination twice";
    }
  }
  return success();
}

LogicalResult AllGatherOp::verify() {
  if (failed(VerifyAxes(*this, getAxes()))) return failure();
  auto in = llvm::cast<MemRefType>(getInput().getType());
  auto out = llvm::cast<MemRefType>(getOutput().getType());
  if (failed(VerifySameElementType(*this, in, out))) return failure();
  std::optional<int64_t> n = GroupSizeAt(*this, getAxes());
  llvm::SmallVector<int64_t> want(in.getShape());
  if (getTiled()) {
    if (in.getRank() == 0)
      return emitOpError("a tiled all_gather needs an input of rank >= 1");
    if (n && !ShapedType::isDynamic(want[0])) {
      if (llvm::MulOverflow(want[0], *n, want[0]))
        return emitOpError("the gathered dimension overflows 64 bits");
    } else
      want[0] = ShapedType::kDynamic;
  } else {
    want.insert(want.begin(), n ? *n : ShapedType::kDynamic);
  }
  if (static_cast<int64_t>(want.size()) != out.getRank())
    return emitOpError("output rank ")
           << out.getRank() << " should be " << want.size() << " for a "
           << (getTiled() ? "tiled" : "stacked") << " all_gather";
  for (size_t d = 0; d < want.size(); ++d)
    if (!ShapedType::isDynamic(want[d]) && !out.isDynamicDim(d) &&
        want[d] != out.getDimSize(d))
      return emitOpError("output dimension ")
             << d << " is " << out.getDimSize(d) << ", expected " << want[d]
             << " (input " << ShapeString(in) << ", group size "
             << (n ? std::to_string(*n) : std::string("?")) << ")";
  return success();
}

// What every reduction checks first: its axes, one element type on both
// sides, and an element type the reductions support.
static LogicalResult VerifyReductionOperands(Operation* op, ArrayAttr axes,
                                             MemRefType in, MemRefType out) {
  if (failed(VerifyAxes(op, axes))) return failure();
  if (failed(VerifySameElementType(op, in, out))) return failure();
  if (in.getElementType().isInteger(8))
    return op->emitOpError("reductions do not support ")
           << in.getElementType() << " (f32, f64, bf16, f16, i32 and i64 only)";
  return success();
}

LogicalResult AllReduceOp::verify() {
  auto in = llvm::cast<MemRefType>(getInput().getType());
  auto out = llvm::cast<MemRefType>(getOutput().getType());
  if (failed(VerifyReductionOperands(*this, getAxes(), in, out)))
    return failure();
  auto ni = NumElements(in), no = NumElements(out);
  if (ni && no && *ni != *no)
    return emitOpError("input and output element counts differ (")
           << *ni << " vs " << *no << ")";
  return success();
}

LogicalResult ReduceScatterOp::verify() {
  auto in = llvm::cast<MemRefType>(getInput().getType());
  auto out = llvm::cast<MemRefType>(getOutput().getType());
  if (failed(VerifyReductionOperands(*this, getAxes(), in, out)))
    return failure();
  std::optional<int64_t> n = GroupSizeAt(*this, getAxes());
  auto ni = NumElements(in), no = NumElements(out);
  if (n && ni && no) {
    if (*ni % *n != 0)
      return emitOpError("input element count ")
             << *ni << " is not divisible by the group size " << *n
             << " (a static output cannot hold unequal segments)";
    if (*no != *ni / *n)
      return emitOpError("output holds ")
             << *no << " elements, expected " << *ni / *n << " (input " << *ni
             << " / group size " << *n << ")";
  }
  return success();
}

LogicalResult AllToAllOp::verify() {
  if (failed(VerifyAxes(*this, getAxes()))) return failure();
  auto in = llvm::cast<MemRefType>(getInput().getType());
  auto out = llvm::cast<MemRefType>(getOutput().getType());
  if (failed(VerifySameElementType(*this, in, out))) return failure();
  if (getInput() == getOutput())
    return emitOpError("output must not be the input");
  int64_t rank = in.getRank();
  int64_t split = getSplitAxis(), concat = getConcatAxis();
  if (split < 0 || split >= rank || concat < 0 || concat >= rank)
    return emitOpError("split_axis ")
           << split << " and concat_axis " << concat
           << " must be dimensions of the rank-" << rank << " input";
  if (out.getRank() != rank)
    return emitOpError("output rank ") << out.getRank() << " differs from "
                                       << "the input's " << rank;
  std::optional<int64_t> n = GroupSizeAt(*this, getAxes());
  if (!n || !in.hasStaticShape() || !out.hasStaticShape()) return success();
  if (in.getDimSize(split) % *n != 0)
    return emitOpError("split dimension ")
           << split << " of size " << in.getDimSize(split)
           << " is not divisible by the group size " << *n;
  llvm::SmallVector<int64_t> want(in.getShape());
  want[split] /= *n;
  if (llvm::MulOverflow(want[concat], *n, want[concat]))
    return emitOpError("the concatenated dimension overflows 64 bits");
  if (llvm::ArrayRef<int64_t>(want) != out.getShape())
    return emitOpError("output shape ")
           << ShapeString(out) << " should be "
           << ShapeString(MemRefType::get(want, in.getElementType()))
           << " (group size " << *n << ")";
  return success();
}
