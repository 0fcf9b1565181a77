#include "meshdma/kernels/make_kernel.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "meshdma/base/status_macros.h"

namespace meshdma {

HostArray::HostArray(DType dtype, std::vector<int64_t> shape)
    : dtype_(dtype), shape_(std::move(shape)) {
  storage_.assign(static_cast<size_t>(num_elements()) * DTypeSize(dtype_),
                  std::byte{0});
}

int64_t HostArray::num_elements() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

ArrayRef HostArray::ref() const {
  return *ArrayRef::FromPointer(const_cast<std::byte*>(storage_.data()), dtype_,
                                shape_);
}

std::vector<int64_t> ShapeOf(const ArrayRef& a) {
  return {a.shape().begin(), a.shape().end()};
}

OutShapeFn SameAsInput(int i) {
  return [i](std::span<const ArrayRef> in)
             -> absl::StatusOr<std::vector<ShapeDtype>> {
    if (i < 0 || i >= static_cast<int>(in.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("out shape: the output is shaped like input ", i,
                       ", but there are ", in.size(), " inputs"));
    }
    return std::vector<ShapeDtype>{{in[i].dtype(), ShapeOf(in[i])}};
  };
}

absl::StatusOr<std::vector<HostArray>> KernelOp::operator()(
    std::span<const ArrayRef> inputs) const {
  if (!kernel_ || !out_shape_) {
    return absl::FailedPreconditionError(
        absl::StrCat("op '", name_, "' has no kernel or out-shape function"));
  }
  if (num_inputs_ >= 0 && static_cast<int>(inputs.size()) != num_inputs_) {
    return absl::InvalidArgumentError(absl::StrCat("op '", name_, "' takes ",
                                                   num_inputs_, " inputs, got ",
                                                   inputs.size()));
  }
  MESHDMA_ASSIGN_OR_RETURN(std::vector<ShapeDtype> shapes, out_shape_(inputs));
  std::vector<HostArray> outs;
  std::vector<ArrayRef> views;
  outs.reserve(shapes.size());
  for (ShapeDtype& s : shapes) {
    for (int64_t dim : s.shape) {
      if (dim < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "op '", name_, "': out shape ", DTypeName(s.dtype), "[",
            absl::StrJoin(s.shape, ","), "] has a negative dimension"));
      }
    }
    outs.emplace_back(s.dtype, std::move(s.shape));
    views.push_back(outs.back().ref());
  }
  MESHDMA_RETURN_IF_ERROR(kernel_(inputs, views));
  return outs;
}

KernelOp make_kernel(KernelFn kernel, OutShapeFn out_shape, std::string name,
                     int num_inputs) {
  return KernelOp(std::move(name), num_inputs, std::move(kernel),
                  std::move(out_shape));
}

KernelOp make_kernel(const Kernel& kernel, OutShapeFn out_shape) {
  const int arity = kernel.params.in_specs.empty()
                        ? -1
                        : static_cast<int>(kernel.params.in_specs.size());
  return KernelOp(kernel.params.name, arity, kernel, std::move(out_shape));
}

}  // namespace meshdma
