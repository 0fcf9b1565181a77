// `make_kernel`: adopt a kernel into a reusable op on arrays (PyTorch/XLA's
// `make_kernel_from_pallas`). The registry of ops callable by name is in
// kernels/ops/registry.h.
//
//   auto op = make_kernel(kernel, [](std::span<const ArrayRef> in) {
//     return std::vector<ShapeDtype>{{in[0].dtype(), ShapeOf(in[0])}};
//   });
//   MESHDMA_ASSIGN_OR_RETURN(std::vector<HostArray> outs, op({x, y}));
//
// Contract of an op call `op(inputs)`:
//   1. Arity: an op made with `num_inputs >= 0` (or from a `Kernel` whose
//      params list in_specs) rejects another number of inputs, naming the op.
//   2. `out_shape(inputs)` gives the outputs' dtypes and shapes (an error
//      from it is returned as is); the op allocates them zero-filled as
//      `HostArray`s, owned by the caller, and runs the kernel on
//      (inputs, views of the outputs).
//   3. Like `pallas_call`, an op acts on the calling device (call it inside
//      `Runtime::Run`); it is reentrant and may be called from every device
//      at once.
#ifndef MESHDMA_KERNELS_MAKE_KERNEL_H_
#define MESHDMA_KERNELS_MAKE_KERNEL_H_

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "meshdma/base/dtype.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/kernels/pallas_call.h"

namespace meshdma {

// An owned, zero-initialised, row-major host array: what ops return.
class HostArray {
 public:
  HostArray() = default;
  HostArray(DType dtype, std::vector<int64_t> shape);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t num_elements() const;
  // A view of the storage (valid while this array lives and is not resized).
  ArrayRef ref() const;
  operator ArrayRef() const { return ref(); }  // NOLINT: view conversion.
  template <typename T>
  T* data() {
    return reinterpret_cast<T*>(storage_.data());
  }
  template <typename T>
  const T* data() const {
    return reinterpret_cast<const T*>(storage_.data());
  }
  // The elements as a vector of T (T must be the dtype's element type).
  template <typename T>
  std::vector<T> ToVector() const {
    return std::vector<T>(data<T>(), data<T>() + num_elements());
  }

 private:
  DType dtype_ = DType::kF32;
  std::vector<int64_t> shape_;
  std::vector<std::byte> storage_;
};

// The shape of an array as a vector (for out-shape functions).
std::vector<int64_t> ShapeOf(const ArrayRef& a);

using KernelFn = std::function<absl::Status(std::span<const ArrayRef> inputs,
                                            std::span<const ArrayRef> outputs)>;
using OutShapeFn = std::function<absl::StatusOr<std::vector<ShapeDtype>>(
    std::span<const ArrayRef> inputs)>;

// An out-shape function: one output like input `i` (the seed's
// `lambda x, y: [(x.shape, x.dtype)]`).
OutShapeFn SameAsInput(int i = 0);

class KernelOp {
 public:
  KernelOp() = default;
  KernelOp(std::string name, int num_inputs, KernelFn kernel,
           OutShapeFn out_shape)
      : name_(std::move(name)),
        num_inputs_(num_inputs),
        kernel_(std::move(kernel)),
        out_shape_(std::move(out_shape)) {}

  absl::StatusOr<std::vector<HostArray>> operator()(
      std::span<const ArrayRef> inputs) const;
  absl::StatusOr<std::vector<HostArray>> operator()(
      std::initializer_list<ArrayRef> inputs) const {
    return (*this)(std::span<const ArrayRef>(inputs.begin(), inputs.size()));
  }
  const std::string& name() const { return name_; }
  int num_inputs() const { return num_inputs_; }  // -1: any number.

 private:
  std::string name_;
  int num_inputs_ = -1;
  KernelFn kernel_;
  OutShapeFn out_shape_;
};

// Any callable `(inputs, outputs) -> Status` (a `Kernel`, an op wrapper).
KernelOp make_kernel(KernelFn kernel, OutShapeFn out_shape,
                     std::string name = "kernel", int num_inputs = -1);
// A `Kernel` value: named after `params.name`; its arity is the number of
// in_specs when they are given.
KernelOp make_kernel(const Kernel& kernel, OutShapeFn out_shape);

}  // namespace meshdma

#endif  // MESHDMA_KERNELS_MAKE_KERNEL_H_
