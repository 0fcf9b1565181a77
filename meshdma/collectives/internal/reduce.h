// Typed element-wise reductions used by the reducing collectives. 16-bit
// floats are widened to f32 (`Acc<T>`), combined there, and rounded once when
// stored; other types combine in their own type.
#ifndef MESHDMA_COLLECTIVES_INTERNAL_REDUCE_H_
#define MESHDMA_COLLECTIVES_INTERNAL_REDUCE_H_

#include <emmintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "meshdma/base/dtype.h"
#include "meshdma/collectives/internal/common.h"
#include "meshdma/collectives/options.h"

namespace meshdma::collectives_internal {

template <typename T>
struct AccumulatorOf {
  using type = T;
};
template <>
struct AccumulatorOf<Half> {
  using type = float;
};
template <>
struct AccumulatorOf<BFloat16> {
  using type = float;
};
template <typename T>
using Acc = typename AccumulatorOf<T>::type;

template <typename To, typename From>
inline To Cast(From x) {
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else {
    return static_cast<To>(x);
  }
}

// The binary operator of `op` (kMean combines as a sum).
template <ReduceOp op, typename A>
inline A Combine(A a, A b) {
  if constexpr (op == ReduceOp::kMax) {
    return a > b ? a : b;
  } else if constexpr (op == ReduceOp::kMin) {
    return a < b ? a : b;
  } else {
    return a + b;
  }
}

// out[i] = a[i] (op) b[i], combined in `A`, then divided by `divisor` when it
// is > 1 (the last step of a mean). `out` may alias `a` or `b`.
template <ReduceOp op, typename A, typename X, typename Y, typename O>
inline void CombineArrays(const X* a, const Y* b, O* out, int64_t n,
                          int divisor) {
  if (divisor > 1) {
    const A div = static_cast<A>(divisor);
    for (int64_t i = 0; i < n; ++i) {
      out[i] = Cast<O>(
          static_cast<A>(Combine<op, A>(Cast<A>(a[i]), Cast<A>(b[i])) / div));
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      out[i] = Cast<O>(Combine<op, A>(Cast<A>(a[i]), Cast<A>(b[i])));
    }
  }
}

// Runtime dispatch over `op` for `CombineArrays`.
template <typename A, typename X, typename Y, typename O>
inline void CombineArrays(ReduceOp op, const X* a, const Y* b, O* out,
                          int64_t n, int divisor) {
  switch (op) {
    case ReduceOp::kSum:
      return CombineArrays<ReduceOp::kSum, A>(a, b, out, n, 1);
    case ReduceOp::kMean:
      return CombineArrays<ReduceOp::kMean, A>(a, b, out, n, divisor);
    case ReduceOp::kMax:
      return CombineArrays<ReduceOp::kMax, A>(a, b, out, n, 1);
    case ReduceOp::kMin:
      return CombineArrays<ReduceOp::kMin, A>(a, b, out, n, 1);
  }
}

template <typename To, typename From>
inline void ConvertArray(const From* in, To* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Cast<To>(in[i]);
}

// Copies `n` elements of `src` to `dst` with non-temporal (streaming)
// stores where `dst` is 16-byte aligned: the lines are not read first and
// bypass the caches, which pays off for outputs larger than the caches.
template <typename T>
inline void StreamStore(const T* src, T* dst, int64_t n) {
  const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
  const auto* s = reinterpret_cast<const char*>(src);
  auto* d = reinterpret_cast<char*>(dst);
  int64_t head = (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16;
  if (head > bytes) head = bytes;
  std::memcpy(d, s, head);
  int64_t i = head;
  for (; i + 16 <= bytes; i += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
  }
  std::memcpy(d + i, s + i, bytes - i);
}

// outs[k] = sources[0] (op) sources[1] (op) ... in that order, for each of
// the `num_outs` outputs, in blocks that stay in L1; divided by the number of
// sources for kMean. An output may alias a source (the same elements): each
// block is read whole before it is stored.
template <ReduceOp op, typename T>
inline void ReduceMany(const T* const* sources, int num_sources, T* const* outs,
                       int num_outs, int64_t n, bool stream = false) {
  using A = Acc<T>;
  constexpr int64_t kBlock = 2048;
  if (num_sources == 2 && !stream) {
    // Two sources: one pass per block straight into the first output (each
    // element is read before it is stored, so aliasing is safe), which the
    // other outputs copy while it is in L1. The accumulator's extra pass
    // through L1 made out-of-place all-reduces of 1-8 MiB over 2 processes
    // 1.2-1.6x slower (`mpirun -np 2 meshdma-bench --collective all_reduce
    // -b 1M -e 8M -f 2`).
    for (int64_t base = 0; base < n; base += kBlock) {
      const int64_t m = n - base < kBlock ? n - base : kBlock;
      T* first = outs[0] + base;
      CombineArrays<op, A>(sources[0] + base, sources[1] + base, first, m,
                           op == ReduceOp::kMean ? 2 : 1);
      for (int k = 1; k < num_outs; ++k) {
        std::memcpy(outs[k] + base, first, m * sizeof(T));
      }
    }
    return;
  }
  A acc[kBlock];  // Distinct from every source and output: vectorizes.
  for (int64_t base = 0; base < n; base += kBlock) {
    const int64_t m = n - base < kBlock ? n - base : kBlock;
    const T* s0 = sources[0] + base;
    if (num_sources >= 2) {
      const T* s1 = sources[1] + base;
      for (int64_t i = 0; i < m; ++i) {
        acc[i] = Combine<op, A>(Cast<A>(s0[i]), Cast<A>(s1[i]));
      }
    } else {
      for (int64_t i = 0; i < m; ++i) acc[i] = Cast<A>(s0[i]);
    }
    for (int j = 2; j < num_sources; ++j) {
      const T* s = sources[j] + base;
      for (int64_t i = 0; i < m; ++i) {
        acc[i] = Combine<op, A>(acc[i], Cast<A>(s[i]));
      }
    }
    if constexpr (op == ReduceOp::kMean) {
      const A div = static_cast<A>(num_sources);
      for (int64_t i = 0; i < m; ++i) acc[i] = static_cast<A>(acc[i] / div);
    }
    for (int k = 0; k < num_outs; ++k) {
      T* o = outs[k] + base;
      if constexpr (std::is_same_v<A, T>) {
        if (stream) {
          StreamStore(acc, o, m);
        } else {
          std::memcpy(o, acc, m * sizeof(T));
        }
      } else {
        for (int64_t i = 0; i < m; ++i) o[i] = Cast<T>(acc[i]);
      }
    }
  }
  if (stream) _mm_sfence();  // Streaming stores are not ordered otherwise.
}

template <typename T>
inline void ReduceMany(ReduceOp op, const T* const* sources, int num_sources,
                       T* const* outs, int num_outs, int64_t n,
                       bool stream = false) {
  switch (op) {
    case ReduceOp::kSum:
      return ReduceMany<ReduceOp::kSum>(sources, num_sources, outs, num_outs, n,
                                        stream);
    case ReduceOp::kMean:
      return ReduceMany<ReduceOp::kMean>(sources, num_sources, outs, num_outs,
                                         n, stream);
    case ReduceOp::kMax:
      return ReduceMany<ReduceOp::kMax>(sources, num_sources, outs, num_outs, n,
                                        stream);
    case ReduceOp::kMin:
      return ReduceMany<ReduceOp::kMin>(sources, num_sources, outs, num_outs, n,
                                        stream);
  }
}

template <typename T>
inline void ReduceMany(ReduceOp op, const T* const* sources, int num_sources,
                       T* out, int64_t n) {
  ReduceMany<T>(op, sources, num_sources, &out, 1, n);
}

// Calls `f(T{})` with the C++ type of a reducible `dtype`; returns false for
// types that cannot be reduced (u8).
template <typename F>
inline bool DispatchReducible(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kI32:
      f(int32_t{});
      return true;
    case DType::kI64:
      f(int64_t{});
      return true;
    case DType::kF16:
      f(Half{});
      return true;
    case DType::kBF16:
      f(BFloat16{});
      return true;
    case DType::kF32:
      f(float{});
      return true;
    case DType::kF64:
      f(double{});
      return true;
    case DType::kU8:
      return false;
  }
  return false;
}

// `run(T{})`, T the C++ type of `input`'s dtype, for a collective `name` on
// `g` that reduces `input`; InvalidArgument naming them, and no call, where
// the dtype cannot be reduced.
template <typename Run>
absl::Status RunReducible(absl::string_view name, const Group& g,
                          const ArrayRef& input, Run&& run) {
  absl::Status status;
  if (DispatchReducible(input.dtype(),
                        [&](auto zero) { status = run(zero); })) {
    return status;
  }
  return CollectiveError(
      name, g,
      absl::StrCat("cannot reduce ", DTypeName(input.dtype()), " (input ",
                   input.ToString(),
                   "); reductions take f32, f64, bf16, f16, i32 or i64"));
}

}  // namespace meshdma::collectives_internal

#endif  // MESHDMA_COLLECTIVES_INTERNAL_REDUCE_H_
