// Fuzzes the MLIR side: the input is parsed as MLIR text with the meshdma
// dialect (and the upstream dialects a meshdma program uses) registered, the
// module is verified (every op's and type's verifier, the meshdma attribute
// verifiers), and a module that verifies is run through
// meshdma-verify-protocol. Built only with MESHDMA_WITH_MLIR=ON. MLIR's own
// shared libraries are not instrumented: coverage and ASan+UBSan checks cover
// meshdma's dialect, verifiers and passes (mlir/lib), which this target
// compiles itself.
#include <cstddef>
#include <cstdint>
#include <string>

#include "meshdma_mlir/MeshDma.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Index/IR/IndexDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Mesh/IR/MeshDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const mlir::DialectRegistry* registry = [] {
    auto* r = new mlir::DialectRegistry;
    r->insert<meshdma::ir::MeshDmaDialect, mlir::func::FuncDialect,
              mlir::arith::ArithDialect, mlir::scf::SCFDialect,
              mlir::memref::MemRefDialect, mlir::mesh::MeshDialect,
              mlir::cf::ControlFlowDialect, mlir::math::MathDialect,
              mlir::index::IndexDialect>();
    return r;
  }();
  // A fresh context per input: nothing (uniqued types and attributes, loaded
  // dialects) carries over from one input to the next.
  mlir::MLIRContext context(*registry, mlir::MLIRContext::Threading::DISABLED);
  context.allowUnregisteredDialects(false);
  // Diagnostics are the expected outcome for most inputs: drop them.
  mlir::ScopedDiagnosticHandler quiet(
      &context, [](mlir::Diagnostic&) { return mlir::success(); });

  // MLIR's lexer reads the byte after the text (a file's buffer always has a
  // NUL there): a copy into a std::string provides it.
  const std::string text(reinterpret_cast<const char*>(data), size);
  mlir::ParserConfig config(&context, /*verifyAfterParse=*/false);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(text, config, "fuzz");
  if (!module) return 0;
  // MLIR 19's own mesh ops divide by the sizes of their mesh's axes when
  // verified (mesh.all_to_all with an axis of size 0 raises SIGFPE inside
  // libMLIR): a module with both an empty mesh axis and an upstream mesh op
  // other than mesh.mesh is not verified. meshdma's ops on such meshes are.
  bool empty_axis = false, mesh_ops = false;
  module->walk([&](mlir::Operation* op) {
    if (auto m = llvm::dyn_cast<mlir::mesh::MeshOp>(op)) {
      for (int64_t s : m.getShape()) empty_axis |= s == 0;
    } else if (llvm::isa<mlir::mesh::MeshDialect>(op->getDialect())) {
      mesh_ops = true;
    }
  });
  if (empty_axis && mesh_ops) return 0;
  if (mlir::failed(mlir::verify(*module))) return 0;

  mlir::PassManager pm(&context);
  pm.addPass(meshdma::ir::CreateVerifyProtocolPass());
  (void)pm.run(*module);
  return 0;
}
