// The element-wise reductions under the reducing collectives
// (collectives/internal/reduce.h) against a naive loop: every op, integer,
// float and 16-bit float types, 1 to 4 sources and 1 to 3 outputs, lengths
// on and across block boundaries, and outputs that alias a source.
#include "meshdma/collectives/internal/reduce.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace meshdma::collectives_internal {
namespace {

// Source j, element i: small integers, so that every type holds them and
// every order of a sum gives the same bits; signs vary for max and min.
float Value(int j, int64_t i) {
  return static_cast<float>(((i * 7 + j * 13) % 23) - 11);
}

// The reduction of element i over `sources` sources, combined in the type's
// accumulator (its own type; f32 for 16-bit floats), as the type stores it.
template <typename T>
T Expected(ReduceOp op, int sources, int64_t i) {
  using A = Acc<T>;
  A acc = static_cast<A>(Value(0, i));
  for (int j = 1; j < sources; ++j) {
    const A v = static_cast<A>(Value(j, i));
    if (op == ReduceOp::kMax) {
      acc = acc > v ? acc : v;
    } else if (op == ReduceOp::kMin) {
      acc = acc < v ? acc : v;
    } else {
      acc += v;
    }
  }
  if (op == ReduceOp::kMean)
    acc = static_cast<A>(acc / static_cast<A>(sources));
  return static_cast<T>(acc);
}

template <typename T>
float AsFloat(T x) {
  return static_cast<float>(x);
}

// Runs ReduceMany for every op, source and output count and length; with
// `alias`, output 0 is source `alias - 1` (1: the first, 2: the second), or
// (3) output k is source k where both exist, as in an in-place all-reduce.
template <typename T>
void CheckReduceMany(int alias) {
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin}) {
    for (int num_sources = 1; num_sources <= 4; ++num_sources) {
      const int sources_needed = alias == 3 ? 2 : alias;
      if (num_sources < sources_needed) continue;
      for (int num_outs = 1; num_outs <= 3; ++num_outs) {
        for (int64_t n : {int64_t{1}, int64_t{2048}, int64_t{5001}}) {
          SCOPED_TRACE(testing::Message()
                       << "op " << static_cast<int>(op) << ", " << num_sources
                       << " sources, " << num_outs << " outputs, " << n
                       << " elements, alias " << alias);
          std::vector<std::vector<T>> sources(num_sources, std::vector<T>(n));
          for (int j = 0; j < num_sources; ++j) {
            for (int64_t i = 0; i < n; ++i) sources[j][i] = T(Value(j, i));
          }
          std::vector<std::vector<T>> outs(num_outs, std::vector<T>(n));
          std::vector<const T*> source_ptrs;
          for (const auto& s : sources) source_ptrs.push_back(s.data());
          std::vector<T*> out_ptrs;
          for (auto& o : outs) out_ptrs.push_back(o.data());
          if (alias == 3) {
            for (int k = 0; k < num_outs && k < num_sources; ++k) {
              out_ptrs[k] = sources[k].data();
            }
          } else if (alias > 0) {
            out_ptrs[0] = sources[alias - 1].data();
          }
          ReduceMany<T>(op, source_ptrs.data(), num_sources, out_ptrs.data(),
                        num_outs, n);
          for (int k = 0; k < num_outs; ++k) {
            for (int64_t i = 0; i < n; ++i) {
              ASSERT_EQ(AsFloat(out_ptrs[k][i]),
                        AsFloat(Expected<T>(op, num_sources, i)))
                  << "output " << k << ", element " << i;
            }
          }
        }
      }
    }
  }
}

TEST(ReduceTest, ManySourcesIntoManyOutputs) {
  CheckReduceMany<float>(0);
  CheckReduceMany<double>(0);
  CheckReduceMany<int32_t>(0);
  CheckReduceMany<int64_t>(0);
  CheckReduceMany<BFloat16>(0);
  CheckReduceMany<Half>(0);
}

TEST(ReduceTest, OutputAliasesASource) {
  for (int alias : {1, 2, 3}) {
    CheckReduceMany<float>(alias);
    CheckReduceMany<int32_t>(alias);
    CheckReduceMany<BFloat16>(alias);
  }
}

TEST(ReduceTest, StreamingStoresGiveTheSameValues) {
  const int64_t n = 5001;
  std::vector<float> a(n), b(n), out(n), copy(n);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = Value(0, i);
    b[i] = Value(1, i);
  }
  const float* sources[] = {a.data(), b.data()};
  float* outs[] = {out.data(), copy.data()};
  ReduceMany<float>(ReduceOp::kSum, sources, 2, outs, 2, n, /*stream=*/true);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(out[i], a[i] + b[i]) << i;
    ASSERT_EQ(copy[i], a[i] + b[i]) << i;
  }
}

}  // namespace
}  // namespace meshdma::collectives_internal
