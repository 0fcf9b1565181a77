// Compiles meshdma MLIR kernels once per process and runs them SPMD on the
// meshdma runtime. This header needs no MLIR headers.
//
//   auto jit = meshdma::jit::JitModule::Compile(text);     // once per process
//   runtime->Run(mesh, [&] { return (*jit)->Run("k", {in, out}); });
//
// `Run` acts as the calling device: it opens the kernel's scope with
// `RunKernel` (entry barrier unless the kernel says `meshdma.entry_barrier =
// false`, its `meshdma.collective_id`, the exit contract) and calls the
// compiled code. JIT code is reentrant: every device thread calls the same
// function. Under mpirun every rank compiles its own copy.
#ifndef MESHDMA_MLIR_JIT_H_
#define MESHDMA_MLIR_JIT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "meshdma/base/dtype.h"
#include "meshdma/dma/array_ref.h"

namespace meshdma::jit {

struct JitOptions {
  // The source holds upstream `mesh` programs on tensors: run
  // convert-mesh-to-meshdma, bufferize (results become trailing out-params)
  // and treat every public function on a mesh as a kernel.
  bool from_mesh = false;
  // Run meshdma-expand-collectives first: ppermute and all_gather over one
  // axis become ring kernels of DMAs and semaphores instead of runtime calls.
  bool expand_collectives = false;
  // Prove every kernel's semaphore protocol first (meshdma-verify-protocol
  // with its defaults, for the kernel's mesh): a kernel the checker rejects
  // or cannot verify fails Compile with FailedPrecondition carrying the
  // checker's diagnostics, and is never compiled.
  bool verify_protocol = false;
  // LLVM optimisation level of the generated code.
  int opt_level = 3;
};

// One memref argument of a kernel.
struct KernelArg {
  DType dtype;
  std::vector<int64_t> shape;
  int64_t bytes() const;
};

class JitModule {
 public:
  // Parses, verifies, lowers and compiles `source`. Errors carry the MLIR
  // diagnostics (with locations).
  static absl::StatusOr<std::unique_ptr<JitModule>> Compile(
      std::string_view source, const JitOptions& options = {});
  ~JitModule();

  std::vector<std::string> kernels() const;
  // The memref arguments of `kernel`, in order.
  absl::StatusOr<std::vector<KernelArg>> Signature(
      std::string_view kernel) const;
  // Runs `kernel` on the calling device (inside `Runtime::Run`), one ArrayRef
  // per argument with the argument's dtype and shape.
  absl::Status Run(std::string_view kernel,
                   std::span<const ArrayRef> args) const;

  struct Impl;

 private:
  explicit JitModule(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshdma::jit

#endif  // MESHDMA_MLIR_JIT_H_
