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

// One compiled kernel: its signature, options and mesh, and its entry.
struct CompiledKernel {
  std::vector<KernelArg> args;
  KernelOptions options;
  // The kernel's mesh: axis names and sizes (-1 for `?`).
  std::vector<std::pair<std::string, int64_t>> mesh_axes;
  std::string mesh_name;
  void (*fn)(void**) = nullptr;
};

using CompiledKernels = std::map<std::string, CompiledKernel, std::less<>>;

// A context with every dialect, interface and translation the JIT needs
// loaded; diagnostics print without the operation.
std::unique_ptr<mlir::MLIRContext> MakeJitContext() {
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
  return ctx;
}

// Lowers upstream `mesh` programs on tensors to the dialect on memrefs and
// marks each public function with a mesh as a kernel.
mlir::LogicalResult ConvertFromMesh(mlir::ModuleOp module,
                                    mlir::MLIRContext* ctx) {
  mlir::PassManager pm(ctx);
  pm.addPass(ir::CreateConvertMeshToMeshDmaPass());
  mlir::bufferization::OneShotBufferizationOptions bo;
  bo.bufferizeFunctionBoundaries = true;
  bo.setFunctionBoundaryTypeConversion(
      mlir::bufferization::LayoutMapOption::IdentityLayoutMap);
  pm.addPass(mlir::bufferization::createOneShotBufferizePass(bo));
  pm.addPass(mlir::bufferization::createBufferResultsToOutParamsPass());
  if (mlir::failed(pm.run(module))) return mlir::failure();
  module->walk([&](mlir::func::FuncOp f) {
    if (f.isPublic() && !f.isExternal() &&
        f->hasAttr(ir::MeshDmaDialect::kMeshAttr))
      f->setAttr(ir::MeshDmaDialect::kKernelAttr, mlir::UnitAttr::get(ctx));
  });
  return mlir::success();
}

// Runs the one pass `pass` over `module`.
mlir::LogicalResult RunPass(mlir::ModuleOp module, mlir::MLIRContext* ctx,
                            std::unique_ptr<mlir::Pass> pass) {
  mlir::PassManager pm(ctx);
  pm.addPass(std::move(pass));
  return pm.run(module);
}

// The passes `options` asks for before lowering, in order: from `mesh`,
// collective expansion, the protocol checker. A failure carries `errors`,
// the diagnostics so far.
absl::Status RunFrontEnd(mlir::ModuleOp module, mlir::MLIRContext* ctx,
                         const JitOptions& options, const std::string& errors) {
  if (options.from_mesh && mlir::failed(ConvertFromMesh(module, ctx)))
    return absl::InvalidArgumentError(errors);
  if (options.expand_collectives &&
      mlir::failed(RunPass(module, ctx, ir::CreateExpandCollectivesPass())))
    return absl::InvalidArgumentError(errors);
  if (options.verify_protocol &&
      mlir::failed(RunPass(module, ctx, ir::CreateVerifyProtocolPass())))
    return absl::FailedPreconditionError(errors);
  return absl::OkStatus();
}

// The kernel `f` describes: its options and mesh from its attributes, its
// arguments from its signature. Emits an error on `f` and returns nullopt
// when an argument is not a static, identity-layout memref of a runtime
// element type.
std::optional<CompiledKernel> DescribeKernel(mlir::func::FuncOp f) {
  CompiledKernel k;
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
      return std::nullopt;
    }
    k.args.push_back(
        {*dt, std::vector<int64_t>(m.getShape().begin(), m.getShape().end())});
  }
  return k;
}

// Every function marked as a kernel in `module`, described; fails when any
// kernel has an argument the JIT cannot pass (each such kernel emits its
// error).
mlir::FailureOr<CompiledKernels> DescribeKernels(mlir::ModuleOp module) {
  CompiledKernels kernels;
  bool bad_signature = false;
  module->walk([&](mlir::func::FuncOp f) {
    if (!f->hasAttr(ir::MeshDmaDialect::kKernelAttr)) return;
    std::optional<CompiledKernel> k = DescribeKernel(f);
    if (!k) {
      bad_signature = true;
      return;
    }
    kernels[k->options.name] = std::move(*k);
  });
  if (bad_signature) return mlir::failure();
  return kernels;
}

// Compiles the LLVM-dialect `module` at `opt_level` with the C ABI entries
// bound; a failure carries `errors`, the diagnostics so far.
absl::StatusOr<std::unique_ptr<mlir::ExecutionEngine>> CreateEngine(
    mlir::ModuleOp module, int opt_level, const std::string& errors) {
  mlir::ExecutionEngineOptions eo;
  eo.transformer = mlir::makeOptimizingTransformer(
      static_cast<unsigned>(opt_level), 0, nullptr);
  eo.jitCodeGenOptLevel = opt_level >= 3 ? llvm::CodeGenOptLevel::Aggressive
                                         : llvm::CodeGenOptLevel::Default;
  auto engine = mlir::ExecutionEngine::create(module, eo);
  if (!engine) {
    return absl::InternalError(absl::StrCat(
        "JIT compilation failed: ", llvm::toString(engine.takeError()),
        errors));
  }
  (*engine)->registerSymbols(CAbiSymbols);
  return std::move(*engine);
}

// Sets each kernel's `fn` to its compiled C interface entry in `engine`.
absl::Status BindKernelEntries(mlir::ExecutionEngine& engine,
                               CompiledKernels& kernels) {
  for (auto& [name, k] : kernels) {
    auto fn = engine.lookupPacked("_mlir_ciface_" + name);
    if (!fn)
      return absl::InternalError(
          absl::StrCat("no compiled entry for kernel '", name,
                       "': ", llvm::toString(fn.takeError())));
    k.fn = *fn;
  }
  return absl::OkStatus();
}

}  // namespace

struct JitModule::Impl {
  using Kernel = CompiledKernel;
  std::unique_ptr<mlir::ExecutionEngine> engine;
  CompiledKernels kernels;
};

JitModule::JitModule(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
JitModule::~JitModule() = default;

absl::StatusOr<std::unique_ptr<JitModule>> JitModule::Compile(
    std::string_view source, const JitOptions& options) {
  // 1. A context; its diagnostics go into `errors`, with their locations.
  std::unique_ptr<mlir::MLIRContext> ctx = MakeJitContext();
  std::string errors;
  llvm::raw_string_ostream os(errors);
  llvm::SourceMgr sm;
  sm.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(
          llvm::StringRef(source.data(), source.size()), "<meshdma-jit>"),
      llvm::SMLoc());
  mlir::SourceMgrDiagnosticHandler handler(sm, ctx.get(), os);

  // 2. Parse, then the passes `options` asks for before lowering.
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sm, ctx.get());
  if (!module) return absl::InvalidArgumentError(errors);
  if (absl::Status s = RunFrontEnd(*module, ctx.get(), options, errors);
      !s.ok())
    return s;

  // 3. The kernels' signatures, read before lowering erases them.
  auto impl = std::make_unique<Impl>();
  mlir::FailureOr<CompiledKernels> kernels = DescribeKernels(*module);
  if (mlir::failed(kernels)) return absl::InvalidArgumentError(errors);
  impl->kernels = std::move(*kernels);

  // 4. Lower to LLVM, compile, and find each kernel's entry.
  mlir::PassManager pm(ctx.get());
  ir::BuildLowerToLLVMPipeline(pm);
  if (mlir::failed(pm.run(*module))) return absl::InvalidArgumentError(errors);
  absl::StatusOr<std::unique_ptr<mlir::ExecutionEngine>> engine =
      CreateEngine(*module, options.opt_level, errors);
  if (!engine.ok()) return engine.status();
  impl->engine = std::move(*engine);
  if (absl::Status s = BindKernelEntries(*impl->engine, impl->kernels); !s.ok())
    return s;
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
