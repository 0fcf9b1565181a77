#include "meshdma/topology/partition_spec.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshdma/topology/mesh.h"

namespace meshdma {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

void ExpectError(const absl::Status& status, absl::StatusCode code,
                 const std::vector<std::string>& parts) {
  EXPECT_EQ(status.code(), code) << status;
  for (const std::string& part : parts) {
    EXPECT_THAT(std::string(status.message()), HasSubstr(part));
  }
}

Mesh MakeMesh(std::vector<Mesh::Axis> axes) {
  absl::StatusOr<Mesh> mesh = Mesh::Create(std::move(axes));
  EXPECT_TRUE(mesh.ok()) << mesh.status();
  return *std::move(mesh);
}

// Counts, for every element of a 2-D `shape`, how many devices' shards hold
// it, and checks each device's shard against `LocalShape`. A sharding that
// leaves mesh axes of total size `replicas` unused covers every element
// exactly `replicas` times.
void ExpectTiling(const Mesh& mesh, const PartitionSpec& spec,
                  const std::vector<int64_t>& shape, int replicas) {
  ASSERT_EQ(shape.size(), 2u);
  auto local = spec.LocalShape(mesh, shape);
  ASSERT_TRUE(local.ok()) << local.status();
  std::vector<int> count(shape[0] * shape[1], 0);
  for (int id = 0; id < mesh.size(); ++id) {
    auto shard = spec.ShardOf(mesh, shape, id);
    ASSERT_TRUE(shard.ok()) << shard.status();
    EXPECT_EQ(shard->extents, *local) << "device " << id;
    for (int64_t i = 0; i < shard->extents[0]; ++i) {
      for (int64_t j = 0; j < shard->extents[1]; ++j) {
        const int64_t r = shard->offsets[0] + i, c = shard->offsets[1] + j;
        ASSERT_LT(r, shape[0]);
        ASSERT_LT(c, shape[1]);
        ++count[r * shape[1] + c];
      }
    }
  }
  for (size_t e = 0; e < count.size(); ++e) {
    EXPECT_EQ(count[e], replicas)
        << "element " << e << " of " << spec.ToString();
  }
}

TEST(PartitionSpecTest, ToString) {
  EXPECT_EQ(PartitionSpec().ToString(), "P()");
  EXPECT_EQ(PartitionSpec({{"x"}, {}, {"x", "y"}}).ToString(),
            "P('x', None, ('x', 'y'))");
}

TEST(PartitionSpecTest, Replicated) {
  Mesh mesh = MakeMesh({{"x", 2}, {"y", 4}});
  const std::vector<int64_t> shape = {6, 10};
  for (const PartitionSpec& spec :
       {PartitionSpec(), PartitionSpec({{}, {}}), PartitionSpec({{}})}) {
    EXPECT_THAT(*spec.LocalShape(mesh, shape), ElementsAre(6, 10));
    for (int id = 0; id < mesh.size(); ++id) {
      auto shard = spec.ShardOf(mesh, shape, id);
      ASSERT_TRUE(shard.ok()) << shard.status();
      EXPECT_THAT(shard->offsets, ElementsAre(0, 0));
      EXPECT_THAT(shard->extents, ElementsAre(6, 10));
    }
    ExpectTiling(mesh, spec, shape, 8);
  }
}

TEST(PartitionSpecTest, OneAxis) {
  Mesh mesh = MakeMesh({{"x", 2}, {"y", 4}});
  const std::vector<int64_t> shape = {8, 3};
  PartitionSpec spec({{"y"}});
  EXPECT_THAT(*spec.LocalShape(mesh, shape), ElementsAre(2, 3));
  for (int id = 0; id < mesh.size(); ++id) {
    auto shard = spec.ShardOf(mesh, shape, id);
    ASSERT_TRUE(shard.ok());
    EXPECT_THAT(shard->offsets, ElementsAre((id % 4) * 2, 0));
  }
  ExpectTiling(mesh, spec, shape, 2);  // Replicated along x.
}

TEST(PartitionSpecTest, SeveralAxesInOneDimension) {
  Mesh mesh = MakeMesh({{"x", 2}, {"y", 4}});
  const std::vector<int64_t> shape = {16, 2};
  // ('x', 'y'): index = x * 4 + y; ('y', 'x'): index = y * 2 + x.
  PartitionSpec xy({{"x", "y"}});
  PartitionSpec yx({{"y", "x"}});
  EXPECT_THAT(*xy.LocalShape(mesh, shape), ElementsAre(2, 2));
  for (int id = 0; id < mesh.size(); ++id) {
    const int x = id / 4, y = id % 4;
    EXPECT_THAT(xy.ShardOf(mesh, shape, id)->offsets,
                ElementsAre((x * 4 + y) * 2, 0));
    EXPECT_THAT(yx.ShardOf(mesh, shape, id)->offsets,
                ElementsAre((y * 2 + x) * 2, 0));
  }
  ExpectTiling(mesh, xy, shape, 1);
  ExpectTiling(mesh, yx, shape, 1);
}

TEST(PartitionSpecTest, TwoDimensionsSharded) {
  Mesh mesh = MakeMesh({{"x", 2}, {"y", 4}});
  const std::vector<int64_t> shape = {8, 12};
  PartitionSpec spec({{"y"}, {"x"}});
  EXPECT_THAT(*spec.LocalShape(mesh, shape), ElementsAre(2, 6));
  for (int id = 0; id < mesh.size(); ++id) {
    const int x = id / 4, y = id % 4;
    auto shard = spec.ShardOf(mesh, shape, id);
    ASSERT_TRUE(shard.ok());
    EXPECT_THAT(shard->offsets, ElementsAre(y * 2, x * 6));
    EXPECT_THAT(shard->extents, ElementsAre(2, 6));
  }
  ExpectTiling(mesh, spec, shape, 1);
}

TEST(PartitionSpecTest, ThreeAxisMeshMixedSharding) {
  Mesh mesh = MakeMesh({{"a", 2}, {"b", 3}, {"c", 2}});
  const std::vector<int64_t> shape = {12, 4};
  // Dim 0 over (c, a) jointly, dim 1 over nothing; b replicates.
  PartitionSpec spec({{"c", "a"}, {}});
  EXPECT_THAT(*spec.LocalShape(mesh, shape), ElementsAre(3, 4));
  for (int id = 0; id < mesh.size(); ++id) {
    const int a = id / 6, c = id % 2;
    EXPECT_THAT(spec.ShardOf(mesh, shape, id)->offsets,
                ElementsAre((c * 2 + a) * 3, 0));
  }
  ExpectTiling(mesh, spec, shape, 3);
  // Dim 0 over b (12 / 3) and dim 1 over (a, c) (4 / 4): every device distinct.
  ExpectTiling(mesh, PartitionSpec({{"b"}, {"a", "c"}}), shape, 1);
}

TEST(PartitionSpecTest, Errors) {
  Mesh mesh = MakeMesh({{"x", 2}, {"y", 4}});
  const std::string m = "{x: 2, y: 4}";
  const std::vector<int64_t> shape = {8, 6};
  ExpectError(PartitionSpec({{"x"}, {}, {}}).Validate(mesh, shape),
              absl::StatusCode::kInvalidArgument,
              {"3 entries", "2 dimensions", m});
  ExpectError(PartitionSpec({{}, {"z"}}).Validate(mesh, shape),
              absl::StatusCode::kNotFound, {"dimension 1", "'z'", m});
  ExpectError(PartitionSpec({{"x", "x"}}).Validate(mesh, shape),
              absl::StatusCode::kInvalidArgument,
              {"'x'", "twice", "dimensions 0 and 0", m});
  ExpectError(PartitionSpec({{"y"}, {"x", "y"}}).Validate(mesh, shape),
              absl::StatusCode::kInvalidArgument,
              {"'y'", "twice", "dimensions 0 and 1", m});
  // 6 is not divisible by 4 (y) nor by 8 (x * y).
  ExpectError(PartitionSpec({{}, {"y"}}).Validate(mesh, shape),
              absl::StatusCode::kInvalidArgument,
              {"dimension 1", "size 6", "divisible by 4", "'y'", m});
  ExpectError(PartitionSpec({{}, {"x", "y"}}).LocalShape(mesh, shape).status(),
              absl::StatusCode::kInvalidArgument,
              {"dimension 1", "size 6", "divisible by 8", "('x', 'y')", m});
  ExpectError(PartitionSpec({{"x"}}).ShardOf(mesh, shape, 8).status(),
              absl::StatusCode::kInvalidArgument, {"8", m});
  const std::vector<int64_t> negative = {-2, 6};
  ExpectError(PartitionSpec({{"x"}}).Validate(mesh, negative),
              absl::StatusCode::kInvalidArgument, {"dimension 0", "-2", m});
  EXPECT_TRUE(PartitionSpec({{"x"}, {}}).Validate(mesh, shape).ok());
}

}  // namespace
}  // namespace meshdma
