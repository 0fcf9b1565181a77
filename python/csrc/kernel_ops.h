// Running meshdma's kernels for torch callers (kernel_ops.cc registers the
// attention kernels as torch.ops.meshdma; make_kernel.cc calls the op
// registry).
#ifndef MESHDMA_PYTHON_CSRC_KERNEL_OPS_H_
#define MESHDMA_PYTHON_CSRC_KERNEL_OPS_H_

#include <ATen/ATen.h>

#include <functional>

#include "absl/status/status.h"
#include "meshdma/dma/array_ref.h"

namespace meshdma::torch_backend {

// Runs `kernel` on this process's device (process_device.h) and waits. Its
// error raises a ValueError with its message and is its caller's alone: the
// device, and a process group on it, go on serving.
void RunKernel(const std::function<absl::Status()>& kernel);

// torch's dtype for meshdma's.
at::ScalarType TorchDType(DType t);

// A contiguous CPU tensor's memory, as meshdma's kernels take it (TypeError
// for a dtype meshdma lacks).
ArrayRef KernelView(const at::Tensor& t);

}  // namespace meshdma::torch_backend

#endif  // MESHDMA_PYTHON_CSRC_KERNEL_OPS_H_
