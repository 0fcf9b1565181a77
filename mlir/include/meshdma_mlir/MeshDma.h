// The meshdma MLIR dialect (types, ops) and its passes. See docs/mlir.md.
#ifndef MESHDMA_MLIR_MESHDMA_H_
#define MESHDMA_MLIR_MESHDMA_H_

#include <memory>
#include <optional>
#include <string>

#include "llvm/ADT/SmallVector.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Pass/Pass.h"

// Generated declarations; they need the MLIR headers above.
// clang-format off
#include "meshdma_mlir/MeshDmaDialect.h.inc"
#include "meshdma_mlir/MeshDmaEnums.h.inc"
#define GET_TYPEDEF_CLASSES
#include "meshdma_mlir/MeshDmaTypes.h.inc"
#define GET_OP_CLASSES
#include "meshdma_mlir/MeshDmaOps.h.inc"
// clang-format on

namespace meshdma::ir {

// The mesh a kernel runs on: its `mesh.mesh` op, axis names (from
// `meshdma.axes`, else "0", "1", ...) and shape (ShapedType::kDynamic for `?`).
struct MeshInfo {
  mlir::mesh::MeshOp op;
  llvm::SmallVector<std::string> axes;
  llvm::SmallVector<int64_t> shape;

  // The index of `axis` in `axes`, or -1.
  int AxisIndex(llvm::StringRef axis) const;
  // The product of the sizes of `axes` (names), or nullopt if one is dynamic
  // or unknown.
  std::optional<int64_t> GroupSize(mlir::ArrayAttr axes) const;
};

// The mesh of the `meshdma.kernel` function (or any function carrying
// `meshdma.mesh`) enclosing `op`; nullopt outside one or if the symbol does not
// resolve (the attribute verifier reports that).
std::optional<MeshInfo> GetEnclosingMesh(mlir::Operation* op);
// The mesh named by `func`'s `meshdma.mesh` attribute.
std::optional<MeshInfo> GetKernelMesh(mlir::func::FuncOp func);

// Bytes per element of a memref element type the runtime supports, else 0.
int64_t ElementBytes(mlir::Type type);

// Pass factories (registered by RegisterMeshDmaPasses under the names given).
// meshdma-verify-protocol{mesh-shape=4x2 calls=2 stats=true}
std::unique_ptr<mlir::Pass> CreateVerifyProtocolPass();
// convert-mesh-to-meshdma
std::unique_ptr<mlir::Pass> CreateConvertMeshToMeshDmaPass();
// meshdma-expand-collectives{mesh-shape=...}
std::unique_ptr<mlir::Pass> CreateExpandCollectivesPass();
// convert-meshdma-to-llvm: meshdma ops to calls into the C ABI.
std::unique_ptr<mlir::Pass> CreateConvertMeshDmaToLLVMPass();
// The whole lowering of a module of kernels to the LLVM dialect (also
// registered as the pipeline meshdma-lower-to-llvm).
void BuildLowerToLLVMPipeline(mlir::OpPassManager& pm);
// Registers every pass above and the pipeline.
void RegisterMeshDmaPasses();

}  // namespace meshdma::ir

#endif  // MESHDMA_MLIR_MESHDMA_H_
