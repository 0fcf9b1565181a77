#include "python/csrc/make_kernel.h"

#include <cstring>

#include "meshdma/kernels/ops/registry.h"
#include "python/csrc/group_ops.h"
#include "python/csrc/kernel_ops.h"

namespace meshdma::torch_backend {

std::vector<at::Tensor> CallRegisteredOp(
    const std::string& name, const std::vector<at::Tensor>& inputs,
    const std::map<std::string, OpAttr>& attrs) {
  // Step 1: the inputs as contiguous CPU tensors, the attributes as the
  // registry's.
  std::vector<at::Tensor> held;
  std::vector<ArrayRef> views;
  for (const at::Tensor& t : inputs) {
    TORCH_CHECK_VALUE(t.device().is_cpu(), "meshdma.make_kernel('", name,
                      "'): an input is on ", t.device(), "; CPU tensors only");
    held.push_back(t.contiguous());
    views.push_back(KernelView(held.back()));
  }
  OpAttrs op_attrs;
  for (const auto& [key, value] : attrs) {
    std::visit([&, &k = key](const auto& v) { op_attrs[k] = v; }, value);
  }
  // Step 2: the op on the device, then its outputs as tensors.
  std::vector<HostArray> outs;
  RunKernel([&]() -> absl::Status {
    absl::StatusOr<std::vector<HostArray>> r = CallOp(name, views, op_attrs);
    if (!r.ok()) return r.status();
    outs = *std::move(r);
    return absl::OkStatus();
  });
  std::vector<at::Tensor> results;
  for (const HostArray& a : outs) {
    at::Tensor t =
        at::empty(a.shape(), at::TensorOptions().dtype(TorchDType(a.dtype())));
    std::memcpy(t.data_ptr(), a.ref().data(), a.ref().size_bytes());
    results.push_back(std::move(t));
  }
  return results;
}

std::map<std::string, std::string> RegisteredOpDocs() {
  std::map<std::string, std::string> docs;
  for (const std::string& name : RegisteredOps()) {
    absl::StatusOr<OpDef> def = FindOp(name);
    if (def.ok()) docs[name] = def->doc;
  }
  return docs;
}

}  // namespace meshdma::torch_backend
