// Inline bodies of `Ref<T>`'s block load/store (kernels/ref.h).
#ifndef MESHDMA_KERNELS_INTERNAL_REF_IMPL_H_
#define MESHDMA_KERNELS_INTERNAL_REF_IMPL_H_

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "meshdma/dma/check.h"

namespace meshdma {
namespace kernels_internal {

// `what` ("Ref load"), with the grid point of the running body when there is
// one ("Ref load at grid point (1, 0)"), for checked mode's race reports.
std::string AccessSite(absl::string_view what);

template <typename T, typename C>
inline C ToCompute(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return static_cast<float>(v);
  } else {
    return v;
  }
}
template <typename T, typename C>
inline T FromCompute(C v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// Calls `fn(ref_offset, flat_index, in_valid)` for every element of a view of
// `shape` with `strides`, row-major; `in_valid` is false when some index is
// >= `valid[d]` (when `valid` is empty every element is valid).
template <typename Fn>
void ForEachElement(std::span<const int64_t> shape,
                    std::span<const int64_t> strides,
                    std::span<const int64_t> valid, Fn&& fn) {
  const int rank = static_cast<int>(shape.size());
  int64_t total = 1;
  for (int64_t s : shape) total *= s;
  if (total == 0) return;
  if (rank == 0) {
    fn(0, 0, true);
    return;
  }
  std::array<int64_t, kMaxRank> idx{};
  const int last = rank - 1;
  const int64_t n_last = shape[last];
  const int64_t s_last = strides[last];
  for (int64_t flat = 0; flat < total; flat += n_last) {
    int64_t off = 0;
    bool outer_valid = true;
    for (int d = 0; d < last; ++d) {
      off += idx[d] * strides[d];
      if (!valid.empty() && idx[d] >= valid[d]) outer_valid = false;
    }
    const int64_t lim = valid.empty() ? n_last : std::min(n_last, valid[last]);
    for (int64_t i = 0; i < n_last; ++i) {
      fn(off + i * s_last, flat + i, outer_valid && i < lim);
    }
    for (int d = last - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace kernels_internal

template <typename T>
Block<typename Ref<T>::Compute> Ref<T>::Load() const {
  if (RaceCheckingEnabled()) {
    AnnotateRead(array_, kernels_internal::AccessSite("Ref load"));
  }
  Block<Compute> b(shape());
  const T* p = data();
  Compute* out = b.data();
  if (array_.is_contiguous()) {
    const int64_t n = num_elements();
    for (int64_t i = 0; i < n; ++i)
      out[i] = kernels_internal::ToCompute<T, Compute>(p[i]);
    return b;
  }
  kernels_internal::ForEachElement(
      shape(), strides(), {}, [&](int64_t off, int64_t flat, bool) {
        out[flat] = kernels_internal::ToCompute<T, Compute>(p[off]);
      });
  return b;
}

template <typename T>
Block<typename Ref<T>::Compute> Ref<T>::LoadMasked(
    std::span<const int64_t> valid, Compute fill) const {
  if (RaceCheckingEnabled()) {
    AnnotateRead(array_, kernels_internal::AccessSite("Ref load"));
  }
  Block<Compute> b(shape());
  const T* p = data();
  Compute* out = b.data();
  const std::span<const int64_t> v = valid.size() == static_cast<size_t>(rank())
                                         ? valid
                                         : std::span<const int64_t>{};
  kernels_internal::ForEachElement(
      shape(), strides(), v, [&](int64_t off, int64_t flat, bool ok) {
        out[flat] = ok ? kernels_internal::ToCompute<T, Compute>(p[off]) : fill;
      });
  return b;
}

template <typename T>
absl::Status Ref<T>::Store(const Block<Compute>& block) const {
  return StoreMasked(block, {});
}

template <typename T>
absl::Status Ref<T>::StoreMasked(const Block<Compute>& block,
                                 std::span<const int64_t> valid) const {
  if (!std::equal(block.shape().begin(), block.shape().end(), shape().begin(),
                  shape().end())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store of a block of shape [", absl::StrJoin(block.shape(), ","),
        "] into ref ", ToString(), ": shapes differ"));
  }
  if (!valid.empty() && valid.size() != static_cast<size_t>(rank())) {
    return absl::InvalidArgumentError(
        absl::StrCat("masked store into ref ", ToString(), ": ", valid.size(),
                     " valid extents for rank ", rank()));
  }
  if (RaceCheckingEnabled()) {
    AnnotateWrite(array_, kernels_internal::AccessSite("Ref store"));
  }
  T* p = data();
  const Compute* in = block.data();
  if (valid.empty() && array_.is_contiguous()) {
    const int64_t n = num_elements();
    for (int64_t i = 0; i < n; ++i)
      p[i] = kernels_internal::FromCompute<T, Compute>(in[i]);
    return absl::OkStatus();
  }
  kernels_internal::ForEachElement(
      shape(), strides(), valid, [&](int64_t off, int64_t flat, bool ok) {
        if (ok) p[off] = kernels_internal::FromCompute<T, Compute>(in[flat]);
      });
  return absl::OkStatus();
}

}  // namespace meshdma

#endif  // MESHDMA_KERNELS_INTERNAL_REF_IMPL_H_
