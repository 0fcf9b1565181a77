// convert-meshdma-to-llvm: meshdma ops to calls into the runtime's C ABI
// (meshdma/dma/c_api.h), together with the upstream func, arith, cf, index
// and memref conversions. Run after inlining, expand-strided-metadata,
// lower-affine and convert-scf-to-cf; follow with reconcile-unrealized-casts.
//
// * A semaphore is the C ABI's `meshdma_semaphore`, !llvm.struct<(i64, i32)>,
//   passed by value.
// * A memref operand becomes a `meshdma_view` on the stack: data = aligned +
//   offset, shape and strides from the descriptor, and heap_offset
//   MESHDMA_HEAP_OFFSET_RESOLVE (the runtime finds symmetric memory itself).
// * A MESH device id is linearised (and range-checked) by
//   meshdma_mesh_device_id.
// * Kernels (`meshdma.kernel`) return i32: 0, or the first non-zero return
//   code of a C ABI call, at which point the kernel returns at once (the
//   message is in meshdma_last_error()). They get `llvm.emit_c_interface`.
#include <map>
#include <string>

#include "meshdma_mlir/MeshDma.h"
#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVM.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/LLVMCommon/ConversionTarget.h"
#include "mlir/Conversion/LLVMCommon/MemRefBuilder.h"
#include "mlir/Conversion/LLVMCommon/Pattern.h"
#include "mlir/Conversion/LLVMCommon/TypeConverter.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Index/IR/IndexDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/DialectConversion.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace meshdma::ir {
namespace {

constexpr int kMaxRank = 6;

// DType values of the runtime (meshdma/base/dtype.h).
int DTypeOf(Type t) {
  if (t.isInteger(8)) return 0;
  if (t.isInteger(32)) return 1;
  if (t.isInteger(64)) return 2;
  if (t.isF16()) return 3;
  if (t.isBF16()) return 4;
  if (t.isF32()) return 5;
  if (t.isF64()) return 6;
  return -1;
}

// Module-level things the patterns share: string and array globals.
struct Globals {
  std::map<std::string, std::string> strings;  // value -> symbol
  std::map<std::vector<int64_t>, std::string> arrays;
};

std::string JoinAxes(ArrayAttr axes) {
  std::string s;
  for (Attribute a : axes) {
    if (!s.empty()) s += ",";
    s += llvm::cast<StringAttr>(a).str();
  }
  return s;
}

class Lowering {
 public:
  Lowering(MLIRContext* ctx) : ctx_(ctx) {
    ptr_ = LLVM::LLVMPointerType::get(ctx);
    i32_ = IntegerType::get(ctx, 32);
    i64_ = IntegerType::get(ctx, 64);
    sem_ = LLVM::LLVMStructType::getLiteral(ctx, {i64_, i32_});
    auto arr = LLVM::LLVMArrayType::get(i64_, kMaxRank);
    view_ = LLVM::LLVMStructType::getLiteral(
        ctx, {ptr_, i64_, i32_, i32_, arr, arr});
  }

  Type ptr_, i32_, i64_;
  LLVM::LLVMStructType sem_, view_;
  Globals globals_;
  MLIRContext* ctx_;

  // Declares the C ABI in `module`.
  void Declare(ModuleOp module) {
    OpBuilder b(module.getBodyRegion());
    auto fn = [&](StringRef name, llvm::ArrayRef<Type> args) {
      if (module.lookupSymbol(name)) return;
      b.create<LLVM::LLVMFuncOp>(module.getLoc(), name,
                                 LLVM::LLVMFunctionType::get(i32_, args));
    };
    fn("meshdma_logical_device_id", {ptr_});
    fn("meshdma_axis_index", {ptr_, ptr_});
    fn("meshdma_axis_size", {ptr_, ptr_});
    fn("meshdma_allocate_semaphore", {i32_, ptr_});
    fn("meshdma_get_barrier_semaphore", {ptr_});
    fn("meshdma_allocate_symmetric", {i32_, i32_, ptr_, ptr_});
    fn("meshdma_mesh_device_id", {ptr_, i32_, ptr_});
    fn("meshdma_semaphore_signal", {sem_, i64_});
    fn("meshdma_semaphore_signal_remote", {sem_, i64_, i32_});
    fn("meshdma_semaphore_wait", {sem_, i64_});
    fn("meshdma_semaphore_read", {sem_, ptr_});
    fn("meshdma_async_copy_start", {ptr_, ptr_, sem_});
    fn("meshdma_async_remote_copy_start", {ptr_, ptr_, sem_, sem_, i32_});
    fn("meshdma_dma_wait_send", {sem_, i64_});
    fn("meshdma_dma_wait_recv", {sem_, i64_});
    fn("meshdma_device_barrier", {});
    fn("meshdma_ppermute", {ptr_, ptr_, ptr_, ptr_, i32_});
    fn("meshdma_ppermute_shift", {ptr_, ptr_, ptr_, i64_, i32_});
    fn("meshdma_all_gather", {ptr_, ptr_, ptr_, i32_});
    fn("meshdma_all_reduce", {i32_, ptr_, ptr_, ptr_});
    fn("meshdma_reduce_scatter", {i32_, ptr_, ptr_, ptr_});
    fn("meshdma_all_to_all", {ptr_, ptr_, ptr_, i32_, i32_});
  }

  // Creates the globals the module's meshdma ops need.
  void MakeGlobals(ModuleOp module) {
    OpBuilder b(module.getBodyRegion());
    auto string = [&](const std::string& v) {
      if (globals_.strings.count(v)) return;
      std::string name =
          "__meshdma_str" + std::to_string(globals_.strings.size());
      std::string z = v;
      z.push_back('\0');
      auto type = LLVM::LLVMArrayType::get(IntegerType::get(ctx_, 8), z.size());
      b.create<LLVM::GlobalOp>(module.getLoc(), type, /*isConstant=*/true,
                               LLVM::Linkage::Internal, name,
                               b.getStringAttr(z));
      globals_.strings[v] = name;
    };
    auto array = [&](const std::vector<int64_t>& v) {
      if (globals_.arrays.count(v) || v.empty()) return;
      std::string name =
          "__meshdma_i64s" + std::to_string(globals_.arrays.size());
      auto type = LLVM::LLVMArrayType::get(i64_, v.size());
      b.create<LLVM::GlobalOp>(
          module.getLoc(), type, /*isConstant=*/true, LLVM::Linkage::Internal,
          name,
          DenseElementsAttr::get(
              RankedTensorType::get({static_cast<int64_t>(v.size())}, i64_),
              llvm::ArrayRef<int64_t>(v)));
      globals_.arrays[v] = name;
    };
    module.walk([&](Operation* op) {
      if (auto o = llvm::dyn_cast<AxisIndexOp>(op)) string(o.getAxis().str());
      if (auto o = llvm::dyn_cast<AxisSizeOp>(op)) string(o.getAxis().str());
      if (auto axes = op->getAttrOfType<ArrayAttr>("axes");
          axes && op->getDialect() &&
          op->getDialect()->getNamespace() == "meshdma")
        string(JoinAxes(axes));
      if (auto p = llvm::dyn_cast<PpermuteOp>(op); p && p.getPerm())
        array(std::vector<int64_t>(p.getPerm()->begin(), p.getPerm()->end()));
    });
  }

  Value String(OpBuilder& b, Location loc, const std::string& v) {
    return b.create<LLVM::AddressOfOp>(loc, ptr_, globals_.strings.at(v));
  }
  Value Array(OpBuilder& b, Location loc, const std::vector<int64_t>& v) {
    if (v.empty()) return b.create<LLVM::ZeroOp>(loc, ptr_);
    return b.create<LLVM::AddressOfOp>(loc, ptr_, globals_.arrays.at(v));
  }

  Value I32(OpBuilder& b, Location loc, int64_t v) {
    return b.create<LLVM::ConstantOp>(loc, i32_, v);
  }
  Value I64(OpBuilder& b, Location loc, int64_t v) {
    return b.create<LLVM::ConstantOp>(loc, i64_, v);
  }

  // A stack slot of `type` in the entry block of `op`'s function (so that
  // loops do not grow the stack).
  Value Slot(OpBuilder& b, Operation* op, Type type) {
    Operation* fn = op;
    while (fn && !llvm::isa<FunctionOpInterface>(fn)) fn = fn->getParentOp();
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&fn->getRegion(0).front());
    Value one = I32(b, op->getLoc(), 1);
    return b.create<LLVM::AllocaOp>(op->getLoc(), ptr_, type, one);
  }

  Value Call(OpBuilder& b, Location loc, StringRef name, ValueRange args) {
    return b
        .create<LLVM::CallOp>(loc, TypeRange{i32_},
                              FlatSymbolRefAttr::get(ctx_, name), args)
        .getResult();
  }

  // A meshdma_view of a converted memref, on the stack; returns its address.
  Value View(OpBuilder& b, Operation* op, Value desc, MemRefType type) {
    Location loc = op->getLoc();
    MemRefDescriptor d(desc);
    int64_t esize = ElementBytes(type.getElementType());
    Value off =
        b.create<LLVM::MulOp>(loc, d.offset(b, loc), I64(b, loc, esize));
    Value data = b.create<LLVM::GEPOp>(loc, ptr_, IntegerType::get(ctx_, 8),
                                       d.alignedPtr(b, loc), ValueRange{off});
    Value v = b.create<LLVM::UndefOp>(loc, view_);
    v = b.create<LLVM::InsertValueOp>(loc, v, data, 0);
    v = b.create<LLVM::InsertValueOp>(loc, v, I64(b, loc, -2), 1);
    v = b.create<LLVM::InsertValueOp>(
        loc, v, I32(b, loc, DTypeOf(type.getElementType())), 2);
    v = b.create<LLVM::InsertValueOp>(loc, v, I32(b, loc, type.getRank()), 3);
    for (int64_t i = 0; i < type.getRank(); ++i) {
      v = b.create<LLVM::InsertValueOp>(loc, v, d.size(b, loc, i),
                                        llvm::ArrayRef<int64_t>{4, i});
      v = b.create<LLVM::InsertValueOp>(loc, v, d.stride(b, loc, i),
                                        llvm::ArrayRef<int64_t>{5, i});
    }
    Value slot = Slot(b, op, view_);
    b.create<LLVM::StoreOp>(loc, v, slot);
    return slot;
  }

  // The byte size of a converted memref.
  Value Bytes(OpBuilder& b, Location loc, Value desc, MemRefType type) {
    MemRefDescriptor d(desc);
    Value n = I64(b, loc, ElementBytes(type.getElementType()));
    for (int64_t i = 0; i < type.getRank(); ++i)
      n = b.create<LLVM::MulOp>(loc, n, d.size(b, loc, i));
    return n;
  }

  // The LOGICAL id of a device clause (i32).
  Value Target(OpBuilder& b, Operation* op, ValueRange ids, bool logical) {
    Location loc = op->getLoc();
    if (logical) return ids[0];
    auto arr = LLVM::LLVMArrayType::get(i32_, ids.size());
    Value coords = Slot(b, op, arr);
    for (auto [i, id] : llvm::enumerate(ids)) {
      Value p = b.create<LLVM::GEPOp>(
          loc, ptr_, i32_, coords,
          llvm::ArrayRef<LLVM::GEPArg>{static_cast<int32_t>(i)});
      b.create<LLVM::StoreOp>(loc, id, p);
    }
    Value out = Slot(b, op, i32_);
    Call(b, loc, "meshdma_mesh_device_id",
         {coords, I32(b, loc, ids.size()), out});
    return b.create<LLVM::LoadOp>(loc, i32_, out);
  }
};

template <typename Op>
struct Pattern : public ConvertOpToLLVMPattern<Op> {
  Pattern(LLVMTypeConverter& tc, Lowering& l)
      : ConvertOpToLLVMPattern<Op>(tc), l(l) {}
  Lowering& l;
};

#define MESHDMA_PATTERN(OP)                                               \
  struct OP##Lowering : public Pattern<OP> {                              \
    using Pattern<OP>::Pattern;                                           \
    LogicalResult matchAndRewrite(                                        \
        OP op, OpAdaptor a, ConversionPatternRewriter& b) const override; \
  };                                                                      \
  LogicalResult OP##Lowering::matchAndRewrite(                            \
      OP op, OpAdaptor a, ConversionPatternRewriter& b) const

MESHDMA_PATTERN(DeviceIdOp) {
  Value out = l.Slot(b, op, l.i32_);
  l.Call(b, op.getLoc(), "meshdma_logical_device_id", {out});
  b.replaceOpWithNewOp<LLVM::LoadOp>(op, l.i32_, out);
  return success();
}

MESHDMA_PATTERN(AxisIndexOp) {
  Value out = l.Slot(b, op, l.i32_);
  l.Call(b, op.getLoc(), "meshdma_axis_index",
         {l.String(b, op.getLoc(), op.getAxis().str()), out});
  b.replaceOpWithNewOp<LLVM::LoadOp>(op, l.i32_, out);
  return success();
}

MESHDMA_PATTERN(AxisSizeOp) {
  Value out = l.Slot(b, op, l.i32_);
  l.Call(b, op.getLoc(), "meshdma_axis_size",
         {l.String(b, op.getLoc(), op.getAxis().str()), out});
  b.replaceOpWithNewOp<LLVM::LoadOp>(op, l.i32_, out);
  return success();
}

MESHDMA_PATTERN(SemAllocOp) {
  Value out = l.Slot(b, op, l.sem_);
  l.Call(
      b, op.getLoc(), "meshdma_allocate_semaphore",
      {l.I32(b, op.getLoc(), static_cast<int>(op.getType().getKind())), out});
  b.replaceOpWithNewOp<LLVM::LoadOp>(op, l.sem_, out);
  return success();
}

// An array of semaphores: `size` handles on the stack (in the entry block,
// so that loops do not grow it), each allocated in order, as `size`
// sem_allocs would be.
MESHDMA_PATTERN(SemAllocArrayOp) {
  Location loc = op.getLoc();
  int64_t size = op.getType().getSize();
  Value array;
  {
    Operation* fn = op;
    while (fn && !llvm::isa<FunctionOpInterface>(fn)) fn = fn->getParentOp();
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&fn->getRegion(0).front());
    array = b.create<LLVM::AllocaOp>(loc, l.ptr_, l.sem_, l.I32(b, loc, size));
  }
  Value kind = l.I32(b, loc, static_cast<int>(op.getType().getKind()));
  for (int64_t k = 0; k < size; ++k) {
    Value at = b.create<LLVM::GEPOp>(loc, l.ptr_, l.sem_, array,
                                     ValueRange{l.I64(b, loc, k)});
    l.Call(b, loc, "meshdma_allocate_semaphore", {kind, at});
  }
  b.replaceOp(op, array);
  return success();
}

// Semaphore `index` of an array. An index off the array gives a handle of
// no semaphore type (-1), which every runtime call refuses with an error.
MESHDMA_PATTERN(SemIndexOp) {
  Location loc = op.getLoc();
  int64_t size =
      llvm::cast<SemaphoreArrayType>(op.getArray().getType()).getSize();
  Value index = a.getIndex();
  Value in = b.create<LLVM::ICmpOp>(loc, LLVM::ICmpPredicate::ult, index,
                                    l.I64(b, loc, size));
  Value safe = b.create<LLVM::SelectOp>(loc, in, index, l.I64(b, loc, 0));
  Value at = b.create<LLVM::GEPOp>(loc, l.ptr_, l.sem_, a.getArray(),
                                   ValueRange{safe});
  Value sem = b.create<LLVM::LoadOp>(loc, l.sem_, at);
  Value none = b.create<LLVM::UndefOp>(loc, l.sem_);
  none = b.create<LLVM::InsertValueOp>(loc, none, l.I64(b, loc, 0), 0);
  none = b.create<LLVM::InsertValueOp>(loc, none, l.I32(b, loc, -1), 1);
  b.replaceOpWithNewOp<LLVM::SelectOp>(op, in, sem, none);
  return success();
}

MESHDMA_PATTERN(BarrierSemaphoreOp) {
  Value out = l.Slot(b, op, l.sem_);
  l.Call(b, op.getLoc(), "meshdma_get_barrier_semaphore", {out});
  b.replaceOpWithNewOp<LLVM::LoadOp>(op, l.sem_, out);
  return success();
}

MESHDMA_PATTERN(AllocOp) {
  Location loc = op.getLoc();
  MemRefType type = op.getType();
  auto arr =
      LLVM::LLVMArrayType::get(l.i64_, std::max<int64_t>(1, type.getRank()));
  Value shape = l.Slot(b, op, arr);
  for (int64_t i = 0; i < type.getRank(); ++i) {
    Value p = b.create<LLVM::GEPOp>(
        loc, l.ptr_, l.i64_, shape,
        llvm::ArrayRef<LLVM::GEPArg>{static_cast<int32_t>(i)});
    b.create<LLVM::StoreOp>(loc, l.I64(b, loc, type.getDimSize(i)), p);
  }
  Value view = l.Slot(b, op, l.view_);
  l.Call(b, loc, "meshdma_allocate_symmetric",
         {l.I32(b, loc, DTypeOf(type.getElementType())),
          l.I32(b, loc, type.getRank()), shape, view});
  Value data = b.create<LLVM::LoadOp>(loc, l.ptr_, view);
  Value desc = MemRefDescriptor::fromStaticShape(b, loc, *getTypeConverter(),
                                                 type, data);
  b.replaceOp(op, desc);
  return success();
}

MESHDMA_PATTERN(SemSignalOp) {
  Location loc = op.getLoc();
  Value inc = b.create<LLVM::SExtOp>(loc, l.i64_, a.getAmount());
  if (op.getDeviceId().empty()) {
    l.Call(b, loc, "meshdma_semaphore_signal", {a.getSemaphore(), inc});
  } else {
    Value id = l.Target(b, op, a.getDeviceId(), op.getLogical());
    l.Call(b, loc, "meshdma_semaphore_signal_remote",
           {a.getSemaphore(), inc, id});
  }
  b.eraseOp(op);
  return success();
}

MESHDMA_PATTERN(SemWaitOp) {
  Value n = b.create<LLVM::SExtOp>(op.getLoc(), l.i64_, a.getAmount());
  l.Call(b, op.getLoc(), "meshdma_semaphore_wait", {a.getSemaphore(), n});
  b.eraseOp(op);
  return success();
}

MESHDMA_PATTERN(SemReadOp) {
  Value out = l.Slot(b, op, l.i64_);
  l.Call(b, op.getLoc(), "meshdma_semaphore_read", {a.getSemaphore(), out});
  Value v = b.create<LLVM::LoadOp>(op.getLoc(), l.i64_, out);
  b.replaceOpWithNewOp<LLVM::TruncOp>(op, l.i32_, v);
  return success();
}

MESHDMA_PATTERN(DmaStartOp) {
  Location loc = op.getLoc();
  Value src = l.View(b, op, a.getSource(),
                     llvm::cast<MemRefType>(op.getSource().getType()));
  Value dst = l.View(b, op, a.getTarget(),
                     llvm::cast<MemRefType>(op.getTarget().getType()));
  if (op.getDeviceId().empty()) {
    l.Call(b, loc, "meshdma_async_copy_start",
           {src, dst, a.getTargetSemaphore()});
  } else {
    Value id = l.Target(b, op, a.getDeviceId(), op.getLogical());
    l.Call(b, loc, "meshdma_async_remote_copy_start",
           {src, dst, a.getSourceSemaphore(), a.getTargetSemaphore(), id});
  }
  b.eraseOp(op);
  return success();
}

MESHDMA_PATTERN(DmaWaitRecvOp) {
  Value n = l.Bytes(b, op.getLoc(), a.getRef(),
                    llvm::cast<MemRefType>(op.getRef().getType()));
  l.Call(b, op.getLoc(), "meshdma_dma_wait_recv", {a.getSemaphore(), n});
  b.eraseOp(op);
  return success();
}

MESHDMA_PATTERN(DmaWaitSendOp) {
  Value n = l.Bytes(b, op.getLoc(), a.getRef(),
                    llvm::cast<MemRefType>(op.getRef().getType()));
  l.Call(b, op.getLoc(), "meshdma_dma_wait_send", {a.getSemaphore(), n});
  b.eraseOp(op);
  return success();
}

MESHDMA_PATTERN(DeviceBarrierOp) {
  l.Call(b, op.getLoc(), "meshdma_device_barrier", {});
  b.eraseOp(op);
  return success();
}

template <typename Op>
std::pair<Value, Value> InOut(Lowering& l, OpBuilder& b, Op op,
                              typename Op::Adaptor a) {
  return {l.View(b, op, a.getInput(),
                 llvm::cast<MemRefType>(op.getInput().getType())),
          l.View(b, op, a.getOutput(),
                 llvm::cast<MemRefType>(op.getOutput().getType()))};
}

MESHDMA_PATTERN(PpermuteOp) {
  Location loc = op.getLoc();
  auto [in, out] = InOut(l, b, op, a);
  Value axes = l.String(b, loc, JoinAxes(op.getAxes()));
  if (auto perm = op.getPerm()) {
    std::vector<int64_t> p(perm->begin(), perm->end());
    l.Call(b, loc, "meshdma_ppermute",
           {in, out, axes, l.Array(b, loc, p),
            l.I32(b, loc, static_cast<int64_t>(p.size() / 2))});
  } else {
    l.Call(b, loc, "meshdma_ppermute_shift",
           {in, out, axes, l.I64(b, loc, *op.getOffset()),
            l.I32(b, loc, op.getRotate() ? 1 : 0)});
  }
  b.eraseOp(op);
  return success();
}

MESHDMA_PATTERN(AllGatherOp) {
  Location loc = op.getLoc();
  auto [in, out] = InOut(l, b, op, a);
  l.Call(b, loc, "meshdma_all_gather",
         {in, out, l.String(b, loc, JoinAxes(op.getAxes())),
          l.I32(b, loc, op.getTiled() ? 1 : 0)});
  b.eraseOp(op);
  return success();
}

MESHDMA_PATTERN(AllReduceOp) {
  Location loc = op.getLoc();
  auto [in, out] = InOut(l, b, op, a);
  l.Call(b, loc, "meshdma_all_reduce",
         {l.I32(b, loc, static_cast<int>(op.getReduction())), in, out,
          l.String(b, loc, JoinAxes(op.getAxes()))});
  b.eraseOp(op);
  return success();
}

MESHDMA_PATTERN(ReduceScatterOp) {
  Location loc = op.getLoc();
  auto [in, out] = InOut(l, b, op, a);
  l.Call(b, loc, "meshdma_reduce_scatter",
         {l.I32(b, loc, static_cast<int>(op.getReduction())), in, out,
          l.String(b, loc, JoinAxes(op.getAxes()))});
  b.eraseOp(op);
  return success();
}

MESHDMA_PATTERN(AllToAllOp) {
  Location loc = op.getLoc();
  auto [in, out] = InOut(l, b, op, a);
  l.Call(b, loc, "meshdma_all_to_all",
         {in, out, l.String(b, loc, JoinAxes(op.getAxes())),
          l.I32(b, loc, op.getSplitAxis()), l.I32(b, loc, op.getConcatAxis())});
  b.eraseOp(op);
  return success();
}

#undef MESHDMA_PATTERN

struct ConvertMeshDmaToLLVMPass
    : public PassWrapper<ConvertMeshDmaToLLVMPass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(ConvertMeshDmaToLLVMPass)

  StringRef getArgument() const final { return "convert-meshdma-to-llvm"; }
  StringRef getDescription() const final {
    return "Lowers meshdma ops (and func, arith, math, cf, index, memref) to "
           "LLVM calls into the meshdma C ABI";
  }
  void getDependentDialects(DialectRegistry& registry) const override {
    registry.insert<LLVM::LLVMDialect>();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext* ctx = &getContext();
    if (failed(Prepare(module))) return signalPassFailure();

    Lowering l(ctx);
    l.Declare(module);
    l.MakeGlobals(module);

    LowerToLLVMOptions options(ctx);
    LLVMTypeConverter tc(ctx, options);
    tc.addConversion([&](SemaphoreType) -> Type { return l.sem_; });
    tc.addConversion([&](SemaphoreArrayType) -> Type { return l.ptr_; });
    RewritePatternSet patterns(ctx);
    populateFuncToLLVMConversionPatterns(tc, patterns);
    // ceildivsi, ceildivui and floordivsi have no LLVM lowering of their own:
    // expanded into arith ops that do (every integer op the checker
    // evaluates also lowers).
    arith::populateCeilFloorDivExpandOpsPatterns(patterns);
    arith::populateArithToLLVMConversionPatterns(tc, patterns);
    populateMathToLLVMConversionPatterns(tc, patterns);
    cf::populateControlFlowToLLVMConversionPatterns(tc, patterns);
    index::populateIndexToLLVMConversionPatterns(tc, patterns);
    populateFinalizeMemRefToLLVMConversionPatterns(tc, patterns);
    patterns
        .add<DeviceIdOpLowering, AxisIndexOpLowering, AxisSizeOpLowering,
             SemAllocOpLowering, SemAllocArrayOpLowering, SemIndexOpLowering,
             BarrierSemaphoreOpLowering, AllocOpLowering, SemSignalOpLowering,
             SemWaitOpLowering, SemReadOpLowering, DmaStartOpLowering,
             DmaWaitRecvOpLowering, DmaWaitSendOpLowering,
             DeviceBarrierOpLowering, PpermuteOpLowering, AllGatherOpLowering,
             AllReduceOpLowering, ReduceScatterOpLowering, AllToAllOpLowering>(
            tc, l);
    LLVMConversionTarget target(*ctx);
    target.addLegalOp<ModuleOp>();
    target.addIllegalDialect<MeshDmaDialect, func::FuncDialect,
                             arith::ArithDialect, cf::ControlFlowDialect,
                             memref::MemRefDialect, index::IndexDialect>();
    if (failed(applyPartialConversion(module, target, std::move(patterns))))
      return signalPassFailure();
    AddEarlyExits(module);
  }

  // Kernels return i32 and get a C interface; meshdma ops elsewhere, grids
  // and mesh.* leftovers are errors.
  LogicalResult Prepare(ModuleOp module) {
    bool ok = true;
    module.walk([&](func::FuncOp f) {
      bool kernel = f->hasAttr(MeshDmaDialect::kKernelAttr);
      if (!kernel) {
        f.walk([&](Operation* op) {
          if (op->getDialect() &&
              op->getDialect()->getNamespace() == "meshdma") {
            op->emitError(
                "meshdma ops outside a meshdma.kernel must be "
                "inlined into one before lowering (run --inline)");
            ok = false;
          }
        });
        return;
      }
      if (f->hasAttr(MeshDmaDialect::kIterationBoundsAttr)) {
        f.emitError(
            "kernels with a grid (meshdma.iteration_bounds) are not "
            "lowered; write the grid as scf.for loops");
        ok = false;
        return;
      }
      if (f.isExternal()) return;
      OpBuilder b(f);
      auto i32 = b.getI32Type();
      f.setFunctionType(
          FunctionType::get(f.getContext(), f.getArgumentTypes(), {i32}));
      f->setAttr("llvm.emit_c_interface", b.getUnitAttr());
      f.walk([&](func::ReturnOp ret) {
        b.setInsertionPoint(ret);
        Value zero = b.create<arith::ConstantIntOp>(ret.getLoc(), 0, 32);
        ret->setOperands(ValueRange{zero});
      });
    });
    if (!ok) return failure();
    // Nothing below needs the mesh any more, and LLVM IR has no place for
    // it: drop the meshdma attributes and the mesh.mesh symbols.
    module.walk([&](func::FuncOp f) {
      llvm::SmallVector<StringAttr> names;
      for (NamedAttribute a : f->getDiscardableAttrs())
        if (a.getName().getValue().starts_with("meshdma."))
          names.push_back(a.getName());
      for (StringAttr n : names) f->removeAttr(n);
    });
    llvm::SmallVector<mesh::MeshOp> meshes(module.getOps<mesh::MeshOp>());
    for (mesh::MeshOp m : meshes) m.erase();
    return success();
  }

  // After each C ABI call in a kernel: a non-zero return code returns it.
  void AddEarlyExits(ModuleOp module) {
    module.walk([&](LLVM::LLVMFuncOp f) {
      if (f.isExternal()) return;
      auto type = f.getFunctionType();
      if (!type.getReturnType().isInteger(32)) return;
      llvm::SmallVector<LLVM::CallOp> calls;
      f.walk([&](LLVM::CallOp c) {
        auto callee = c.getCallee();
        if (callee && callee->starts_with("meshdma_") && c.getNumResults() == 1)
          calls.push_back(c);
      });
      if (calls.empty()) return;
      OpBuilder b(f.getContext());
      Block* fail = new Block();
      f.getBody().push_back(fail);
      Value rc = fail->addArgument(b.getI32Type(), f.getLoc());
      b.setInsertionPointToStart(fail);
      b.create<LLVM::ReturnOp>(f.getLoc(), rc);
      for (LLVM::CallOp c : calls) {
        Block* before = c->getBlock();
        Block* after = before->splitBlock(c->getNextNode());
        b.setInsertionPointToEnd(before);
        Value zero = b.create<LLVM::ConstantOp>(c.getLoc(), b.getI32Type(), 0);
        Value ok = b.create<LLVM::ICmpOp>(c.getLoc(), LLVM::ICmpPredicate::eq,
                                          c.getResult(), zero);
        b.create<LLVM::CondBrOp>(c.getLoc(), ok, after, ValueRange{}, fail,
                                 ValueRange{c.getResult()});
      }
    });
  }
};

// meshdma-materialize-grid: a kernel with `meshdma.iteration_bounds` runs
// its body once per grid point, row-major (last dimension fastest), with its
// allocations made once per call. The pass hoists the top-level allocations,
// wraps the rest of the body in an scf.for nest and replaces program_id and
// num_programs by the induction variables and the bounds.
struct MaterializeGridPass
    : public PassWrapper<MaterializeGridPass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(MaterializeGridPass)

  StringRef getArgument() const final { return "meshdma-materialize-grid"; }
  StringRef getDescription() const final {
    return "Turns a kernel's grid (meshdma.iteration_bounds) into an scf.for "
           "nest with the allocations hoisted";
  }
  void getDependentDialects(DialectRegistry& registry) const override {
    registry.insert<scf::SCFDialect, arith::ArithDialect>();
  }

  static bool IsAllocation(Operation* op) {
    return llvm::isa<SemAllocOp, SemAllocArrayOp, AllocOp, BarrierSemaphoreOp>(
        op);
  }

  void runOnOperation() override {
    bool ok = true;
    getOperation().walk([&](func::FuncOp f) {
      auto bounds = f->getAttrOfType<DenseI64ArrayAttr>(
          MeshDmaDialect::kIterationBoundsAttr);
      if (!bounds || f.isExternal()) return;
      if (!f.getBody().hasOneBlock()) {
        f.emitError("a grid kernel's body must be one block to be lowered");
        ok = false;
        return;
      }
      Block& body = f.getBody().front();
      bool nested_alloc = false;
      f.walk([&](Operation* op) {
        if (IsAllocation(op) && op->getBlock() != &body) {
          op->emitError(
              "allocations in a grid kernel must be at the top "
              "level of its body (they are made once per call)");
          nested_alloc = true;
        }
      });
      if (nested_alloc) {
        ok = false;
        return;
      }
      Operation* ret = body.getTerminator();
      Location loc = f.getLoc();
      OpBuilder b(&body, body.begin());
      // Allocations first, in their order.
      llvm::SmallVector<Operation*> allocs, rest;
      for (Operation& op : body.without_terminator())
        (IsAllocation(&op) ? allocs : rest).push_back(&op);
      Operation* first_rest = rest.empty() ? ret : rest.front();
      for (Operation* op : allocs) op->moveBefore(first_rest);
      b.setInsertionPoint(ret);
      llvm::SmallVector<Value> ivs;
      Value c0 = b.create<arith::ConstantIndexOp>(loc, 0);
      Value c1 = b.create<arith::ConstantIndexOp>(loc, 1);
      for (int64_t bound : bounds.asArrayRef()) {
        Value ub = b.create<arith::ConstantIndexOp>(loc, bound);
        auto loop = b.create<scf::ForOp>(loc, c0, ub, c1);
        ivs.push_back(loop.getInductionVar());
        b.setInsertionPoint(loop.getBody()->getTerminator());
      }
      Operation* yield = b.getInsertionBlock()->getTerminator();
      for (Operation* op : rest) op->moveBefore(yield);
      f.walk([&](ProgramIdOp p) {
        p.getResult().replaceAllUsesWith(ivs[p.getDimension()]);
        p.erase();
      });
      f.walk([&](NumProgramsOp p) {
        OpBuilder pb(p);
        p.getResult().replaceAllUsesWith(pb.create<arith::ConstantIndexOp>(
            p.getLoc(), bounds[p.getDimension()]));
        p.erase();
      });
      f->removeAttr(MeshDmaDialect::kIterationBoundsAttr);
      f->removeAttr(MeshDmaDialect::kDimensionSemanticsAttr);
    });
    if (!ok) signalPassFailure();
  }
};

}  // namespace

std::unique_ptr<Pass> CreateConvertMeshDmaToLLVMPass() {
  return std::make_unique<ConvertMeshDmaToLLVMPass>();
}

void BuildLowerToLLVMPipeline(OpPassManager& pm) {
  pm.addPass(createInlinerPass());
  pm.addPass(createSymbolDCEPass());
  pm.addPass(std::make_unique<MaterializeGridPass>());
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createConvertSCFToCFPass());
  pm.addPass(CreateConvertMeshDmaToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
}

void RegisterLoweringPasses() {
  registerPass([] { return CreateConvertMeshDmaToLLVMPass(); });
  registerPass([]() -> std::unique_ptr<Pass> {
    return std::make_unique<MaterializeGridPass>();
  });
  PassPipelineRegistration<>(
      "meshdma-lower-to-llvm",
      "inline, meshdma-materialize-grid, expand-strided-metadata, "
      "lower-affine, convert-scf-to-cf, "
      "convert-meshdma-to-llvm, reconcile-unrealized-casts",
      [](OpPassManager& pm) { BuildLowerToLLVMPipeline(pm); });
}

}  // namespace meshdma::ir
