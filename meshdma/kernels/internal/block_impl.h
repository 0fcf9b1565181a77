// Inline bodies of `Block<T>` (kernels/block.h).
#ifndef MESHDMA_KERNELS_INTERNAL_BLOCK_IMPL_H_
#define MESHDMA_KERNELS_INTERNAL_BLOCK_IMPL_H_

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "meshdma/kernels/blas.h"

namespace meshdma {

template <typename T>
Block<T>::Block(std::span<const int64_t> shape) {
  if (shape.size() > static_cast<size_t>(kMaxBlockRank)) {
    status_ = absl::InvalidArgumentError(absl::StrCat(
        "block of rank ", shape.size(), " (at most ", kMaxBlockRank, ")"));
    return;
  }
  rank_ = static_cast<int>(shape.size());
  int64_t n = 1;
  for (int d = 0; d < rank_; ++d) {
    shape_[d] = shape[d];
    n *= shape[d];
  }
  data_.assign(static_cast<size_t>(n), T{});
}

template <typename T>
Block<T> Block<T>::Full(std::span<const int64_t> shape, T value) {
  Block b(shape);
  std::fill(b.data_.begin(), b.data_.end(), value);
  return b;
}

template <typename T>
Block<T> Block<T>::Iota(std::span<const int64_t> shape, int dim) {
  Block b(shape);
  if (dim < 0 || dim >= b.rank_) {
    return Error(absl::InvalidArgumentError(absl::StrCat(
        "Iota along dim ", dim, " of a rank-", b.rank_, " block")));
  }
  int64_t inner = 1;
  for (int d = dim + 1; d < b.rank_; ++d) inner *= b.shape_[d];
  for (int64_t f = 0; f < b.size(); ++f) {
    b.data_[f] = static_cast<T>((f / inner) % b.shape_[dim]);
  }
  return b;
}

template <typename T>
Block<T> Block<T>::Error(absl::Status status) {
  Block b;
  b.status_ = std::move(status);
  return b;
}

template <typename T>
std::string Block<T>::ShapeString() const {
  return absl::StrCat("[", absl::StrJoin(shape(), ","), "]");
}

template <typename T>
template <typename Fn>
Block<T> Block<T>::ZipWith(const Block& a, const Block& b, Fn&& fn) {
  if (!a.ok()) return a;
  if (!b.ok()) return b;
  if (a.rank_ == b.rank_ &&
      std::equal(a.shape().begin(), a.shape().end(), b.shape().begin())) {
    Block r = a;
    for (int64_t i = 0; i < r.size(); ++i)
      r.data_[i] = fn(a.data_[i], b.data_[i]);
    return r;
  }
  if (a.rank_ != b.rank_) {
    return Error(absl::InvalidArgumentError(
        absl::StrCat("elementwise op on blocks ", a.ShapeString(), " and ",
                     b.ShapeString(), ": ranks differ")));
  }
  std::array<int64_t, kMaxBlockRank> out{};
  for (int d = 0; d < a.rank_; ++d) {
    if (a.shape_[d] != b.shape_[d] && a.shape_[d] != 1 && b.shape_[d] != 1) {
      return Error(absl::InvalidArgumentError(absl::StrCat(
          "elementwise op on blocks ", a.ShapeString(), " and ",
          b.ShapeString(), ": dimension ", d, " does not broadcast")));
    }
    out[d] = std::max(a.shape_[d], b.shape_[d]);
  }
  Block r(std::span<const int64_t>(out.data(), a.rank_));
  // Strides of a and b in the output index space (0 where broadcast).
  std::array<int64_t, kMaxBlockRank> sa{}, sb{};
  int64_t ma = 1, mb = 1;
  for (int d = a.rank_ - 1; d >= 0; --d) {
    sa[d] = a.shape_[d] == 1 ? 0 : ma;
    sb[d] = b.shape_[d] == 1 ? 0 : mb;
    ma *= a.shape_[d];
    mb *= b.shape_[d];
  }
  std::array<int64_t, kMaxBlockRank> idx{};
  for (int64_t f = 0; f < r.size(); ++f) {
    int64_t oa = 0, ob = 0;
    for (int d = 0; d < r.rank_; ++d) {
      oa += idx[d] * sa[d];
      ob += idx[d] * sb[d];
    }
    r.data_[f] = fn(a.data_[oa], b.data_[ob]);
    for (int d = r.rank_ - 1; d >= 0; --d) {
      if (++idx[d] < r.shape_[d]) break;
      idx[d] = 0;
    }
  }
  return r;
}

#define MESHDMA_BLOCK_BINOP_(op)                               \
  template <typename T>                                        \
  Block<T> Block<T>::operator op(const Block& o) const {       \
    return ZipWith(*this, o, [](T x, T y) { return x op y; }); \
  }                                                            \
  template <typename T>                                        \
  Block<T> Block<T>::operator op(T s) const {                  \
    if (!ok()) return *this;                                   \
    Block r = *this;                                           \
    for (T & v : r.data_) v = v op s;                          \
    return r;                                                  \
  }
MESHDMA_BLOCK_BINOP_(+)
MESHDMA_BLOCK_BINOP_(-)
MESHDMA_BLOCK_BINOP_(*)
MESHDMA_BLOCK_BINOP_(/)
#undef MESHDMA_BLOCK_BINOP_

template <typename T>
Block<T> Block<T>::operator-() const {
  return Map([](T v) { return -v; });
}

template <typename T>
Block<T> Block<T>::Exp() const {
  return Map([](T v) { return static_cast<T>(std::exp(v)); });
}

template <typename T>
template <typename Fn>
Block<T> Block<T>::Reduce(int axis, T init, Fn&& fn, const char* what) const {
  if (!ok()) return *this;
  if (axis < 0 || axis >= rank_) {
    return Error(absl::InvalidArgumentError(
        absl::StrCat(what, " along axis ", axis, " of block ", ShapeString())));
  }
  std::array<int64_t, kMaxBlockRank> out = shape_;
  out[axis] = 1;
  Block r = Full(std::span<const int64_t>(out.data(), rank_), init);
  int64_t inner = 1;
  for (int d = axis + 1; d < rank_; ++d) inner *= shape_[d];
  const int64_t n = shape_[axis];
  const int64_t outer = n == 0 ? 0 : size() / (n * inner);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t k = 0; k < n; ++k) {
      const T* src = data_.data() + (o * n + k) * inner;
      T* dst = r.data_.data() + o * inner;
      for (int64_t i = 0; i < inner; ++i) dst[i] = fn(dst[i], src[i]);
    }
  }
  return r;
}

template <typename T>
Block<T> Block<T>::Sum(int axis) const {
  return Reduce(
      axis, T{0}, [](T a, T b) { return a + b; }, "Sum");
}
template <typename T>
Block<T> Block<T>::Max(int axis) const {
  return Reduce(
      axis, std::numeric_limits<T>::lowest(),
      [](T a, T b) { return a > b ? a : b; }, "Max");
}
template <typename T>
Block<T> Block<T>::Min(int axis) const {
  return Reduce(
      axis, std::numeric_limits<T>::max(),
      [](T a, T b) { return a < b ? a : b; }, "Min");
}

template <typename T>
Block<T> Block<T>::BroadcastTo(std::span<const int64_t> shape) const {
  if (!ok()) return *this;
  Block target(shape);
  if (static_cast<int>(shape.size()) != rank_) {
    return Error(absl::InvalidArgumentError(
        absl::StrCat("BroadcastTo [", absl::StrJoin(shape, ","), "] of block ",
                     ShapeString(), ": ranks differ")));
  }
  return ZipWith(target, *this, [](T, T y) { return y; });
}

template <typename T>
Block<T> Block<T>::Reshape(std::span<const int64_t> shape) const {
  if (!ok()) return *this;
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  if (n != size() || shape.size() > static_cast<size_t>(kMaxBlockRank)) {
    return Error(absl::InvalidArgumentError(
        absl::StrCat("Reshape of block ", ShapeString(), " to [",
                     absl::StrJoin(shape, ","), "]")));
  }
  Block r = *this;
  r.rank_ = static_cast<int>(shape.size());
  for (int d = 0; d < r.rank_; ++d) r.shape_[d] = shape[d];
  return r;
}

template <typename T>
Block<T> Block<T>::Transpose() const {
  if (!ok()) return *this;
  if (rank_ != 2) {
    return Error(absl::InvalidArgumentError(
        absl::StrCat("Transpose of block ", ShapeString(), ": not rank 2")));
  }
  Block r({shape_[1], shape_[0]});
  for (int64_t i = 0; i < shape_[0]; ++i)
    for (int64_t j = 0; j < shape_[1]; ++j)
      r.data_[j * shape_[0] + i] = data_[i * shape_[1] + j];
  return r;
}

template <typename T>
Block<T> Maximum(const Block<T>& a, const Block<T>& b) {
  return Block<T>::ZipWith(a, b, [](T x, T y) { return x > y ? x : y; });
}
template <typename T>
Block<T> Minimum(const Block<T>& a, const Block<T>& b) {
  return Block<T>::ZipWith(a, b, [](T x, T y) { return x < y ? x : y; });
}

template <typename T, typename M>
Block<T> Where(const Block<M>& mask, const Block<T>& a, const Block<T>& b) {
  if (!mask.ok()) return Block<T>::Error(mask.status());
  Block<T> m(mask.shape());
  for (int64_t i = 0; i < m.size(); ++i) m[i] = mask[i] != M{0} ? T{1} : T{0};
  // Broadcast the three operands to one shape, then select.
  Block<T> ab = Block<T>::ZipWith(a, b, [](T x, T) { return x; });
  Block<T> shape_ab = Block<T>::ZipWith(ab, m, [](T x, T) { return x; });
  if (!shape_ab.ok()) return shape_ab;
  Block<T> ma = a.BroadcastTo(shape_ab.shape());
  Block<T> mb = b.BroadcastTo(shape_ab.shape());
  Block<T> mm = m.BroadcastTo(shape_ab.shape());
  for (int64_t i = 0; i < ma.size(); ++i) ma[i] = mm[i] != T{0} ? ma[i] : mb[i];
  return ma;
}

template <typename T>
Block<T> Dot(const Block<T>& a, const Block<T>& b, bool transpose_b) {
  if (!a.ok()) return a;
  if (!b.ok()) return b;
  const int64_t bk = transpose_b ? b.dim(1) : b.dim(0);
  if (a.rank() != 2 || b.rank() != 2 || a.dim(1) != bk) {
    return Block<T>::Error(absl::InvalidArgumentError(absl::StrCat(
        "Dot of blocks ", a.ShapeString(), " and ", b.ShapeString(),
        transpose_b ? " (b transposed)" : "", ": shapes do not contract")));
  }
  const int64_t m = a.dim(0), k = a.dim(1);
  const int64_t n = transpose_b ? b.dim(0) : b.dim(1);
  Block<T> c({m, n});
  if constexpr (std::is_same_v<T, float>) {
    Gemm(false, transpose_b, m, n, k, 1.0f, a.data(), k, b.data(), b.dim(1),
         0.0f, c.data(), n);
  } else {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) {
        const T av = a.data()[i * k + p];
        for (int64_t j = 0; j < n; ++j)
          c.data()[i * n + j] +=
              av * (transpose_b ? b.data()[j * k + p] : b.data()[p * n + j]);
      }
  }
  return c;
}

}  // namespace meshdma

#endif  // MESHDMA_KERNELS_INTERNAL_BLOCK_IMPL_H_
