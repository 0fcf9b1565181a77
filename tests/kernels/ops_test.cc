// Compute kernels against naive references over many shapes, including
// sizes the block sizes do not divide.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/kernels/blas.h"
#include "meshdma/kernels/internal/vector_math.h"
#include "meshdma/kernels/ops/add_vectors.h"
#include "meshdma/kernels/ops/attention_reference.h"
#include "meshdma/kernels/ops/flash_attention.h"
#include "meshdma/kernels/ops/iota.h"
#include "meshdma/kernels/ops/matmul.h"
#include "meshdma/kernels/ops/softmax.h"
#include "meshdma/kernels/vmap.h"
#include "tests/kernels/kernel_test_util.h"

extern "C" {
// OpenBLAS's process-wide thread count (the library meshdma's Gemm calls).
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
}

namespace meshdma {
namespace {

using ::meshdma::testing::MaxAbsDiff;
using ::meshdma::testing::RandomVector;
using ::meshdma::testing::RunOnDevices;
using ::meshdma::testing::View;
using ::testing::HasSubstr;

#define RUN_ON_DEVICES(...)                                                    \
  do {                                                                         \
    absl::Status run_status = RunOnDevices([&]() -> absl::Status __VA_ARGS__); \
    ASSERT_TRUE(run_status.ok()) << run_status;                                \
  } while (0)

TEST(GemmTest, BadSizesAreInvalidArgument) {
  std::vector<float> a(16), b(16), c(16);
  EXPECT_TRUE(CheckedGemm(false, false, 4, 4, 4, 1.0f, a.data(), 4, b.data(), 4,
                          0.0f, c.data(), 4)
                  .ok());
  auto bad = [&](int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                 int64_t ldc, const char* what) {
    absl::Status s = CheckedGemm(false, false, m, n, k, 1.0f, a.data(), lda,
                                 b.data(), ldb, 0.0f, c.data(), ldc);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(std::string(s.message()), HasSubstr(what));
  };
  bad(-1, 4, 4, 4, 4, 4, "m must be");
  bad(4, 4, int64_t{1} << 33, 4, 4, 4, "k must be");
  bad(4, 4, 4, 2, 4, 4, "lda");
  bad(4, 4, 4, 4, 0, 4, "ldb");
  bad(4, 8, 4, 4, 8, 4, "ldc");
  absl::Status null_b = CheckedGemm(false, false, 4, 4, 4, 1.0f, a.data(), 4,
                                    nullptr, 4, 0.0f, c.data(), 4);
  EXPECT_THAT(std::string(null_b.message()), HasSubstr("null B"));
  EXPECT_DEATH(Gemm(false, false, 4, 4, 4, 1.0f, a.data(), 1, b.data(), 4, 0.0f,
                    c.data(), 4),
               "lda");
}

// Gemm runs OpenBLAS on one thread but leaves the process's thread count as
// it found it (other callers, such as torch's matmuls, keep theirs), also
// when products on several threads overlap; each product still matches the
// loop. It runs in a fresh process (a death test in the "threadsafe" style
// re-executes the binary), so that these are the process's first products.
TEST(GemmDeathTest, LeavesTheProcessBlasThreadCountAsItFound) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  constexpr int64_t n = 96;
  auto product_matches_loop = [](uint32_t seed) {
    std::vector<float> a = RandomVector(n * n, seed);
    std::vector<float> b = RandomVector(n * n, seed + 1);
    std::vector<float> c(n * n), want(n * n);
    for (int round = 0; round < 50; ++round) {
      Gemm(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(),
           n);
    }
    GemmNaive(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
              want.data(), n);
    return MaxAbsDiff(c, want) < 1e-3;
  };
  auto check = [&] {
    openblas_set_num_threads(2);
    if (!product_matches_loop(1)) return "a product differs from the loop";
    if (openblas_get_num_threads() != 2) return "one product left the count";
    bool matches[2] = {false, false};
    std::thread other([&] { matches[1] = product_matches_loop(3); });
    matches[0] = product_matches_loop(5);
    other.join();
    if (!matches[0] || !matches[1]) return "an overlapping product differs";
    if (openblas_get_num_threads() != 2) return "overlapping products left it";
    return "";
  };
  EXPECT_EXIT(
      {
        const std::string failure = check();
        std::fprintf(stderr, "%s", failure.c_str());
        std::exit(failure.empty() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "^$");
}

// A narrow B (n <= 8) against a large A takes Gemm's row kernel instead of
// OpenBLAS: every n, a k that 8 does not divide, leading dimensions longer
// than the rows, and alpha/beta, against the plain loop.
TEST(GemmTest, NarrowProductMatchesTheLoop) {
  const int64_t m = 40, k = 2053, lda = k + 3;
  for (int64_t n = 1; n <= 9; ++n) {
    for (float beta : {0.0f, 0.5f}) {
      const int64_t ldb = n + 2, ldc = n + 1;
      std::vector<float> a = RandomVector(m * lda, 1);
      std::vector<float> b = RandomVector(k * ldb, 2);
      std::vector<float> c = RandomVector(m * ldc, 3), want = c;
      Gemm(false, false, m, n, k, 2.0f, a.data(), lda, b.data(), ldb, beta,
           c.data(), ldc);
      GemmNaive(false, false, m, n, k, 2.0f, a.data(), lda, b.data(), ldb, beta,
                want.data(), ldc);
      double worst = 0;
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t j = 0; j < ldc; ++j) {
          const double diff = std::abs(c[r * ldc + j] - want[r * ldc + j]);
          worst = std::max(worst, j < n ? diff : diff * 1e9);  // Untouched.
        }
      }
      EXPECT_LT(worst, 2e-3) << "n " << n << " beta " << beta;
    }
  }
}

// RowTileProduct (attention's P V and dS K without packing) against the
// loop: rows that do not fill a tile, a, b and c with leading dimensions
// wider than their rows, one and two 64-column tiles, k = 0 and k beyond
// one sweep, beta 0 (c's NaNs ignored) and 1; a width or an alpha it does
// not take (or a machine without AVX-512) leaves c as it was and says so.
TEST(GemmTest, RowTileProductMatchesTheLoop) {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  for (int64_t n : {64, 128, 48}) {
    for (int64_t m : {1, 6, 13}) {
      for (int64_t k : {0, 1, 37, 200}) {
        for (float beta : {0.0f, 1.0f}) {
          const int64_t lda = k + 5, ldb = n + 16, ldc = n + 3;
          std::vector<float> a = RandomVector(m * lda, 4);
          std::vector<float> b = RandomVector(std::max<int64_t>(k, 1) * ldb, 5);
          std::vector<float> c = RandomVector(m * ldc, 6);
          if (beta == 0.0f) c[0] = std::numeric_limits<float>::quiet_NaN();
          std::vector<float> want = c;
          const bool ran = kernels_internal::RowTileProduct(
              m, n, k, 1.0f, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
          EXPECT_EQ(ran, avx512 && n % 64 == 0) << "n " << n;
          EXPECT_FALSE(kernels_internal::RowTileProduct(
              m, n, k, 0.5f, a.data(), lda, b.data(), ldb, beta, c.data(), ldc))
              << "alpha 0.5";
          if (ran) {
            GemmNaive(false, false, m, n, k, 1.0f, a.data(), lda, b.data(), ldb,
                      beta, want.data(), ldc);
          }
          double worst = 0;
          for (int64_t r = 0; r < m; ++r) {
            for (int64_t j = 0; j < ldc; ++j) {
              const double diff = std::abs(c[r * ldc + j] - want[r * ldc + j]);
              worst = std::max(worst, j < n ? diff : diff * 1e9);  // Untouched.
            }
          }
          EXPECT_LT(worst, 1e-3)
              << "n " << n << " m " << m << " k " << k << " beta " << beta;
        }
      }
    }
  }
}

// TransposeScaled against the loop: whole 16 x 16 blocks, ragged rows and
// columns, a destination row wider than the block.
TEST(GemmTest, TransposeScaledMatchesTheLoop) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{16, 16},
                            {256, 64},
                            {64, 128},
                            {37, 21},
                            {3, 40},
                            {48, 5}}) {
    const int64_t ld = rows + 7;
    std::vector<float> src = RandomVector(rows * cols, 8);
    std::vector<float> dst(cols * ld, -1.0f), want = dst;
    kernels_internal::TransposeScaled(src.data(), rows, cols, 0.5f, dst.data(),
                                      ld);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j)
        want[j * ld + i] = 0.5f * src[i * cols + j];
    }
    EXPECT_EQ(dst, want) << rows << " x " << cols;
  }
}

// A product with beta 0 overwrites C: whatever C held, NaN included, does
// not reach the result, and the bytes between C's rows (ldc > n) are left as
// they were. Every transpose, and k = 0 (C becomes zeros).
TEST(GemmTest, BetaZeroOverwritesCAndOnlyC) {
  const int64_t m = 70, n = 90, ldc = n + 5;
  for (int64_t k : {0, 1, 130}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const int64_t lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 1;
      std::vector<float> a = RandomVector((ta ? k : m) * lda, 1);
      std::vector<float> b = RandomVector((tb ? n : k) * ldb, 2);
      std::vector<float> c(m * ldc, std::nanf("")), want = c;
      Gemm(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 0.0f, c.data(),
           ldc);
      GemmNaive(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 0.0f,
                want.data(), ldc);
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t j = 0; j < ldc; ++j) {
          const float got = c[r * ldc + j], expected = want[r * ldc + j];
          if (j >= n) {
            ASSERT_TRUE(std::isnan(got)) << "gap (" << r << ", " << j << ")";
          } else {
            ASSERT_NEAR(got, expected, 1e-3)
                << "k " << k << " transposes " << t << " at (" << r << ", " << j
                << ")";
          }
        }
      }
    }
  }
}

// The softmax's exponential: exp(x - shift) within 4e-7 of std::exp, -inf
// and everything below -87.3 exactly 0, beyond float's range +inf, a NaN
// kept; the returned sum is the results' sum. Lengths around the 16 lanes,
// so that the ragged tail is covered. Both lane shapes (this machine's, and
// the 8x2 form machines without AVX-512 run), and RowMax.
TEST(ExpShiftSumTest, AgainstStdExp) {
  using ExpFn = float (*)(float*, int64_t, float);
  const std::pair<ExpFn, const char*> forms[] = {
      {kernels_internal::ExpShiftSum, "ExpShiftSum"},
      {kernels_internal::ExpShiftSum8x2, "ExpShiftSum8x2"}};
  const float inf = std::numeric_limits<float>::infinity();
  for (const auto& [exp_shift_sum, name] : forms) {
    for (int64_t n : {1, 15, 16, 17, 40, 256}) {
      SCOPED_TRACE(::testing::Message() << name << " n " << n);
      std::vector<float> x = RandomVector(n, 7);
      for (int64_t k = 0; k < n; ++k) x[k] = 40.0f * x[k] - 20.0f;
      x[0] = -inf;
      if (n > 5) {
        x[1] = -100.0f, x[2] = 200.0f, x[3] = 3.0f, x[4] = std::nanf("");
        const float want = *std::max_element(x.begin() + 5, x.end());
        EXPECT_EQ(kernels_internal::RowMax(x.data() + 5, n - 5), want);
        EXPECT_EQ(kernels_internal::RowMax8x2(x.data() + 5, n - 5), want);
      }
      std::vector<float> y = x;
      const float shift = 3.0f;
      const float sum = exp_shift_sum(y.data(), n, shift);
      double want_sum = 0;
      bool nan = false;
      for (int64_t k = 0; k < n; ++k) {
        const float v = x[k] - shift;
        if (std::isnan(v)) {
          EXPECT_TRUE(std::isnan(y[k])) << "k " << k;
          nan = true;
          continue;
        }
        const double want = v < -87.3f ? 0.0 : std::exp(static_cast<double>(v));
        if (want > std::numeric_limits<float>::max()) {
          EXPECT_EQ(y[k], inf) << "x " << x[k];
        } else if (want == 0.0) {
          EXPECT_EQ(y[k], 0.0f) << "x " << x[k];
        } else {
          EXPECT_NEAR(y[k] / want, 1.0, 4e-7) << "x " << x[k];
        }
        want_sum += y[k];
      }
      if (nan) {
        EXPECT_TRUE(std::isnan(sum));
      } else if (std::isinf(want_sum)) {
        EXPECT_EQ(sum, inf);
      } else {
        EXPECT_NEAR(sum, want_sum, 1e-6 * std::max(1.0, want_sum));
      }
    }
  }
}

TEST(AddVectorsTest, ManyLengths) {
  RUN_ON_DEVICES({
    for (int64_t n : {1, 7, 64, 1000, 4096, 5000}) {
      for (int64_t bs : {8, 256, 4096}) {
        auto x = RandomVector(n, 1), y = RandomVector(n, 2);
        std::vector<float> o(n + 1, 9.0f);
        MESHDMA_RETURN_IF_ERROR(
            AddVectors(View(x, {n}), View(y, {n}),
                       *ArrayRef::FromPointer(o.data(), DType::kF32,
                                              std::vector<int64_t>{n}),
                       {bs}));
        for (int64_t i = 0; i < n; ++i)
          EXPECT_EQ(o[i], x[i] + y[i]) << n << " " << bs;
        EXPECT_EQ(o[n], 9.0f);
      }
    }
    std::vector<float> a(4), b(5), c(4);
    absl::Status s = AddVectors(View(a, {4}), View(b, {5}), View(c, {4}));
    EXPECT_THAT(std::string(s.message()), HasSubstr("add_vectors"));
    return absl::OkStatus();
  });
}

TEST(IotaTest, I32AndF32) {
  RUN_ON_DEVICES({
    for (int64_t n : {1, 100, 4097}) {
      std::vector<int32_t> o(n);
      MESHDMA_RETURN_IF_ERROR(Iota(View(o, {n}), {64}));
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(o[i], i);
      std::vector<float> f(n);
      MESHDMA_RETURN_IF_ERROR(Iota(View(f, {n}), {100}));
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(f[i], static_cast<float>(i));
    }
    return absl::OkStatus();
  });
}

std::vector<float> NaiveMatmul(const std::vector<float>& x,
                               const std::vector<float>& y, int64_t m,
                               int64_t n, int64_t k, Activation act) {
  std::vector<float> o(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p)
        acc += double(x[i * k + p]) * y[p * n + j];
      o[i * n + j] = ApplyActivation(act, static_cast<float>(acc));
    }
  return o;
}

// An Activation outside the enum is an error naming its value, not a matmul
// without one.
TEST(MatmulTest, ActivationOutsideTheEnum) {
  MatmulOptions opts{16, 16, 16, static_cast<Activation>(7)};
  auto kernel = MatmulKernel(8, 8, 8, opts);
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(kernel.status().message())
                .find("activation (Activation) 7 is not one of none (0)"),
            std::string::npos)
      << kernel.status();
}

TEST(MatmulTest, ShapesBlocksActivations) {
  RUN_ON_DEVICES({
    struct Case {
      int64_t m, n, k, b;
      Activation act;
    };
    for (const Case& c : {Case{1, 1, 1, 32, Activation::kNone},
                          Case{64, 64, 64, 32, Activation::kRelu},
                          Case{37, 53, 71, 16, Activation::kGelu},
                          Case{100, 30, 129, 64, Activation::kSilu},
                          Case{128, 96, 300, 128, Activation::kRelu}}) {
      auto x = RandomVector(c.m * c.k, 3), y = RandomVector(c.k * c.n, 4);
      std::vector<float> o(c.m * c.n);
      PipelineStats stats;
      MatmulOptions opts{c.b, c.b, c.b, c.act, &stats};
      MESHDMA_RETURN_IF_ERROR(Matmul(View(x, {c.m, c.k}), View(y, {c.k, c.n}),
                                     View(o, {c.m, c.n}), opts));
      EXPECT_LT(MaxAbsDiff(o, NaiveMatmul(x, y, c.m, c.n, c.k, c.act)), 1e-4)
          << c.m << "x" << c.n << "x" << c.k;
      // Every block, ragged ones too, is read and written where it lies.
      const int64_t bm = std::min(c.b, c.m), bn = std::min(c.b, c.n);
      EXPECT_EQ(stats.output_in_place[0],
                ((c.m + bm - 1) / bm) * ((c.n + bn - 1) / bn));
      EXPECT_EQ(stats.output_copies[0], 0);
      EXPECT_EQ(stats.input_copies[0] + stats.input_copies[1], 0);
      EXPECT_EQ(stats.vmem_bytes, 0);
    }
    // Batched matmul from the single kernel with vmap.
    const int64_t batch = 3, m = 20, n = 24, k = 40;
    auto x = RandomVector(batch * m * k, 5), y = RandomVector(batch * k * n, 6);
    std::vector<float> o(batch * m * n);
    MESHDMA_ASSIGN_OR_RETURN(Kernel single,
                             MatmulKernel(m, n, k, {16, 16, 16}));
    const ArrayRef ins[] = {View(x, {batch, m, k}), View(y, {batch, k, n})};
    const ArrayRef outs[] = {View(o, {batch, m, n})};
    MESHDMA_RETURN_IF_ERROR(vmap(single, {0, 0})(ins, outs));
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<float> xb(x.begin() + b * m * k, x.begin() + (b + 1) * m * k);
      std::vector<float> yb(y.begin() + b * k * n, y.begin() + (b + 1) * k * n);
      std::vector<float> ob(o.begin() + b * m * n, o.begin() + (b + 1) * m * n);
      EXPECT_LT(MaxAbsDiff(ob, NaiveMatmul(xb, yb, m, n, k, Activation::kNone)),
                1e-4);
    }
    // Bad input names the operand.
    std::vector<float> bad(6);
    absl::Status s =
        Matmul(View(x, {m, k}), View(bad, {3, 2}), View(o, {m, 2}));
    EXPECT_THAT(std::string(s.message()), HasSubstr("input 1 ('y')"));
    return absl::OkStatus();
  });
}

// Operands that are views: x and out inside wider arrays (row strides
// above their widths), y a broadcast of one row (row stride 0, staged). The
// columns of out's array outside the view keep their values.
TEST(MatmulTest, StridedViews) {
  RUN_ON_DEVICES({
    const int64_t m = 45, n = 37, k = 50, pad = 11;
    auto xa = RandomVector(m * (k + pad), 7);
    auto yrow = RandomVector(n, 8);
    std::vector<float> oa(m * (n + pad), -7.0f);
    const std::vector<int64_t> x_shape = {m, k}, y_shape = {k, n},
                               o_shape = {m, n}, x_strides = {k + pad, 1},
                               o_strides = {n + pad, 1}, y_strides = {0, 1};
    MESHDMA_ASSIGN_OR_RETURN(
        ArrayRef x,
        ArrayRef::FromPointer(xa.data(), DType::kF32, x_shape, x_strides));
    MESHDMA_ASSIGN_OR_RETURN(
        ArrayRef y,
        ArrayRef::FromPointer(yrow.data(), DType::kF32, y_shape, y_strides));
    MESHDMA_ASSIGN_OR_RETURN(
        ArrayRef out,
        ArrayRef::FromPointer(oa.data(), DType::kF32, o_shape, o_strides));
    PipelineStats stats;
    MESHDMA_RETURN_IF_ERROR(
        Matmul(x, y, out, {16, 16, 16, Activation::kRelu, &stats}));
    // The same product on dense copies, by the naive loop.
    std::vector<float> xd(m * k), yd(k * n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) xd[i * k + p] = xa[i * (k + pad) + p];
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j) yd[p * n + j] = yrow[j];
    const std::vector<float> want =
        NaiveMatmul(xd, yd, m, n, k, Activation::kRelu);
    double diff = 0;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n + pad; ++j) {
        const float got = oa[i * (n + pad) + j];
        if (j >= n) {
          EXPECT_EQ(got, -7.0f) << "row " << i << " column " << j;
        } else {
          diff = std::max<double>(diff, std::abs(got - want[i * n + j]));
        }
      }
    }
    EXPECT_LT(diff, 1e-4);
    EXPECT_EQ(stats.input_copies[0], 0);  // x in place.
    EXPECT_GT(stats.input_copies[1], 0);  // The broadcast y staged.
    EXPECT_EQ(stats.output_copies[0], 0);
    EXPECT_EQ(stats.output_in_place[0], 3 * 3);
    return absl::OkStatus();
  });
}

TEST(SoftmaxTest, Rows) {
  RUN_ON_DEVICES({
    for (int64_t rows : {1, 5, 64, 130}) {
      for (int64_t cols : {1, 7, 128}) {
        auto x = RandomVector(rows * cols, 7, -5.0f, 5.0f);
        std::vector<float> o(rows * cols);
        MESHDMA_RETURN_IF_ERROR(
            Softmax(View(x, {rows, cols}), View(o, {rows, cols}), {16}));
        for (int64_t r = 0; r < rows; ++r) {
          double mx = -1e30, sum = 0;
          for (int64_t c = 0; c < cols; ++c)
            mx = std::max<double>(mx, x[r * cols + c]);
          for (int64_t c = 0; c < cols; ++c)
            sum += std::exp(x[r * cols + c] - mx);
          for (int64_t c = 0; c < cols; ++c)
            EXPECT_NEAR(o[r * cols + c], std::exp(x[r * cols + c] - mx) / sum,
                        1e-6);
        }
      }
    }
    return absl::OkStatus();
  });
}

template <typename T>
std::vector<T> Cast(const std::vector<float>& v) {
  std::vector<T> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = T(v[i]);
  return r;
}
template <typename T>
std::vector<float> Uncast(const std::vector<T>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = static_cast<float>(v[i]);
  return r;
}

struct FaCase {
  int64_t b, h, hkv, sq, skv, d, bq, bk;
  bool causal;
};

template <typename T>
void CheckFlash(const FaCase& c, double tol) {
  auto qf = RandomVector(c.b * c.h * c.sq * c.d, 11);
  auto kf = RandomVector(c.b * c.hkv * c.skv * c.d, 12);
  auto vf = RandomVector(c.b * c.hkv * c.skv * c.d, 13);
  // Round inputs to T first so the reference sees the same values.
  auto q = Cast<T>(qf), k = Cast<T>(kf), v = Cast<T>(vf);
  qf = Uncast(q), kf = Uncast(k), vf = Uncast(v);
  std::vector<T> o(q.size());
  std::vector<float> lse(c.b * c.h * c.sq);
  FlashAttentionOptions opts;
  opts.block_q = c.bq;
  opts.block_k = c.bk;
  opts.causal = c.causal;
  const ArrayRef lse_ref = View(lse, {c.b, c.h, c.sq});
  absl::Status s = FlashAttention(
      View(q, {c.b, c.h, c.sq, c.d}), View(k, {c.b, c.hkv, c.skv, c.d}),
      View(v, {c.b, c.hkv, c.skv, c.d}), View(o, {c.b, c.h, c.sq, c.d}), opts,
      &lse_ref);
  ASSERT_TRUE(s.ok()) << s;
  std::vector<float> ref_lse;
  auto ref =
      ReferenceAttention(qf, kf, vf, c.b, c.h, c.hkv, c.sq, c.skv, c.d,
                         1.0f / std::sqrt(float(c.d)), c.causal, &ref_lse);
  EXPECT_LT(MaxAbsDiff(Uncast(o), ref), tol)
      << DTypeName(kDTypeOf<T>) << " b" << c.b << " h" << c.h << " hkv" << c.hkv
      << " sq" << c.sq << " skv" << c.skv << " d" << c.d << " blocks " << c.bq
      << "," << c.bk << (c.causal ? " causal" : "");
  EXPECT_LT(MaxAbsDiff(lse, ref_lse), 1e-4);
}

TEST(FlashAttentionTest, MhaMqaGqaCausalRagged) {
  RUN_ON_DEVICES({
    for (const FaCase& c : {FaCase{1, 1, 1, 64, 64, 32, 32, 32, false},
                            FaCase{2, 4, 4, 50, 70, 16, 16, 32, false},
                            FaCase{1, 4, 1, 33, 33, 8, 16, 8, true},
                            FaCase{2, 6, 2, 40, 40, 64, 16, 16, true},
                            FaCase{1, 2, 2, 7, 100, 24, 8, 64, false},
                            FaCase{1, 2, 1, 65, 65, 128, 32, 64, true},
                            // Query blocks the diagonal crosses in strips,
                            // the rows below it in one product.
                            FaCase{1, 2, 1, 300, 300, 16, 128, 96, true},
                            FaCase{1, 2, 2, 200, 200, 8, 256, 64, true},
                            // Key blocks wider than query blocks: the
                            // columns every row sees in one product.
                            FaCase{1, 2, 1, 300, 300, 16, 64, 256, true}}) {
      CheckFlash<float>(c, 2e-5);
    }
    CheckFlash<BFloat16>({1, 4, 2, 45, 45, 32, 16, 16, true}, 2e-2);
    CheckFlash<Half>({2, 2, 1, 30, 47, 16, 16, 16, false}, 2e-3);
    return absl::OkStatus();
  });
}

// A key block above the causal diagonal is never fetched.
TEST(FlashAttentionTest, CausalSkipsCopies) {
  RUN_ON_DEVICES({
    const int64_t s = 64, d = 8;
    auto q = RandomVector(s * d, 1), k = RandomVector(s * d, 2),
         v = RandomVector(s * d, 3);
    std::vector<float> o(s * d);
    PipelineStats stats;
    FlashAttentionOptions opts{16, 16, true, std::nullopt, &stats};
    MESHDMA_RETURN_IF_ERROR(
        FlashAttention(View(q, {1, 1, s, d}), View(k, {1, 1, s, d}),
                       View(v, {1, 1, s, d}), View(o, {1, 1, s, d}), opts));
    // Query block i needs key blocks 0..i; the key index sequence is
    // 0000 0111 0122 0123, and a block is fetched only where it changes: 9
    // fetches instead of 16. Whole blocks are read in place, not copied.
    EXPECT_EQ(stats.input_in_place[1], 9);
    EXPECT_EQ(stats.input_in_place[0], 4);
    EXPECT_EQ(stats.input_copies[1], 0);
    return absl::OkStatus();
  });
}

// MHA, batched MHA and MQA from the single-sequence kernel with vmap (the
// Pallas talk), against the 4-D kernel's reference.
TEST(FlashAttentionTest, VmapMhaAndMqa) {
  RUN_ON_DEVICES({
    const int64_t b = 2, h = 3, s = 40, d = 16;
    FlashAttentionOptions opts;
    opts.block_q = 16;
    opts.block_k = 16;
    MESHDMA_ASSIGN_OR_RETURN(Kernel single,
                             FlashAttentionKernel(s, s, d, DType::kF32, opts));
    auto q = RandomVector(b * h * s * d, 1), k = RandomVector(b * h * s * d, 2),
         v = RandomVector(b * h * s * d, 3);
    std::vector<float> o(q.size());
    Kernel mha = vmap(single, {0, 0, 0});
    Kernel batched = vmap(mha, {0, 0, 0});
    const ArrayRef ins[] = {View(q, {b, h, s, d}), View(k, {b, h, s, d}),
                            View(v, {b, h, s, d})};
    const ArrayRef outs[] = {View(o, {b, h, s, d})};
    MESHDMA_RETURN_IF_ERROR(batched(ins, outs));
    const float scale = 1.0f / std::sqrt(float(d));
    EXPECT_LT(MaxAbsDiff(o, ReferenceAttention(q, k, v, b, h, h, s, s, d, scale,
                                               false)),
              2e-5);
    // MQA: K and V shared by every head (in_axes None).
    std::vector<float> k1(k.begin(), k.begin() + s * d),
        v1(v.begin(), v.begin() + s * d);
    std::vector<float> q1(q.begin(), q.begin() + h * s * d), o1(h * s * d);
    Kernel mqa = vmap(single, {0, std::nullopt, std::nullopt});
    const ArrayRef ins2[] = {View(q1, {h, s, d}), View(k1, {s, d}),
                             View(v1, {s, d})};
    const ArrayRef outs2[] = {View(o1, {h, s, d})};
    MESHDMA_RETURN_IF_ERROR(mqa(ins2, outs2));
    EXPECT_LT(MaxAbsDiff(o1, ReferenceAttention(q1, k1, v1, 1, h, 1, s, s, d,
                                                scale, false)),
              2e-5);
    return absl::OkStatus();
  });
}

TEST(FlashAttentionTest, BadInput) {
  RUN_ON_DEVICES({
    std::vector<float> q(2 * 4 * 8 * 16), k(2 * 3 * 8 * 16), o(q.size());
    std::vector<int32_t> qi(q.size());
    absl::Status s =
        FlashAttention(View(q, {2, 4, 8, 16}), View(k, {2, 3, 8, 16}),
                       View(k, {2, 3, 8, 16}), View(o, {2, 4, 8, 16}));
    EXPECT_THAT(std::string(s.message()), HasSubstr("input 1 ('k')"));
    EXPECT_THAT(std::string(s.message()), HasSubstr("flash_attention"));
    s = FlashAttention(View(qi, {2, 4, 8, 16}), View(k, {2, 3, 8, 16}),
                       View(k, {2, 3, 8, 16}), View(o, {2, 4, 8, 16}));
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("input 0 ('q') has dtype i32"));
    s = FlashAttention(View(q, {2, 4, 8, 16}), View(q, {2, 4, 8, 16}),
                       View(q, {2, 4, 8, 16}), View(o, {2, 4, 16, 8}));
    EXPECT_THAT(std::string(s.message()), HasSubstr("output 0 ('out')"));
    return absl::OkStatus();
  });
}

}  // namespace
}  // namespace meshdma
