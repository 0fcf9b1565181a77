// ShardedArray and shard_map: layouts, round trips through the host,
// kernels inside the mapped function, replication and validation errors.
// Runs as threads and under mpirun (shards then live in several processes).
#include "meshdma/sharding/shard_map.h"

#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/kernels/blas.h"
#include "meshdma/kernels/ops/matmul.h"
#include "overlap_test_util.h"

namespace meshdma {
namespace {

using ::meshdma::testing::MaxAbsDiff;
using ::meshdma::testing::RandomVector;
using ::meshdma::testing::TestRuntime;
using ::testing::HasSubstr;

Mesh Mesh1D() { return *TestRuntime().MakeMesh1D("x"); }

std::vector<float> Iota(int64_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

TEST(ShardedArray, RoundTripOneAxis) {
  Runtime& rt = TestRuntime();
  const Mesh mesh = Mesh1D();
  const int n = mesh.size();
  const std::vector<int64_t> shape = {4 * n, 6};
  for (const PartitionSpec& spec :
       {PartitionSpec{{"x"}}, PartitionSpec{{}, {}}, PartitionSpec{}}) {
    std::vector<float> host = Iota(4 * n * 6);
    auto a = ShardedArray::FromHost(rt, mesh, spec, host, shape);
    ASSERT_TRUE(a.ok()) << a.status();
    auto back = a->ToHost<float>();
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, host) << spec.ToString();
  }
  // Sharded along the second dimension: each shard is a column block.
  const std::vector<int64_t> shape2 = {3, 2 * n};
  std::vector<float> host = Iota(3 * 2 * n);
  auto a =
      ShardedArray::FromHost(rt, mesh, PartitionSpec{{}, {"x"}}, host, shape2);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->local_shape(), (std::vector<int64_t>{3, 2}));
  for (int l : a->local_devices()) {
    auto shard = a->Shard(l);
    ASSERT_TRUE(shard.ok());
    const float* s = shard->data_as<float>();
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 2; ++c) {
        EXPECT_EQ(s[r * 2 + c], host[r * 2 * n + l * 2 + c]);
      }
    }
  }
  EXPECT_EQ(*a->ToHost<float>(), host);
}

TEST(ShardedArray, RoundTripTwoAxes) {
  Runtime& rt = TestRuntime();
  if (rt.num_devices() % 2 != 0) GTEST_SKIP() << "needs an even mesh";
  const int half = rt.num_devices() / 2;
  auto mesh = rt.MakeMesh({{"x", 2}, {"y", half}});
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  const std::vector<int64_t> shape = {4, 2 * half, 3};
  for (const PartitionSpec& spec :
       {PartitionSpec{{"x"}, {"y"}}, PartitionSpec{{"y"}, {"x"}},
        PartitionSpec{{"x", "y"}}, PartitionSpec{{}, {"y"}},
        PartitionSpec{{}, {}, {}}}) {
    if (!spec.Validate(*mesh, shape).ok()) continue;
    std::vector<float> host = Iota(4 * 2 * half * 3);
    auto a = ShardedArray::FromHost(rt, *mesh, spec, host, shape);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(*a->ToHost<float>(), host) << spec.ToString();
  }
}

TEST(ShardedArray, FromHostOnRootIsBroadcast) {
  Runtime& rt = TestRuntime();
  const Mesh mesh = Mesh1D();
  const int n = mesh.size();
  const std::vector<int64_t> shape = {2 * n, 5};
  std::vector<float> host = RandomVector(2 * n * 5, 7);
  std::vector<float> empty;
  const bool root = rt.launch().rank() == 0;
  ArrayRef ref = root ? *ArrayRef::FromPointer(host.data(), DType::kF32, shape)
                      : ArrayRef();
  auto a = ShardedArray::FromHost(rt, mesh, PartitionSpec{{"x"}}, ref,
                                  {.name = "h", .root = 0});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a->ToHost<float>(), host);
}

// A root outside the launch is an error on every process before any message
// (under mpirun it would otherwise reach MPI_Bcast, whose error ends every
// rank), and the runtime stays usable.
TEST(ShardedArray, FromHostRootOutsideTheLaunch) {
  Runtime& rt = TestRuntime();
  const Mesh mesh = Mesh1D();
  const int n = mesh.size();
  const int processes = rt.launch().num_processes();
  std::vector<float> host = RandomVector(2 * n * 5, 7);
  for (const int root : {processes, -1, 1 << 30}) {
    auto a = ShardedArray::FromHost(rt, mesh, PartitionSpec{{"x"}}, host,
                                    {2 * n, 5}, {.name = "h", .root = root});
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(
        std::string(a.status().message()),
        HasSubstr(absl::StrCat("FromHostOptions::root: root ", root,
                               " is not a rank of this launch (", processes)));
    EXPECT_THAT(std::string(a.status().message()), HasSubstr("'h'"));
  }
  auto good = ShardedArray::FromHost(rt, mesh, PartitionSpec{{"x"}}, host,
                                     {2 * n, 5}, {.name = "h", .root = 0});
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(*good->ToHost<float>(), host);
}

TEST(ShardedArray, ErrorsNameArrayDimensionAndAxis) {
  Runtime& rt = TestRuntime();
  const Mesh mesh = Mesh1D();
  const int n = mesh.size();
  std::vector<float> host(64);
  if (n > 1) {
    auto bad = ShardedArray::FromHost(rt, mesh, PartitionSpec{{"x"}}, host,
                                      {n + 1, 1}, {.name = "q"});
    ASSERT_FALSE(bad.ok());
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr("'q'"));
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr("dimension 0"));
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr("'x'"));
  }
  auto unknown = ShardedArray::FromHost(rt, mesh, PartitionSpec{{}, {"z"}},
                                        host, {8, 8}, {.name = "kv"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("'kv'"));
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("'z'"));
  EXPECT_THAT(std::string(unknown.status().message()),
              HasSubstr("dimension 1"));
  auto too_long = ShardedArray::FromHost(rt, mesh, PartitionSpec{{}, {}, {"x"}},
                                         host, {8, 8}, {.name = "w"});
  ASSERT_FALSE(too_long.ok());
  EXPECT_THAT(std::string(too_long.status().message()), HasSubstr("'w'"));
}

TEST(ShardedArray, HostVectorSmallerThanShapeIsInvalid) {
  Runtime& rt = TestRuntime();
  const Mesh mesh = Mesh1D();
  std::vector<float> host(10);
  auto a = ShardedArray::FromHost(rt, mesh, PartitionSpec{}, host, {4, 4},
                                  {.name = "small"});
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("'small'"));
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("10 elements"));
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("needs 16"));
}

TEST(ShardMap, EmptyFunctionIsInvalid) {
  Runtime& rt = TestRuntime();
  const Mesh mesh = Mesh1D();
  std::vector<float> host(8 * mesh.size());
  auto x = ShardedArray::FromHost(rt, mesh, PartitionSpec{{"x"}}, host,
                                  {8 * mesh.size()});
  ASSERT_TRUE(x.ok()) << x.status();
  auto f = shard_map(ShardMapFn(), mesh, {PartitionSpec{{"x"}}},
                     {PartitionSpec{{"x"}}});
  std::vector<ShardedArray> in = {*x};
  std::vector<ShapeDtype> out = {{DType::kF32, {8 * mesh.size()}}};
  auto r = f(rt, in, out);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("empty"));
}

TEST(ShardMap, ElementwiseWithAxisIndex) {
  Runtime& rt = TestRuntime();
  const Mesh mesh = Mesh1D();
  const int n = mesh.size();
  const std::vector<int64_t> shape = {3 * n, 4};
  std::vector<float> host = RandomVector(3 * n * 4, 1);
  auto x = ShardedArray::FromHost(rt, mesh, PartitionSpec{{"x"}}, host, shape);
  ASSERT_TRUE(x.ok()) << x.status();
  auto f = shard_map(
      [](std::span<const ArrayRef> in,
         std::span<const ArrayRef> out) -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(int i, axis_index("x"));
        EXPECT_EQ(in[0].dim(0), 3);  // Local shapes.
        const float* a = in[0].data_as<float>();
        float* b = out[0].data_as<float>();
        for (int64_t e = 0; e < in[0].num_elements(); ++e) b[e] = 2 * a[e] + i;
        return absl::OkStatus();
      },
      mesh, {PartitionSpec{{"x"}}}, {PartitionSpec{{"x"}}});
  const ShapeDtype out_shape{DType::kF32, shape};
  auto outs = f(rt, std::span<const ShardedArray>(&*x, 1),
                std::span<const ShapeDtype>(&out_shape, 1));
  ASSERT_TRUE(outs.ok()) << outs.status();
  auto got = (*outs)[0].ToHost<float>();
  ASSERT_TRUE(got.ok());
  for (int64_t r = 0; r < 3 * n; ++r) {
    for (int c = 0; c < 4; ++c) {
      EXPECT_EQ((*got)[r * 4 + c], 2 * host[r * 4 + c] + r / 3);
    }
  }
}

// A pallas_call kernel (the blocked matmul) inside the mapped function:
// rows of x sharded, w replicated.
TEST(ShardMap, PallasMatmulInside) {
  Runtime& rt = TestRuntime();
  const Mesh mesh = Mesh1D();
  const int n = mesh.size();
  const int64_t m = 8 * n, k = 24, c = 16;
  std::vector<float> x = RandomVector(m * k, 2), w = RandomVector(k * c, 3);
  auto xs = ShardedArray::FromHost(rt, mesh, PartitionSpec{{"x"}}, x, {m, k},
                                   {.name = "x"});
  auto ws = ShardedArray::FromHost(rt, mesh, PartitionSpec{}, w, {k, c},
                                   {.name = "w"});
  ASSERT_TRUE(xs.ok() && ws.ok());
  auto f = shard_map(
      [](std::span<const ArrayRef> in, std::span<const ArrayRef> out) {
        return Matmul(in[0], in[1], out[0],
                      {.block_m = 8, .block_n = 8, .block_k = 8});
      },
      mesh, {PartitionSpec{{"x"}}, PartitionSpec{}}, {PartitionSpec{{"x"}}});
  const ShardedArray args[] = {*xs, *ws};
  const ShapeDtype out_shape{DType::kF32, {m, c}};
  auto outs = f(rt, args, std::span<const ShapeDtype>(&out_shape, 1));
  ASSERT_TRUE(outs.ok()) << outs.status();
  std::vector<float> want(m * c);
  GemmNaive(false, false, m, c, k, 1.0f, x.data(), k, w.data(), c, 0.0f,
            want.data(), c);
  EXPECT_LT(MaxAbsDiff(*(*outs)[0].ToHost<float>(), want), 1e-4);
}

TEST(ShardMap, ReplicatedOutputAndReshardedInput) {
  Runtime& rt = TestRuntime();
  const Mesh mesh = Mesh1D();
  const int n = mesh.size();
  std::vector<float> host = RandomVector(2 * n, 4);
  // Given replicated, mapped sharded: shard_map reshards it.
  auto x = ShardedArray::FromHost(rt, mesh, PartitionSpec{}, host, {2 * n});
  ASSERT_TRUE(x.ok());
  auto f = shard_map(
      [](std::span<const ArrayRef> in, std::span<const ArrayRef> out) {
        EXPECT_EQ(in[0].dim(0), 2);
        out[0].data_as<float>()[0] = 42.0f;  // The same on every device.
        return absl::OkStatus();
      },
      mesh, {PartitionSpec{{"x"}}}, {PartitionSpec{}},
      {.name = "replicate", .check_replication = true});
  const ShapeDtype out_shape{DType::kF32, {1}};
  auto outs = f(rt, std::span<const ShardedArray>(&*x, 1),
                std::span<const ShapeDtype>(&out_shape, 1));
  ASSERT_TRUE(outs.ok()) << outs.status();
  EXPECT_EQ((*outs)[0].ToHost<float>()->at(0), 42.0f);
}

TEST(ShardMap, BrokenReplicationPromiseIsAnError) {
  Runtime& rt = TestRuntime();
  const Mesh mesh = Mesh1D();
  if (rt.num_local_devices() < 2) {
    GTEST_SKIP() << "the check compares shards within one process";
  }
  auto f = shard_map(
      [](std::span<const ArrayRef>, std::span<const ArrayRef> out) {
        MESHDMA_ASSIGN_OR_RETURN(int i, axis_index("x"));
        out[0].data_as<float>()[0] = static_cast<float>(i);
        return absl::OkStatus();
      },
      mesh, {}, {PartitionSpec{}},
      {.name = "broken", .output_names = {"o"}, .check_replication = true});
  const ShapeDtype out_shape{DType::kF32, {1}};
  auto outs = f(rt, {}, std::span<const ShapeDtype>(&out_shape, 1));
  ASSERT_FALSE(outs.ok());
  EXPECT_THAT(std::string(outs.status().message()), HasSubstr("'o'"));
  EXPECT_THAT(std::string(outs.status().message()), HasSubstr("'x'"));
}

TEST(ShardMap, SpecErrorsNameInputDimensionAndAxis) {
  Runtime& rt = TestRuntime();
  const Mesh mesh = Mesh1D();
  const int n = mesh.size();
  std::vector<float> host(3 * n + 1);
  auto x = ShardedArray::FromHost(rt, mesh, PartitionSpec{}, host, {3 * n + 1},
                                  {.name = "tokens"});
  ASSERT_TRUE(x.ok());
  auto noop = [](std::span<const ArrayRef>, std::span<const ArrayRef>) {
    return absl::OkStatus();
  };
  const ShapeDtype out_shape{DType::kF32, {4}};
  if (n > 1) {
    auto f = shard_map(noop, mesh, {PartitionSpec{{"x"}}}, {PartitionSpec{}},
                       {.name = "f", .input_names = {"tokens"}});
    auto r = f(rt, std::span<const ShardedArray>(&*x, 1),
               std::span<const ShapeDtype>(&out_shape, 1));
    ASSERT_FALSE(r.ok());
    const std::string msg(r.status().message());
    EXPECT_THAT(msg, HasSubstr("'tokens'"));
    EXPECT_THAT(msg, HasSubstr("dimension 0"));
    EXPECT_THAT(msg, HasSubstr("'x'"));
    EXPECT_THAT(msg, HasSubstr("shard_map 'f'"));
  }
  auto g = shard_map(noop, mesh, {PartitionSpec{{"y"}}}, {PartitionSpec{}});
  auto r2 = g(rt, std::span<const ShardedArray>(&*x, 1),
              std::span<const ShapeDtype>(&out_shape, 1));
  ASSERT_FALSE(r2.ok());
  EXPECT_THAT(std::string(r2.status().message()), HasSubstr("'y'"));
  auto h = shard_map(noop, mesh, {}, {PartitionSpec{}});
  auto r3 = h(rt, std::span<const ShardedArray>(&*x, 1),
              std::span<const ShapeDtype>(&out_shape, 1));
  ASSERT_FALSE(r3.ok());
  EXPECT_THAT(std::string(r3.status().message()), HasSubstr("in_specs"));
  // An output whose size does not divide.
  if (n > 1) {
    const ShapeDtype odd{DType::kF32, {n + 1}};
    auto o = shard_map(noop, mesh, {}, {PartitionSpec{{"x"}}},
                       {.output_names = {"logits"}});
    auto r4 = o(rt, {}, std::span<const ShapeDtype>(&odd, 1));
    ASSERT_FALSE(r4.ok());
    EXPECT_THAT(std::string(r4.status().message()), HasSubstr("'logits'"));
    EXPECT_THAT(std::string(r4.status().message()), HasSubstr("'x'"));
  }
}

}  // namespace
}  // namespace meshdma
