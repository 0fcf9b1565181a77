// The op registry: kernels callable by name with attributes, for callers
// that pick an op at run time (a benchmark flag, a model config, a binding).
//
//   MESHDMA_ASSIGN_OR_RETURN(
//       std::vector<HostArray> outs,
//       CallOp("matmul", {a, b}, {{"activation", "relu"}}));
//
// Contract:
//   1. The registry starts with the built-in ops add_vectors, iota, matmul,
//      softmax, flash_attention, flash_attention_backward and
//      paged_attention; `RegisterOp` adds more. It is safe to use from every
//      device at once.
//   2. `CallOp` checks the op name, the number of inputs and the attribute
//      names, then builds the op (which checks the attribute types) and
//      calls it as `make_kernel`'s ops are called (kernels/make_kernel.h).
//      Errors name the op, e.g. "op 'matmul' takes 2 inputs, got 3".
//   3. Each op's attributes are documented in its `OpDef::doc`
//      (`FindOp(name)->doc`).
#ifndef MESHDMA_KERNELS_OPS_REGISTRY_H_
#define MESHDMA_KERNELS_OPS_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/kernels/make_kernel.h"

namespace meshdma {

// Op attributes by name.
using AttrValue = std::variant<bool, int64_t, double, std::string>;
using OpAttrs = std::map<std::string, AttrValue, std::less<>>;

struct OpDef {
  std::string name;
  int num_inputs = -1;             // -1: any number.
  std::vector<std::string> attrs;  // Accepted attribute names.
  std::string doc;
  // Builds the op for the given (already name-checked) attributes.
  std::function<absl::StatusOr<KernelOp>(const OpAttrs&)> build;
};

// Adds an op; an error if the name is taken or the def is incomplete.
absl::Status RegisterOp(OpDef def);
// Names of the registered ops, sorted.
std::vector<std::string> RegisteredOps();
absl::StatusOr<OpDef> FindOp(absl::string_view name);

absl::StatusOr<std::vector<HostArray>> CallOp(absl::string_view name,
                                              std::span<const ArrayRef> inputs,
                                              const OpAttrs& attrs = {});
inline absl::StatusOr<std::vector<HostArray>> CallOp(
    absl::string_view name, std::initializer_list<ArrayRef> inputs,
    const OpAttrs& attrs = {}) {
  return CallOp(name, std::span<const ArrayRef>(inputs.begin(), inputs.size()),
                attrs);
}

// Typed attribute lookups for op builders: the default when absent, an
// error naming the op and attribute when the value has another type.
absl::StatusOr<int64_t> GetIntAttr(const OpAttrs& attrs, absl::string_view op,
                                   absl::string_view name, int64_t dflt);
absl::StatusOr<double> GetFloatAttr(const OpAttrs& attrs, absl::string_view op,
                                    absl::string_view name, double dflt);
absl::StatusOr<bool> GetBoolAttr(const OpAttrs& attrs, absl::string_view op,
                                 absl::string_view name, bool dflt);
absl::StatusOr<std::string> GetStringAttr(const OpAttrs& attrs,
                                          absl::string_view op,
                                          absl::string_view name,
                                          std::string dflt);

}  // namespace meshdma

#endif  // MESHDMA_KERNELS_OPS_REGISTRY_H_
