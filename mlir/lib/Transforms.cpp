// convert-mesh-to-meshdma and meshdma-expand-collectives, and the pass
// registry.
//
// convert-mesh-to-meshdma rewrites upstream `mesh` collectives on tensors
// (SPMD IR, after mesh-spmdization or written by hand) into meshdma
// collectives on memrefs between `bufferization.to_memref` and
// `bufferization.to_tensor restrict`; outputs are symmetric allocations
// (`meshdma.alloc`), as the runtime's collectives require. What has no
// meshdma equivalent is an error at the op, never a silent rewrite.
//
// meshdma-expand-collectives replaces `meshdma.ppermute` and
// `meshdma.all_gather` over one mesh axis by ring kernels of DMA and semaphore
// ops, so that meshdma-verify-protocol can prove them.
#include <functional>
#include <set>
#include <string>

#include "meshdma_mlir/MeshDma.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

namespace meshdma::ir {
namespace {

//===----------------------------------------------------------------------===//
// convert-mesh-to-meshdma
//===----------------------------------------------------------------------===//

struct ConvertMeshToMeshDmaPass
    : public PassWrapper<ConvertMeshToMeshDmaPass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(ConvertMeshToMeshDmaPass)

  StringRef getArgument() const final { return "convert-mesh-to-meshdma"; }
  StringRef getDescription() const final {
    return "Lowers upstream mesh collectives on tensors to meshdma "
           "collectives on symmetric memrefs";
  }
  void getDependentDialects(DialectRegistry& registry) const override {
    registry.insert<MeshDmaDialect, bufferization::BufferizationDialect,
                    memref::MemRefDialect, arith::ArithDialect>();
  }

  void runOnOperation() override {
    llvm::SmallVector<Operation*> work;
    getOperation().walk([&](Operation* op) {
      if (op->getDialect() && op->getDialect()->getNamespace() == "mesh" &&
          !llvm::isa<mesh::MeshOp, mesh::MeshShapeOp,
                     mesh::ProcessMultiIndexOp>(op))
        work.push_back(op);
    });
    bool ok = true;
    for (Operation* op : work)
      if (failed(Convert(op))) ok = false;
    if (!ok) signalPassFailure();
  }

  // The axis names of `axes` (mesh axis indices) on `mesh`.
  FailureOr<ArrayAttr> AxisNames(Operation* op, FlatSymbolRefAttr mesh_ref,
                                 llvm::ArrayRef<int16_t> axes, MeshInfo& info) {
    auto mesh =
        SymbolTable::lookupNearestSymbolFrom<mesh::MeshOp>(op, mesh_ref);
    if (!mesh) return op->emitError("unknown mesh ") << mesh_ref;
    auto func = op->getParentOfType<func::FuncOp>();
    if (!func) return op->emitError("mesh collectives must be in a func.func");
    // The function runs on this mesh; meshdma ops inside find it there.
    if (auto have =
            func->getAttrOfType<FlatSymbolRefAttr>(MeshDmaDialect::kMeshAttr)) {
      if (have != mesh_ref)
        return op->emitError("a function on two meshes (")
               << have << " and " << mesh_ref << ") is not supported";
    } else {
      func->setAttr(MeshDmaDialect::kMeshAttr, mesh_ref);
    }
    info = *GetKernelMesh(func);
    llvm::SmallVector<Attribute> names;
    std::vector<int16_t> all;
    if (axes.empty()) {  // all axes of the mesh
      for (int16_t a = 0; a < static_cast<int16_t>(info.axes.size()); ++a)
        all.push_back(a);
      axes = all;
    }
    for (int16_t a : axes) {
      if (a < 0 || a >= static_cast<int16_t>(info.axes.size()))
        return op->emitError("mesh axis ") << a << " is off mesh " << mesh_ref;
      names.push_back(StringAttr::get(op->getContext(), info.axes[a]));
    }
    return ArrayAttr::get(op->getContext(), names);
  }

  static Value ToMemref(OpBuilder& b, Location loc, Value tensor) {
    auto t = llvm::cast<RankedTensorType>(tensor.getType());
    return b.create<bufferization::ToMemrefOp>(
        loc, MemRefType::get(t.getShape(), t.getElementType()), tensor);
  }

  // A symmetric output for a collective whose result is `type`.
  static FailureOr<Value> Output(OpBuilder& b, Operation* op, Type type) {
    auto t = llvm::cast<RankedTensorType>(type);
    if (!t.hasStaticShape())
      return op->emitError("a collective result needs a static shape, got ")
             << type;
    if (ElementBytes(t.getElementType()) == 0)
      return op->emitError("element type ")
             << t.getElementType()
             << " is not one the runtime moves (i8, i32, i64, f16, bf16, "
                "f32, f64)";
    return b
        .create<AllocOp>(op->getLoc(),
                         MemRefType::get(t.getShape(), t.getElementType()))
        .getResult();
  }

  static void Finish(OpBuilder& b, Operation* op, Value out) {
    Value t = b.create<bufferization::ToTensorOp>(op->getLoc(), out,
                                                  /*restrict=*/true,
                                                  /*writable=*/true);
    op->getResult(0).replaceAllUsesWith(t);
    op->erase();
  }

  static FailureOr<ReductionKind> Reduction(Operation* op,
                                            mesh::ReductionKind kind) {
    switch (kind) {
      case mesh::ReductionKind::Sum:
        return ReductionKind::sum;
      case mesh::ReductionKind::Max:
        return ReductionKind::max;
      case mesh::ReductionKind::Min:
        return ReductionKind::min;
      case mesh::ReductionKind::Average:
        return ReductionKind::mean;
      default:
        return op->emitError("reduction '")
               << mesh::stringifyReductionKind(kind)
               << "' has no meshdma equivalent (sum, max, min and average "
                  "only)";
    }
  }

  LogicalResult SameElementType(Operation* op) {
    auto in = llvm::cast<ShapedType>(op->getOperand(0).getType());
    auto out = llvm::cast<ShapedType>(op->getResult(0).getType());
    if (in.getElementType() != out.getElementType())
      return op->emitError("an accumulation type (")
             << out.getElementType() << " for " << in.getElementType()
             << ") is not supported";
    return success();
  }

  LogicalResult Convert(Operation* op) {
    OpBuilder b(op);
    Location loc = op->getLoc();
    MeshInfo info;
    // No mesh axes: each device is a group of its own, and every collective
    // is its input (the verifier has checked that the types agree).
    if (auto axes = op->getAttrOfType<DenseI16ArrayAttr>("mesh_axes");
        axes && axes.empty() && op->getNumOperands() == 1 &&
        op->getNumResults() == 1 &&
        op->getOperand(0).getType() == op->getResult(0).getType() &&
        !llvm::isa<mesh::ProcessLinearIndexOp>(op)) {
      op->getResult(0).replaceAllUsesWith(op->getOperand(0));
      op->erase();
      return success();
    }
    if (auto idx = llvm::dyn_cast<mesh::ProcessLinearIndexOp>(op)) {
      auto names = AxisNames(op, idx.getMeshAttr(), {}, info);
      if (failed(names)) return failure();
      Value id = b.create<DeviceIdOp>(loc, b.getI32Type());
      Value r = b.create<arith::IndexCastOp>(loc, b.getIndexType(), id);
      idx.getResult().replaceAllUsesWith(r);
      op->erase();
      return success();
    }
    if (auto g = llvm::dyn_cast<mesh::AllGatherOp>(op)) {
      if (g.getGatherAxis() != 0)
        return op->emitError("all_gather along tensor dimension ")
               << g.getGatherAxis().getSExtValue()
               << " is not supported (only 0)";
      auto names = AxisNames(op, g.getMeshAttr(), g.getMeshAxes(), info);
      auto out = Output(b, op, g.getResult().getType());
      if (failed(names) || failed(out)) return failure();
      auto ag = b.create<AllGatherOp>(loc, ToMemref(b, loc, g.getInput()), *out,
                                      *names, b.getUnitAttr());
      (void)ag;
      Finish(b, op, *out);
      return success();
    }
    if (auto r = llvm::dyn_cast<mesh::AllReduceOp>(op)) {
      auto kind = Reduction(op, r.getReduction());
      if (failed(kind) || failed(SameElementType(op))) return failure();
      auto names = AxisNames(op, r.getMeshAttr(), r.getMeshAxes(), info);
      auto out = Output(b, op, r.getResult().getType());
      if (failed(names) || failed(out)) return failure();
      b.create<AllReduceOp>(loc, *kind, ToMemref(b, loc, r.getInput()), *out,
                            *names);
      Finish(b, op, *out);
      return success();
    }
    if (auto r = llvm::dyn_cast<mesh::ReduceScatterOp>(op)) {
      if (r.getScatterAxis() != 0)
        return op->emitError("reduce_scatter along tensor dimension ")
               << r.getScatterAxis().getSExtValue()
               << " is not supported (only 0)";
      auto kind = Reduction(op, r.getReduction());
      if (failed(kind) || failed(SameElementType(op))) return failure();
      auto names = AxisNames(op, r.getMeshAttr(), r.getMeshAxes(), info);
      auto out = Output(b, op, r.getResult().getType());
      if (failed(names) || failed(out)) return failure();
      b.create<ReduceScatterOp>(loc, *kind, ToMemref(b, loc, r.getInput()),
                                *out, *names);
      Finish(b, op, *out);
      return success();
    }
    if (auto a = llvm::dyn_cast<mesh::AllToAllOp>(op)) {
      auto names = AxisNames(op, a.getMeshAttr(), a.getMeshAxes(), info);
      auto out = Output(b, op, a.getResult().getType());
      if (failed(names) || failed(out)) return failure();
      b.create<AllToAllOp>(
          loc, ToMemref(b, loc, a.getInput()), *out, *names,
          b.getI64IntegerAttr(a.getSplitAxis().getSExtValue()),
          b.getI64IntegerAttr(a.getConcatAxis().getSExtValue()));
      Finish(b, op, *out);
      return success();
    }
    if (auto s = llvm::dyn_cast<mesh::ShiftOp>(op)) {
      int16_t axis = static_cast<int16_t>(s.getShiftAxis().getSExtValue());
      auto names = AxisNames(op, s.getMeshAttr(), {axis}, info);
      auto out = Output(b, op, s.getResult().getType());
      if (failed(names) || failed(out)) return failure();
      b.create<PpermuteOp>(loc, ToMemref(b, loc, s.getInput()), *out, *names,
                           DenseI64ArrayAttr(),
                           b.getI64IntegerAttr(s.getOffset()),
                           s.getRotate() ? b.getUnitAttr() : UnitAttr());
      Finish(b, op, *out);
      return success();
    }
    return op->emitError("'") << op->getName() << "' has no meshdma lowering";
  }
};

//===----------------------------------------------------------------------===//
// meshdma-expand-collectives
//===----------------------------------------------------------------------===//

struct ExpandCollectivesPass
    : public PassWrapper<ExpandCollectivesPass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(ExpandCollectivesPass)

  StringRef getArgument() const final { return "meshdma-expand-collectives"; }
  StringRef getDescription() const final {
    return "Expands meshdma.ppermute and meshdma.all_gather over one mesh "
           "axis into ring kernels of DMA and semaphore ops";
  }
  void getDependentDialects(DialectRegistry& registry) const override {
    registry.insert<MeshDmaDialect, memref::MemRefDialect, scf::SCFDialect,
                    arith::ArithDialect>();
  }

  void runOnOperation() override {
    llvm::SmallVector<Operation*> work;
    getOperation().walk([&](Operation* op) {
      if (llvm::isa<PpermuteOp, AllGatherOp>(op)) work.push_back(op);
    });
    bool ok = true;
    for (Operation* op : work) {
      LogicalResult r = llvm::isa<PpermuteOp>(op)
                            ? ExpandPpermute(llvm::cast<PpermuteOp>(op))
                            : ExpandAllGather(llvm::cast<AllGatherOp>(op));
      if (failed(r)) ok = false;
    }
    if (!ok) signalPassFailure();
  }

  // Builders shared by the expansions: this device's coordinates along
  // every mesh axis and the MESH id that differs only along `axis`.
  struct Ring {
    llvm::SmallVector<Value> coords;  // i32, one per mesh axis
    int axis;
    Value me, n;  // i32 along `axis`
  };

  FailureOr<Ring> MakeRing(OpBuilder& b, Operation* op, ArrayAttr axes) {
    auto mesh = GetEnclosingMesh(op);
    if (!mesh)
      return op->emitError(
          "needs an enclosing function with "
          "meshdma.mesh");
    if (axes.size() != 1)
      return op->emitError("expansion supports one mesh axis, got ")
             << axes.size();
    Ring r;
    r.axis = mesh->AxisIndex(llvm::cast<StringAttr>(axes[0]).getValue());
    for (const std::string& a : mesh->axes)
      r.coords.push_back(b.create<AxisIndexOp>(op->getLoc(), b.getI32Type(),
                                               b.getStringAttr(a)));
    r.me = r.coords[r.axis];
    r.n = b.create<AxisSizeOp>(op->getLoc(), b.getI32Type(),
                               b.getStringAttr(mesh->axes[r.axis]));
    return r;
  }

  static llvm::SmallVector<Value> IdAlong(const Ring& r, Value pos) {
    llvm::SmallVector<Value> id(r.coords);
    id[r.axis] = pos;
    return id;
  }

  static Value I32(OpBuilder& b, Location loc, int64_t v) {
    return b.create<arith::ConstantIntOp>(loc, v, 32);
  }

  // Zeros into `out` (a device that no pair sends to).
  static void Zero(OpBuilder& b, Location loc, Value out) {
    auto t = llvm::cast<MemRefType>(out.getType());
    Type e = t.getElementType();
    Value zero = llvm::isa<FloatType>(e)
                     ? b.create<arith::ConstantOp>(loc, b.getFloatAttr(e, 0.0))
                           .getResult()
                     : b.create<arith::ConstantOp>(loc, b.getIntegerAttr(e, 0))
                           .getResult();
    llvm::SmallVector<Value> ivs;
    std::function<void(OpBuilder&, int)> nest = [&](OpBuilder& nb, int d) {
      if (d == t.getRank()) {
        nb.create<memref::StoreOp>(loc, zero, out, ivs);
        return;
      }
      Value lb = nb.create<arith::ConstantIndexOp>(loc, 0);
      Value ub = nb.create<arith::ConstantIndexOp>(loc, t.getDimSize(d));
      Value one = nb.create<arith::ConstantIndexOp>(loc, 1);
      nb.create<scf::ForOp>(loc, lb, ub, one, ValueRange{},
                            [&](OpBuilder& fb, Location, Value iv, ValueRange) {
                              ivs.push_back(iv);
                              nest(fb, d + 1);
                              ivs.pop_back();
                              fb.create<scf::YieldOp>(loc);
                            });
    };
    nest(b, 0);
  }

  LogicalResult ExpandPpermute(PpermuteOp op) {
    OpBuilder b(op);
    Location loc = op.getLoc();
    if (!llvm::cast<MemRefType>(op.getOutput().getType()).hasStaticShape())
      return op.emitError("expansion needs a static output shape");
    auto ring = MakeRing(b, op, op.getAxes());
    if (failed(ring)) return failure();
    Type dma = SemaphoreType::get(b.getContext(), SemaphoreKind::dma);
    // Every device has entered before anyone pushes into its output.
    b.create<DeviceBarrierOp>(loc);
    Value send = b.create<SemAllocOp>(loc, dma);
    Value recv = b.create<SemAllocOp>(loc, dma);
    Value in = op.getInput(), out = op.getOutput();
    auto send_to = [&](OpBuilder& ib, Value dst) {
      ib.create<DmaStartOp>(loc, in, out, recv, send, IdAlong(*ring, dst),
                            UnitAttr());
      ib.create<DmaWaitSendOp>(loc, send, in);
    };
    if (auto perm = op.getPerm()) {
      // Explicit pairs: each is an `scf.if` on this device's position.
      llvm::ArrayRef<int64_t> p = *perm;
      std::set<int64_t> dests;
      for (size_t i = 0; i < p.size(); i += 2) {
        Value is_src = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq,
                                               ring->me, I32(b, loc, p[i]));
        auto branch = b.create<scf::IfOp>(loc, is_src, /*else=*/false);
        OpBuilder ib = branch.getThenBodyBuilder();
        send_to(ib, I32(ib, loc, p[i + 1]));
        dests.insert(p[i + 1]);
      }
      Value receives = b.create<arith::ConstantIntOp>(loc, 0, 1);
      for (int64_t d : dests) {
        Value is_dst = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq,
                                               ring->me, I32(b, loc, d));
        receives = b.create<arith::OrIOp>(loc, receives, is_dst);
      }
      auto branch = b.create<scf::IfOp>(loc, receives, /*else=*/true);
      OpBuilder tb = branch.getThenBodyBuilder();
      tb.create<DmaWaitRecvOp>(loc, recv, out);
      OpBuilder eb = branch.getElseBodyBuilder();
      Zero(eb, loc, out);
      op.erase();
      return success();
    }
    // A shift by `offset`: i -> i + offset (modulo n with `rotate`).
    int64_t offset = *op.getOffset();
    Value zero = I32(b, loc, 0);
    auto wrap = [&](Value v) {
      Value m = b.create<arith::RemSIOp>(loc, v, ring->n);
      Value m2 = b.create<arith::AddIOp>(loc, m, ring->n);
      return b.create<arith::RemSIOp>(loc, m2, ring->n).getResult();
    };
    auto inside = [&](Value v) {
      Value ge =
          b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, v, zero);
      Value lt =
          b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, v, ring->n);
      return b.create<arith::AndIOp>(loc, ge, lt).getResult();
    };
    Value dst = b.create<arith::AddIOp>(loc, ring->me, I32(b, loc, offset));
    Value src = b.create<arith::SubIOp>(loc, ring->me, I32(b, loc, offset));
    Value has_dst, has_src;
    if (op.getRotate()) {
      dst = wrap(dst);
      has_dst = has_src = b.create<arith::ConstantIntOp>(loc, 1, 1);
    } else {
      has_dst = inside(dst);
      has_src = inside(src);
    }
    auto sends = b.create<scf::IfOp>(loc, has_dst, /*else=*/false);
    OpBuilder sb = sends.getThenBodyBuilder();
    send_to(sb, dst);
    auto receives = b.create<scf::IfOp>(loc, has_src, /*else=*/true);
    OpBuilder tb = receives.getThenBodyBuilder();
    tb.create<DmaWaitRecvOp>(loc, recv, out);
    OpBuilder eb = receives.getElseBodyBuilder();
    Zero(eb, loc, out);
    op.erase();
    return success();
  }

  LogicalResult ExpandAllGather(AllGatherOp op) {
    OpBuilder b(op);
    Location loc = op.getLoc();
    auto in_t = llvm::cast<MemRefType>(op.getInput().getType());
    auto out_t = llvm::cast<MemRefType>(op.getOutput().getType());
    if (!in_t.hasStaticShape() || !out_t.hasStaticShape())
      return op.emitError("expansion needs static shapes");
    auto ring = MakeRing(b, op, op.getAxes());
    if (failed(ring)) return failure();
    Type dma = SemaphoreType::get(b.getContext(), SemaphoreKind::dma);
    b.create<DeviceBarrierOp>(loc);
    Value local = b.create<SemAllocOp>(loc, dma);
    Value send = b.create<SemAllocOp>(loc, dma);
    Value recv = b.create<SemAllocOp>(loc, dma);
    bool tiled = op.getTiled();
    int64_t rows = tiled ? in_t.getDimSize(0) : 1;
    // Block `slot` of the output, typed like the input (rank-reduced when
    // stacked).
    auto block = [&](OpBuilder& bb, Value slot32) -> Value {
      Value slot =
          bb.create<arith::IndexCastOp>(loc, bb.getIndexType(), slot32);
      Value first = bb.create<arith::MulIOp>(
          loc, slot, bb.create<arith::ConstantIndexOp>(loc, rows));
      llvm::SmallVector<OpFoldResult> offsets(out_t.getRank(),
                                              bb.getIndexAttr(0));
      llvm::SmallVector<OpFoldResult> sizes,
          strides(out_t.getRank(), bb.getIndexAttr(1));
      offsets[0] = first;
      for (int64_t d = 0; d < out_t.getRank(); ++d)
        sizes.push_back(bb.getIndexAttr(d == 0 ? rows : out_t.getDimSize(d)));
      auto type =
          llvm::cast<MemRefType>(memref::SubViewOp::inferRankReducedResultType(
              in_t.getShape(), out_t, offsets, sizes, strides));
      return bb.create<memref::SubViewOp>(loc, type, op.getOutput(), offsets,
                                          sizes, strides);
    };
    Value own = block(b, ring->me);
    b.create<DmaStartOp>(loc, op.getInput(), own, local, Value(), ValueRange{},
                         UnitAttr());
    b.create<DmaWaitRecvOp>(loc, local, own);
    Value one = I32(b, loc, 1);
    Value right = b.create<arith::RemSIOp>(
        loc, b.create<arith::AddIOp>(loc, ring->me, one), ring->n);
    Value steps = b.create<arith::IndexCastOp>(
        loc, b.getIndexType(), b.create<arith::SubIOp>(loc, ring->n, one));
    Value c0 = b.create<arith::ConstantIndexOp>(loc, 0);
    Value c1 = b.create<arith::ConstantIndexOp>(loc, 1);
    b.create<scf::ForOp>(
        loc, c0, steps, c1, ValueRange{},
        [&](OpBuilder& fb, Location, Value k, ValueRange) {
          // Step k forwards block (me - k) mod n to the right neighbour.
          Value k32 = fb.create<arith::IndexCastOp>(loc, fb.getI32Type(), k);
          Value s = fb.create<arith::SubIOp>(loc, ring->me, k32);
          s = fb.create<arith::AddIOp>(loc, s, ring->n);
          s = fb.create<arith::RemSIOp>(loc, s, ring->n);
          Value blk = block(fb, s);
          fb.create<DmaStartOp>(loc, blk, blk, recv, send,
                                IdAlong(*ring, right), UnitAttr());
          fb.create<DmaWaitSendOp>(loc, send, blk);
          fb.create<DmaWaitRecvOp>(loc, recv, blk);
          fb.create<scf::YieldOp>(loc);
        });
    op.erase();
    return success();
  }
};

}  // namespace

std::unique_ptr<Pass> CreateConvertMeshToMeshDmaPass() {
  return std::make_unique<ConvertMeshToMeshDmaPass>();
}
std::unique_ptr<Pass> CreateExpandCollectivesPass() {
  return std::make_unique<ExpandCollectivesPass>();
}

void RegisterLoweringPasses();  // ToLLVM.cpp

void RegisterMeshDmaPasses() {
  RegisterLoweringPasses();
  registerPass([] { return CreateVerifyProtocolPass(); });
  registerPass([] { return CreateConvertMeshToMeshDmaPass(); });
  registerPass([] { return CreateExpandCollectivesPass(); });
}

}  // namespace meshdma::ir
