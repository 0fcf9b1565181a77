// The JIT (meshdma_mlir/jit.h): parse, lower, compile with MLIR's
// ExecutionEngine, and call kernels through their C interface inside
// RunKernel.
#include "meshdma_mlir/jit.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "meshdma/collectives/collectives.h"
#include "meshdma/dma/c_api.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "meshdma_mlir/MeshDma.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Bufferization/Transforms/FuncBufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Bufferization/Transforms/OneShotAnalysis.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/Extensions/AllExtensions.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Index/IR/IndexDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Mesh/IR/MeshDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Transforms/Passes.h"

namespace meshdma::jit {

int64_t KernelArg::bytes() const {
  int64_t n = static_cast<int64_t>(DTypeSize(dtype));
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

std::optional<DType> DTypeOfType(mlir::Type t) {
  if (t.isInteger(8)) return DType::kU8;
  if (t.isInteger(32)) return DType::kI32;
  if (t.isInteger(64)) return DType::kI64;
  if (t.isF16()) return DType::kF16;
  if (t.isBF16()) return DType::kBF16;
  if (t.isF32()) return DType::kF32;
  if (t.isF64()) return DType::kF64;
  return std::nullopt;
}

// Every C ABI entry the lowering may call, by name.
llvm::orc::SymbolMap CAbiSymbols(llvm::orc::MangleAndInterner interner) {
  llvm::orc::SymbolMap map;
  auto add = [&](const char* name, auto* fn) {
    map[interner(name)] = {llvm::orc::ExecutorAddr::fromPtr(fn),
                           llvm::JITSymbolFlags::Exported};
  };
  add("meshdma_logical_device_id", &meshdma_logical_device_id);
  add("meshdma_axis_index", &meshdma_axis_index);
  add("meshdma_axis_size", &meshdma_axis_size);
  add("meshdma_allocate_semaphore", &meshdma_allocate_semaphore);
  add("meshdma_get_barrier_semaphore", &meshdma_get_barrier_semaphore);
  add("meshdma_allocate_symmetric", &meshdma_allocate_symmetric);
  add("meshdma_mesh_device_id", &meshdma_mesh_device_id);
  add("meshdma_semaphore_signal", &meshdma_semaphore_signal);
  add("meshdma_semaphore_signal_remote", &meshdma_semaphore_signal_remote);
  add("meshdma_semaphore_wait", &meshdma_semaphore_wait);
  add("meshdma_semaphore_read", &meshdma_semaphore_read);
  add("meshdma_async_copy_start", &meshdma_async_copy_start);
  add("meshdma_async_remote_copy_start", &meshdma_async_remote_copy_start);
  add("meshdma_dma_wait_send", &meshdma_dma_wait_send);
  add("meshdma_dma_wait_recv", &meshdma_dma_wait_recv);
  add("meshdma_device_barrier", &meshdma_device_barrier);
  add("meshdma_ppermute", &meshdma_ppermute);
  add("meshdma_ppermute_shift", &meshdma_ppermute_shift);
  add("meshdma_all_gather", &meshdma_all_gather);
  add("meshdma_all_reduce", &meshdma_all_reduce);
  add("meshdma_reduce_scatter", &meshdma_reduce_scatter);
  add("meshdma_all_to_all", &meshdma_all_to_all);
  return map;
}

}  // namespace

struct JitModule::Impl {
  struct Kernel {
    std::vector<KernelArg> args;
    KernelOptions options;
    // The kernel's mesh: axis names and sizes (-1 for `?`).
    std::vector<std::pair<std::string, int64_t>> mesh_axes;
    std::string mesh_name;
    void (*fn)(void**) = nullptr;
  };
  std::unique_ptr<mlir::ExecutionEngine> engine;
  std::map<std::string, Kernel, std::less<>> kernels;
};

JitModule::JitModule(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
JitModule::~JitModule() = default;

absl::StatusOr<std::unique_ptr<JitModule>> JitModule::Compile(
    std::string_view source, const JitOptions& options) {
  static const bool initialized = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    return true;
  }();
  (void)initialized;

  mlir::DialectRegistry registry;
  registry.insert<ir::MeshDmaDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::scf::SCFDialect,
                  mlir::memref::MemRefDialect, mlir::mesh::MeshDialect,
                  mlir::LLVM::LLVMDialect, mlir::cf::ControlFlowDialect,
                  mlir::tensor::TensorDialect, mlir::math::MathDialect,
                  mlir::index::IndexDialect, mlir::affine::AffineDialect,
                  mlir::bufferization::BufferizationDialect>();
  mlir::func::registerAllExtensions(registry);
  mlir::arith::registerBufferizableOpInterfaceExternalModels(registry);
  mlir::bufferization::func_ext::registerBufferizableOpInterfaceExternalModels(
      registry);
  mlir::scf::registerBufferizableOpInterfaceExternalModels(registry);
  mlir::tensor::registerBufferizableOpInterfaceExternalModels(registry);
  mlir::registerBuiltinDialectTranslation(registry);
  mlir::registerLLVMDialectTranslation(registry);
  auto ctx = std::make_unique<mlir::MLIRContext>(registry);
  ctx->loadAllAvailableDialects();
  ctx->printOpOnDiagnostic(false);

  // Diagnostics go into `errors`, with their locations.
  std::string errors;
  llvm::raw_string_ostream os(errors);
  llvm::SourceMgr sm;
  sm.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(
          llvm::StringRef(source.data(), source.size()), "<meshdma-jit>"),
      llvm::SMLoc());
  mlir::SourceMgrDiagnosticHandler handler(sm, ctx.get(), os);

  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sm, ctx.get());
  if (!module) return absl::InvalidArgumentError(errors);

  if (options.from_mesh) {
    mlir::PassManager pm(ctx.get());
    pm.addPass(ir::CreateConvertMeshToMeshDmaPass());
    mlir::bufferization::OneShotBufferizationOptions bo;
    bo.bufferizeFunctionBoundaries = true;
    bo.setFunctionBoundaryTypeConversion(
        mlir::bufferization::LayoutMapOption::IdentityLayoutMap);
    pm.addPass(mlir::bufferization::createOneShotBufferizePass(bo));
    pm.addPass(mlir::bufferization::createBufferResultsToOutParamsPass());
    if (mlir::failed(pm.run(*module)))
      return absl::InvalidArgumentError(errors);
    module->walk([&](mlir::func::FuncOp f) {
      if (f.isPublic() && !f.isExternal() &&
          f->hasAttr(ir::MeshDmaDialect::kMeshAttr))
        f->setAttr(ir::MeshDmaDialect::kKernelAttr,
                   mlir::UnitAttr::get(ctx.get()));
    });
  }

  if (options.expand_collectives) {
    mlir::PassManager pm(ctx.get());
    pm.addPass(ir::CreateExpandCollectivesPass());
    if (mlir::failed(pm.run(*module)))
      return absl::InvalidArgumentError(errors);
  }

  if (options.verify_protocol) {
    mlir::PassManager pm(ctx.get());
    pm.addPass(ir::CreateVerifyProtocolPass());
    if (mlir::failed(pm.run(*module)))
      return absl::FailedPreconditionError(errors);
  }

  auto impl = std::make_unique<Impl>();
  bool bad_signature = false;
  module->walk([&](mlir::func::FuncOp f) {
    if (!f->hasAttr(ir::MeshDmaDialect::kKernelAttr)) return;
    Impl::Kernel k;
    k.options.name = f.getSymName().str();
    if (auto b = f->getAttrOfType<mlir::BoolAttr>(
            ir::MeshDmaDialect::kEntryBarrierAttr))
      k.options.entry_barrier = b.getValue();
    if (auto id = f->getAttrOfType<mlir::IntegerAttr>(
            ir::MeshDmaDialect::kCollectiveIdAttr))
      k.options.collective_id = static_cast<int>(id.getInt());
    if (auto mesh = ir::GetKernelMesh(f)) {
      k.mesh_name = mesh->op.getSymName().str();
      for (size_t a = 0; a < mesh->axes.size(); ++a)
        k.mesh_axes.emplace_back(
            mesh->axes[a],
            mlir::ShapedType::isDynamic(mesh->shape[a]) ? -1 : mesh->shape[a]);
    }
    for (mlir::Type t : f.getArgumentTypes()) {
      auto m = llvm::dyn_cast<mlir::MemRefType>(t);
      std::optional<DType> dt =
          m ? DTypeOfType(m.getElementType()) : std::nullopt;
      if (!m || !dt || !m.hasStaticShape() || !m.getLayout().isIdentity()) {
        f.emitError(
            "a JIT kernel takes static, identity-layout memrefs of "
            "a runtime element type; argument type ")
            << t << " is not one";
        bad_signature = true;
        return;
      }
      k.args.push_back({*dt, std::vector<int64_t>(m.getShape().begin(),
                                                  m.getShape().end())});
    }
    impl->kernels[k.options.name] = std::move(k);
  });
  if (bad_signature) return absl::InvalidArgumentError(errors);

  mlir::PassManager pm(ctx.get());
  ir::BuildLowerToLLVMPipeline(pm);
  if (mlir::failed(pm.run(*module))) return absl::InvalidArgumentError(errors);

  mlir::ExecutionEngineOptions eo;
  eo.transformer = mlir::makeOptimizingTransformer(
      static_cast<unsigned>(options.opt_level), 0, nullptr);
  eo.jitCodeGenOptLevel = options.opt_level >= 3
                              ? llvm::CodeGenOptLevel::Aggressive
                              : llvm::CodeGenOptLevel::Default;
  auto engine = mlir::ExecutionEngine::create(*module, eo);
  if (!engine) {
    return absl::InternalError(absl::StrCat(
        "JIT compilation failed: ", llvm::toString(engine.takeError()),
        errors));
  }
  (*engine)->registerSymbols(CAbiSymbols);
  for (auto& [name, k] : impl->kernels) {
    auto fn = (*engine)->lookupPacked("_mlir_ciface_" + name);
    if (!fn)
      return absl::InternalError(
          absl::StrCat("no compiled entry for kernel '", name,
                       "': ", llvm::toString(fn.takeError())));
    k.fn = *fn;
  }
  impl->engine = std::move(*engine);
  // The context can go: the compiled code does not refer to it.
  return std::unique_ptr<JitModule>(new JitModule(std::move(impl)));
}

std::vector<std::string> JitModule::kernels() const {
  std::vector<std::string> out;
  for (const auto& [name, k] : impl_->kernels) out.push_back(name);
  return out;
}

absl::StatusOr<std::vector<KernelArg>> JitModule::Signature(
    std::string_view kernel) const {
  auto it = impl_->kernels.find(kernel);
  if (it == impl_->kernels.end())
    return absl::NotFoundError(
        absl::StrCat("no kernel '", std::string(kernel), "'"));
  return it->second.args;
}

absl::Status JitModule::Run(std::string_view kernel,
                            std::span<const ArrayRef> args) const {
  auto it = impl_->kernels.find(kernel);
  if (it == impl_->kernels.end())
    return absl::NotFoundError(
        absl::StrCat("no kernel '", std::string(kernel), "'"));
  const Impl::Kernel& k = it->second;
  if (args.size() != k.args.size())
    return absl::InvalidArgumentError(
        absl::StrCat("kernel '", std::string(kernel), "' takes ", k.args.size(),
                     " arguments, got ", args.size()));
  // The kernel's mesh must be the one it runs on (axis names and the sizes
  // it fixes).
  for (const auto& [axis, size] : k.mesh_axes) {
    absl::StatusOr<int> have = axis_size(axis);
    if (!have.ok() || (size >= 0 && *have != size))
      return absl::FailedPreconditionError(absl::StrCat(
          "kernel '", std::string(kernel), "' is written for mesh @",
          k.mesh_name, " with axis '", axis, "' of size ",
          size >= 0 ? std::to_string(size) : std::string("?"),
          have.ok() ? absl::StrCat(", the running mesh has ", *have)
                    : absl::StrCat(": ", have.status().message())));
  }
  // Memref descriptors: {allocated, aligned, offset, sizes[r], strides[r]}.
  std::vector<std::vector<int64_t>> descs(args.size());
  std::vector<void*> desc_ptrs(args.size());
  std::vector<void*> packed;
  for (size_t i = 0; i < args.size(); ++i) {
    const ArrayRef& a = args[i];
    const KernelArg& want = k.args[i];
    if (a.dtype() != want.dtype ||
        !std::equal(a.shape().begin(), a.shape().end(), want.shape.begin(),
                    want.shape.end()))
      return absl::InvalidArgumentError(
          absl::StrCat("kernel '", std::string(kernel), "': argument #", i,
                       " has the wrong dtype or shape"));
    std::vector<int64_t>& d = descs[i];
    d.push_back(reinterpret_cast<int64_t>(a.data()));
    d.push_back(reinterpret_cast<int64_t>(a.data()));
    d.push_back(0);
    for (int64_t s : a.shape()) d.push_back(s);
    for (int64_t s : a.strides()) d.push_back(s);
    desc_ptrs[i] = d.data();
  }
  for (void*& p : desc_ptrs) packed.push_back(&p);
  int32_t rc = 0;
  packed.push_back(&rc);
  return RunKernel(k.options, [&]() -> absl::Status {
    k.fn(packed.data());
    if (rc == 0) return absl::OkStatus();
    return absl::Status(static_cast<absl::StatusCode>(rc),
                        meshdma_last_error());
  });
}

}  // namespace meshdma::jit
