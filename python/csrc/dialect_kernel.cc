#include <algorithm>
#include <cstring>

#include "absl/strings/str_join.h"
#include "meshdma/dma/symmetric_memory.h"
#include "meshdma_mlir/jit.h"
#include "python/csrc/make_kernel.h"

namespace meshdma::torch_backend {

DialectKernel::~DialectKernel() = default;

std::shared_ptr<DialectKernel> DialectKernel::Compile(const std::string& source,
                                                      const std::string& name) {
  jit::JitOptions options;
  options.verify_protocol = true;
  absl::StatusOr<std::unique_ptr<jit::JitModule>> module =
      jit::JitModule::Compile(source, options);
  TORCH_CHECK_VALUE(module.ok(),
                    "meshdma.make_kernel: ", module.status().message());
  std::shared_ptr<DialectKernel> kernel(new DialectKernel());
  kernel->module_ = *std::move(module);
  const std::vector<std::string> kernels = kernel->module_->kernels();
  if (name.empty()) {
    TORCH_CHECK_VALUE(kernels.size() == 1,
                      "meshdma.make_kernel: the module "
                      "holds ",
                      kernels.size(), " kernels (",
                      absl::StrJoin(kernels, ", "), "); name one");
    kernel->name_ = kernels[0];
  } else {
    TORCH_CHECK_VALUE(
        std::find(kernels.begin(), kernels.end(), name) != kernels.end(),
        "meshdma.make_kernel: no kernel '", name, "' in the module (it holds ",
        absl::StrJoin(kernels, ", "), ")");
    kernel->name_ = name;
  }
  return kernel;
}

std::vector<std::pair<std::vector<int64_t>, at::ScalarType>>
DialectKernel::signature() const {
  absl::StatusOr<std::vector<jit::KernelArg>> args = module_->Signature(name_);
  TORCH_CHECK_VALUE(args.ok(), args.status().message());
  std::vector<std::pair<std::vector<int64_t>, at::ScalarType>> result;
  for (const jit::KernelArg& a : *args) {
    result.emplace_back(a.shape, TorchDType(a.dtype));
  }
  return result;
}

void DialectKernel::Run(ProcessGroupMeshdma& group,
                        const std::vector<at::Tensor>& args,
                        int64_t num_inputs) {
  // Step 1: the arguments against the kernel's signature, on this rank.
  const auto want = signature();
  TORCH_CHECK_VALUE(num_inputs >= 0 && num_inputs <= int64_t(args.size()),
                    "meshdma.make_kernel: ", num_inputs, " inputs of ",
                    args.size(), " arguments");
  TORCH_CHECK_VALUE(args.size() == want.size(), "meshdma.make_kernel: kernel '",
                    name_, "' takes ", want.size(), " memrefs (inputs, then ",
                    "outputs), got ", args.size(), " tensors");
  std::vector<at::Tensor> held;
  std::vector<ArrayRef> views;
  for (size_t i = 0; i < args.size(); ++i) {
    const at::Tensor& t = args[i];
    TORCH_CHECK_TYPE(t.scalar_type() == want[i].second,
                     "meshdma.make_kernel: kernel '", name_, "' argument ", i,
                     " is ", c10::toString(want[i].second), ", got ",
                     c10::toString(t.scalar_type()));
    TORCH_CHECK_VALUE(t.device().is_cpu() && t.sizes() == want[i].first,
                      "meshdma.make_kernel: kernel '", name_, "' argument ", i,
                      " is ", at::IntArrayRef(want[i].first), ", got ",
                      t.sizes(), " on ", t.device());
    held.push_back(t.contiguous());
    views.push_back(KernelView(held.back()));
  }
  // Step 2: on every rank, the arguments in symmetric memory (the same
  // allocations in the same order, so the peers' DMAs find them), the
  // kernel, and the arguments back.
  absl::Status s = group.RunCollectiveKernel("make_kernel", [&] {
    std::vector<ArrayRef> staged;
    for (const ArrayRef& view : views) {
      absl::StatusOr<ArrayRef> sym =
          AllocateSymmetric(view.dtype(), view.shape());
      if (!sym.ok()) return sym.status();
      std::memcpy(sym->data(), view.data(), view.size_bytes());
      staged.push_back(*sym);
    }
    absl::Status ran = module_->Run(name_, staged);
    if (!ran.ok()) return ran;
    for (size_t i = num_inputs; i < held.size(); ++i) {
      std::memcpy(held[i].data_ptr(), staged[i].data(), staged[i].size_bytes());
    }
    return absl::OkStatus();
  });
  TORCH_CHECK(s.ok(), s.message());
  for (size_t i = num_inputs; i < args.size(); ++i) {
    if (!held[i].is_same(args[i])) args[i].copy_(held[i]);
  }
}

}  // namespace meshdma::torch_backend
