// `Block<T>`: a small owned array value (rank 0 to 4), the value a body loads
// from a ref, computes with and stores back (Pallas's `x = x_ref[...]`).
//
// Math, with NumPy semantics:
// - elementwise `+ - * /` with another block or a scalar, `Maximum`,
//   `Minimum`, `Exp`, `Map(fn)`; operands of different shapes broadcast
//   (equal rank; a dimension of 1 stretches). Mismatched shapes are a
//   programming error reported by `ok()`/`status()` on the result: the result
//   is empty and carries the message (so expressions chain without checks;
//   `Ref::Store` of an empty block fails with that message).
// - reductions `Sum`, `Max`, `Min` along one axis keep that axis with size 1
//   (`keepdims=True`), so `x - x.Max(1)` broadcasts back.
// - `BroadcastTo`, `Reshape`, `Transpose` (rank 2), `Iota`, `Where`.
// - `Dot(a, b)`: rank-2 matrix product, f32 through the BLAS
//   (kernels/blas.h), other types by a loop.
#ifndef MESHDMA_KERNELS_BLOCK_H_
#define MESHDMA_KERNELS_BLOCK_H_

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace meshdma {

inline constexpr int kMaxBlockRank = 4;

template <typename T>
class Block {
 public:
  Block() = default;
  // Zero-filled block of `shape`.
  explicit Block(std::span<const int64_t> shape);
  Block(std::initializer_list<int64_t> shape)
      : Block(std::span<const int64_t>(shape.begin(), shape.size())) {}
  static Block Full(std::span<const int64_t> shape, T value);
  static Block Full(std::initializer_list<int64_t> shape, T value) {
    return Full(std::span<const int64_t>(shape.begin(), shape.size()), value);
  }
  // Each element is its index along `dim` (`lax.broadcasted_iota`).
  static Block Iota(std::span<const int64_t> shape, int dim);
  static Block Iota(std::initializer_list<int64_t> shape, int dim) {
    return Iota(std::span<const int64_t>(shape.begin(), shape.size()), dim);
  }
  // A block carrying an error (see the header comment).
  static Block Error(absl::Status status);

  bool ok() const { return status_.ok(); }
  const absl::Status& status() const { return status_; }
  int rank() const { return rank_; }
  std::span<const int64_t> shape() const {
    return {shape_.data(), size_t(rank_)};
  }
  int64_t dim(int d) const { return shape_[d]; }
  int64_t size() const { return static_cast<int64_t>(data_.size()); }
  T* data() { return data_.data(); }
  const T* data() const { return data_.data(); }
  T& operator[](int64_t flat) { return data_[flat]; }
  T operator[](int64_t flat) const { return data_[flat]; }
  // Element at row-major indices, unchecked.
  template <typename... I>
  T& operator()(I... index) {
    return data_[Flat({static_cast<int64_t>(index)...})];
  }
  template <typename... I>
  T operator()(I... index) const {
    return data_[Flat({static_cast<int64_t>(index)...})];
  }

  // Elementwise with broadcasting.
  Block operator+(const Block& o) const;
  Block operator-(const Block& o) const;
  Block operator*(const Block& o) const;
  Block operator/(const Block& o) const;
  Block operator+(T s) const;
  Block operator-(T s) const;
  Block operator*(T s) const;
  Block operator/(T s) const;
  Block operator-() const;
  template <typename Fn>
  Block Map(Fn&& fn) const {
    Block r = *this;
    for (T& v : r.data_) v = fn(v);
    return r;
  }
  template <typename Fn>
  static Block ZipWith(const Block& a, const Block& b, Fn&& fn);
  Block Exp() const;

  // Reductions along `axis`, keeping it with size 1.
  Block Sum(int axis) const;
  Block Max(int axis) const;
  Block Min(int axis) const;

  Block BroadcastTo(std::span<const int64_t> shape) const;
  Block BroadcastTo(std::initializer_list<int64_t> shape) const {
    return BroadcastTo(std::span<const int64_t>(shape.begin(), shape.size()));
  }
  Block Reshape(std::span<const int64_t> shape) const;
  Block Reshape(std::initializer_list<int64_t> shape) const {
    return Reshape(std::span<const int64_t>(shape.begin(), shape.size()));
  }
  Block Transpose() const;  // Rank 2.

  std::string ShapeString() const;

 private:
  int64_t Flat(std::initializer_list<int64_t> idx) const {
    int64_t f = 0;
    int d = 0;
    for (int64_t i : idx) f = f * shape_[d++] + i;
    return f;
  }
  template <typename Fn>
  Block Reduce(int axis, T init, Fn&& fn, const char* what) const;

  int rank_ = 0;
  std::array<int64_t, kMaxBlockRank> shape_{};
  std::vector<T> data_;
  absl::Status status_;
};

template <typename T>
Block<T> Maximum(const Block<T>& a, const Block<T>& b);
template <typename T>
Block<T> Minimum(const Block<T>& a, const Block<T>& b);
// `mask ? a : b` elementwise (mask nonzero = true), with broadcasting.
template <typename T, typename M>
Block<T> Where(const Block<M>& mask, const Block<T>& a, const Block<T>& b);
// Rank-2 product: [m, k] x [k, n] -> [m, n] (`jnp.dot`); `transpose_b` uses
// b as [n, k] (`q @ k.T` without materialising the transpose).
template <typename T>
Block<T> Dot(const Block<T>& a, const Block<T>& b, bool transpose_b = false);

}  // namespace meshdma

#include "meshdma/kernels/internal/block_impl.h"  // IWYU pragma: export

#endif  // MESHDMA_KERNELS_BLOCK_H_
