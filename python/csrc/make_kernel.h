// The kernels behind `meshdma.torch.make_kernel` (python/meshdma/torch/
// kernels.py), PyTorch/XLA's `make_kernel_from_pallas` on meshdma:
//   - an op of meshdma's registry (kernels/ops/registry.h), run on this
//     process's device (process_device.h) on this rank's inputs;
//   - a kernel in meshdma's MLIR dialect, proved by the protocol checker and
//     compiled by the JIT once per process (mlir/include/meshdma_mlir/jit.h),
//     run SPMD on every rank of a meshdma process group: its memref
//     arguments (inputs, then outputs) are staged in symmetric memory, so
//     that its remote DMAs land in the peers' copies.
// Bad input raises ValueError (shapes, names, the checker's diagnostics) or
// TypeError (dtypes) before anything runs.
#ifndef MESHDMA_PYTHON_CSRC_MAKE_KERNEL_H_
#define MESHDMA_PYTHON_CSRC_MAKE_KERNEL_H_

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "python/csrc/kernel_ops.h"
#include "python/csrc/process_group_meshdma.h"

namespace meshdma::jit {
class JitModule;
}

namespace meshdma::torch_backend {

using OpAttr = std::variant<bool, int64_t, double, std::string>;

// Registry op `name` with `attrs` on `inputs`; its outputs.
std::vector<at::Tensor> CallRegisteredOp(
    const std::string& name, const std::vector<at::Tensor>& inputs,
    const std::map<std::string, OpAttr>& attrs);

// The registered ops' names and documentation.
std::map<std::string, std::string> RegisteredOpDocs();

// A compiled module of the dialect and the kernel of it that runs (built
// with MLIR only: dialect_kernel.cc).
class DialectKernel {
 public:
  // Proves and compiles `source`; `name` picks the kernel (empty: the
  // module's only kernel).
  static std::shared_ptr<DialectKernel> Compile(const std::string& source,
                                                const std::string& name);
  ~DialectKernel();
  const std::string& name() const { return name_; }
  // (shape, dtype) of each memref argument, in order.
  std::vector<std::pair<std::vector<int64_t>, at::ScalarType>> signature()
      const;
  // Runs on every rank of `group` (collective): `args` are the kernel's
  // arguments in order, its `num_inputs` inputs, then its outputs; only the
  // outputs are written (the inputs run on copies).
  void Run(ProcessGroupMeshdma& group, const std::vector<at::Tensor>& args,
           int64_t num_inputs);

 private:
  DialectKernel() = default;
  std::unique_ptr<jit::JitModule> module_;
  std::string name_;
};

}  // namespace meshdma::torch_backend

#endif  // MESHDMA_PYTHON_CSRC_MAKE_KERNEL_H_
