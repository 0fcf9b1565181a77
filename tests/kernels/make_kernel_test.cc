// make_kernel and the op registry: adopted kernels and built-in ops by name,
// checked against naive loops; unknown names, arity and attributes fail.
#include "meshdma/kernels/make_kernel.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/kernels/ops/attention_reference.h"
#include "meshdma/kernels/ops/registry.h"
#include "tests/kernels/kernel_test_util.h"

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

// The seed's add_vectors kernel: whole arrays in VMEM, no grid.
Kernel AddVectorsKernel() {
  Kernel k;
  k.params.name = "my_add";
  k.params.in_specs = {BlockSpec{}, BlockSpec{}};
  k.params.out_specs = {BlockSpec{}};
  k.body = [](const KernelArgs& a) -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(Ref<float> x, a.in<float>(0));
    MESHDMA_ASSIGN_OR_RETURN(Ref<float> y, a.in<float>(1));
    MESHDMA_ASSIGN_OR_RETURN(Ref<float> o, a.out<float>(0));
    return o.Store(x.Load() + y.Load());
  };
  return k;
}

TEST(MakeKernelTest, AdoptsAKernel) {
  RUN_ON_DEVICES({
    KernelOp op = make_kernel(AddVectorsKernel(), SameAsInput(0));
    EXPECT_EQ(op.name(), "my_add");
    EXPECT_EQ(op.num_inputs(), 2);
    auto x = RandomVector(3 * 128 * 4, 1), y = RandomVector(3 * 128 * 4, 2);
    // Reused on two shapes.
    for (std::vector<int64_t> shape :
         {std::vector<int64_t>{3, 128, 4}, std::vector<int64_t>{384, 4}}) {
      MESHDMA_ASSIGN_OR_RETURN(auto outs, op({View(x, shape), View(y, shape)}));
      EXPECT_EQ(outs.size(), 1u);
      EXPECT_EQ(outs[0].shape(), shape);
      std::vector<float> o = outs[0].ToVector<float>();
      for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(o[i], x[i] + y[i]);
    }
    auto bad = op({View(x, {3, 128, 4})});
    EXPECT_THAT(std::string(bad.status().message()),
                HasSubstr("op 'my_add' takes 2 inputs, got 1"));
    // Any callable, with an out-shape function that fails.
    KernelOp failing =
        make_kernel([](std::span<const ArrayRef>,
                       std::span<const ArrayRef>) { return absl::OkStatus(); },
                    [](std::span<const ArrayRef>)
                        -> absl::StatusOr<std::vector<ShapeDtype>> {
                      return absl::InvalidArgumentError("no shape");
                    },
                    "f");
    EXPECT_THAT(std::string(failing({}).status().message()),
                HasSubstr("no shape"));
    return absl::OkStatus();
  });
}

TEST(MakeKernelTest, BuiltinOpsByName) {
  RUN_ON_DEVICES({
    EXPECT_THAT(
        RegisteredOps(),
        ::testing::IsSupersetOf({"add_vectors", "iota", "matmul", "softmax",
                                 "flash_attention", "flash_attention_backward",
                                 "paged_attention"}));
    const int64_t m = 33, n = 20, k = 45;
    auto x = RandomVector(m * k, 3), y = RandomVector(k * n, 4);
    MESHDMA_ASSIGN_OR_RETURN(
        auto mm, CallOp("matmul", {View(x, {m, k}), View(y, {k, n})},
                        {{"activation", "relu"}, {"block_m", 16}}));
    std::vector<float> got = mm[0].ToVector<float>();
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p)
          acc += double(x[i * k + p]) * y[p * n + j];
        EXPECT_NEAR(got[i * n + j], std::max(acc, 0.0), 1e-4);
      }
    }
    MESHDMA_ASSIGN_OR_RETURN(
        auto sum, CallOp("add_vectors", {View(x, {m * k}), View(x, {m * k})}));
    EXPECT_EQ(sum[0].ToVector<float>()[5], 2 * x[5]);
    MESHDMA_ASSIGN_OR_RETURN(auto io, CallOp("iota", {}, {{"n", 100}}));
    EXPECT_EQ(io[0].dtype(), DType::kI32);
    EXPECT_EQ(io[0].ToVector<int32_t>()[99], 99);
    MESHDMA_ASSIGN_OR_RETURN(auto sm, CallOp("softmax", {View(x, {m, k})}));
    double row = 0;
    for (float v : std::span(sm[0].data<float>(), k)) row += v;
    EXPECT_NEAR(row, 1.0, 1e-5);

    // Attention: forward with lse, backward from it, paged decode.
    const int64_t b = 1, h = 4, hkv = 2, s = 24, d = 16;
    auto q = RandomVector(b * h * s * d, 5),
         kk = RandomVector(b * hkv * s * d, 6),
         vv = RandomVector(b * hkv * s * d, 7);
    const ArrayRef qv = View(q, {b, h, s, d}), kv = View(kk, {b, hkv, s, d}),
                   vv_ref = View(vv, {b, hkv, s, d});
    MESHDMA_ASSIGN_OR_RETURN(
        auto fa,
        CallOp("flash_attention", {qv, kv, vv_ref},
               {{"causal", true}, {"block_q", 8}, {"with_lse", true}}));
    EXPECT_EQ(fa.size(), 2u);
    const float scale = 1.0f / std::sqrt(float(d));
    EXPECT_LT(MaxAbsDiff(fa[0].ToVector<float>(),
                         ReferenceAttention(q, kk, vv, b, h, hkv, s, s, d,
                                            scale, true)),
              2e-5);
    MESHDMA_ASSIGN_OR_RETURN(
        auto grads,
        CallOp("flash_attention_backward", {qv, kv, vv_ref, fa[0], qv, fa[1]},
               {{"causal", true}}));
    std::vector<float> rq, rk, rv;
    ReferenceAttentionBackward(q, kk, vv, q, b, h, hkv, s, s, d, scale, true,
                               &rq, &rk, &rv);
    EXPECT_LT(MaxAbsDiff(grads[1].ToVector<float>(), rk), 1e-4);

    // Paged: the caches are k/v as [Hkv, pages, page, D], pages in order.
    std::vector<int32_t> lens = {24, 10}, tables = {0, 1, 2, 0, 1, 2};
    std::vector<float> pq(2 * h * d);
    std::copy(q.begin(), q.begin() + pq.size(), pq.begin());
    MESHDMA_ASSIGN_OR_RETURN(
        auto pa, CallOp("paged_attention",
                        {View(pq, {2, h, d}), View(kk, {hkv, 3, 8, d}),
                         View(vv, {hkv, 3, 8, d}), View(lens, {2}),
                         View(tables, {2, 3})},
                        {{"pages_per_compute_block", 2}}));
    EXPECT_LT(MaxAbsDiff(pa[0].ToVector<float>(),
                         ReferencePagedAttention(pq, kk, vv, lens, tables, 2, h,
                                                 hkv, 3, 8, 3, d, scale)),
              2e-5);
    return absl::OkStatus();
  });
}

TEST(MakeKernelTest, RegistryErrors) {
  RUN_ON_DEVICES({
    std::vector<float> x(16);
    auto r = CallOp("no_such_op", {View(x, {16})});
    EXPECT_THAT(std::string(r.status().message()),
                HasSubstr("no op named 'no_such_op'"));
    r = CallOp("matmul", {View(x, {4, 4})});
    EXPECT_THAT(std::string(r.status().message()),
                HasSubstr("op 'matmul' takes 2 inputs, got 1"));
    r = CallOp("matmul", {View(x, {4, 4}), View(x, {4, 4})}, {{"blok_m", 4}});
    EXPECT_THAT(std::string(r.status().message()),
                HasSubstr("no attribute 'blok_m'"));
    r = CallOp("matmul", {View(x, {4, 4}), View(x, {4, 4})},
               {{"block_m", "big"}});
    EXPECT_THAT(std::string(r.status().message()),
                HasSubstr("'block_m' must be an integer"));
    r = CallOp("matmul", {View(x, {16}), View(x, {4, 4})});
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("op 'matmul'"));
    r = CallOp("iota", {});
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("'n'"));
    return absl::OkStatus();
  });
  OpDef dup;
  dup.name = "matmul";
  dup.build = [](const OpAttrs&) -> absl::StatusOr<KernelOp> {
    return KernelOp();
  };
  EXPECT_EQ(RegisterOp(dup).code(), absl::StatusCode::kAlreadyExists);
  OpDef twice = dup;
  twice.name = "twice";
  twice.num_inputs = 1;
  twice.build = [](const OpAttrs&) -> absl::StatusOr<KernelOp> {
    return make_kernel(
        [](std::span<const ArrayRef> in, std::span<const ArrayRef> out) {
          for (int64_t i = 0; i < in[0].num_elements(); ++i)
            out[0].data_as<float>()[i] = 2 * in[0].data_as<float>()[i];
          return absl::OkStatus();
        },
        SameAsInput(0), "twice", 1);
  };
  ASSERT_TRUE(RegisterOp(twice).ok());
  std::vector<float> x = {1, 2, 3};
  auto r = CallOp("twice", {View(x, {3})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].ToVector<float>(), (std::vector<float>{2, 4, 6}));
}

}  // namespace
}  // namespace meshdma
