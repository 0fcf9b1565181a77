// `Ref<T>`: a typed view of a kernel operand (Pallas's `x_ref`). It wraps an
// `ArrayRef` (dma/array_ref.h) whose dtype is `T`, keeps its shape and
// strides, and gives the body element access, slices and whole-block
// load/store into a `Block` value (kernels/block.h).
//
// Element access `ref(i, j)` is unchecked (it is the inner loop of a body);
// `at`, `Slice` and `Store` check their arguments and return errors that name
// the shape. Half and BFloat16 refs load into `Block<float>` and store from
// it (arithmetic happens in f32).
#ifndef MESHDMA_KERNELS_REF_H_
#define MESHDMA_KERNELS_REF_H_

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "meshdma/base/dtype.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/kernels/block.h"

namespace meshdma {

// The element type blocks of `T` compute in: float for f16/bf16, else `T`.
template <typename T>
struct ComputeTypeOf {
  using type = T;
};
template <>
struct ComputeTypeOf<Half> {
  using type = float;
};
template <>
struct ComputeTypeOf<BFloat16> {
  using type = float;
};
template <typename T>
using ComputeType = typename ComputeTypeOf<T>::type;

template <typename T>
class Ref {
 public:
  using Compute = ComputeType<T>;

  Ref() = default;
  // A typed view of `array`; an error when its dtype is not `T`.
  static absl::StatusOr<Ref<T>> Of(const ArrayRef& array) {
    if (array.dtype() != kDTypeOf<T>) {
      return absl::InvalidArgumentError(
          absl::StrCat("Ref<", DTypeName(kDTypeOf<T>), "> over ",
                       array.ToString(), ": element type mismatch"));
    }
    return Ref<T>(array);
  }

  const ArrayRef& array() const { return array_; }
  int rank() const { return array_.rank(); }
  std::span<const int64_t> shape() const { return array_.shape(); }
  std::span<const int64_t> strides() const { return array_.strides(); }
  int64_t dim(int d) const { return array_.dim(d); }
  int64_t num_elements() const { return array_.num_elements(); }
  T* data() const { return array_.template data_as<T>(); }
  std::string ToString() const { return array_.ToString(); }

  // Element at the given indices (one per dimension), unchecked.
  template <typename... I>
  T& operator()(I... index) const {
    static_assert(sizeof...(I) <= kMaxRank);
    const int64_t idx[] = {static_cast<int64_t>(index)...};
    int64_t off = 0;
    for (size_t d = 0; d < sizeof...(I); ++d) off += idx[d] * strides()[d];
    return data()[off];
  }

  // Element `index` of dimension 0, with that dimension dropped (`x_ref[i]`).
  absl::StatusOr<Ref<T>> at(int64_t index) const {
    auto a = array_.At(index);
    if (!a.ok()) return a.status();
    return Ref<T>(*a);
  }
  // Rows [start, start + size) of dimension `dim` (`pl.ds(start, size)`);
  // `start` may be computed at run time.
  absl::StatusOr<Ref<T>> Slice(int dim, int64_t start, int64_t size) const {
    auto a = array_.Slice(dim, start, size);
    if (!a.ok()) return a.status();
    return Ref<T>(*a);
  }

  // The whole view as a block (`x_ref[...]`).
  Block<Compute> Load() const;
  // The whole view, with elements at index >= `valid[d]` along any dimension
  // `d` replaced by `fill` and never read (the Triton `offsets < n` mask).
  Block<Compute> LoadMasked(std::span<const int64_t> valid, Compute fill) const;
  // Writes `block` over the whole view (`o_ref[...] = x`); its shape must
  // equal the view's.
  absl::Status Store(const Block<Compute>& block) const;
  // Writes only the elements with index < `valid[d]` in every dimension.
  absl::Status StoreMasked(const Block<Compute>& block,
                           std::span<const int64_t> valid) const;

 private:
  explicit Ref(const ArrayRef& array) : array_(array) {}
  ArrayRef array_;
};

}  // namespace meshdma

#include "meshdma/kernels/internal/ref_impl.h"  // IWYU pragma: export

#endif  // MESHDMA_KERNELS_REF_H_
