#include "meshdma_mlir/MeshDma.h"
#include "mlir/Pass/PassRegistry.h"
namespace meshdma::ir {
std::unique_ptr<mlir::Pass> CreateConvertMeshToMeshDmaPass() { return nullptr; }
std::unique_ptr<mlir::Pass> CreateExpandCollectivesPass() { return nullptr; }
void RegisterMeshDmaPasses() {
  mlir::registerPass([] { return CreateVerifyProtocolPass(); });
}
}  // namespace meshdma::ir
