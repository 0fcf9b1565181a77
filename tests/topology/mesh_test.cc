#include "meshdma/topology/mesh.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshdma {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Checks `status` has `code` and a message containing each of `parts`.
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

// Row-major coordinates by naive counting: an odometer whose last digit
// turns fastest.
std::vector<std::vector<int>> OdometerCoords(const std::vector<int>& sizes) {
  std::vector<std::vector<int>> out;
  std::vector<int> c(sizes.size(), 0);
  while (true) {
    out.push_back(c);
    int k = static_cast<int>(sizes.size()) - 1;
    while (k >= 0 && ++c[k] == sizes[k]) c[k--] = 0;
    if (k < 0) break;
  }
  return out;
}

class MeshLinearisationTest
    : public ::testing::TestWithParam<std::vector<int>> {};

TEST_P(MeshLinearisationTest, MeshAndLogicalAgreeWithOdometer) {
  const std::vector<int>& sizes = GetParam();
  std::vector<Mesh::Axis> axes;
  const std::vector<std::string> names = {"a", "b", "c"};
  for (size_t i = 0; i < sizes.size(); ++i)
    axes.push_back({names[i], sizes[i]});
  Mesh mesh = MakeMesh(axes);
  const auto expected = OdometerCoords(sizes);
  ASSERT_EQ(mesh.size(), static_cast<int>(expected.size()));
  for (int id = 0; id < mesh.size(); ++id) {
    auto coords = mesh.Coords(id);
    ASSERT_TRUE(coords.ok()) << coords.status();
    EXPECT_EQ(*coords, expected[id]) << "logical id " << id;
    std::vector<int64_t> c64(expected[id].begin(), expected[id].end());
    EXPECT_EQ(*mesh.LogicalId(c64), id);
    EXPECT_EQ(*mesh.Resolve(0, DeviceId::Coords(c64)), id);
    EXPECT_EQ(*mesh.Resolve(mesh.size() - 1, id, DeviceIdType::kLogical), id);
    for (size_t a = 0; a < sizes.size(); ++a) {
      EXPECT_EQ(*mesh.axis_index(id, names[a]), expected[id][a]);
      EXPECT_EQ(*mesh.axis_size(names[a]), sizes[a]);
    }
    EXPECT_EQ(*mesh.GlobalDevice(id), id);
    EXPECT_EQ(*mesh.LogicalIdOfGlobal(id), id);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MeshLinearisationTest,
    ::testing::Values(std::vector<int>{1}, std::vector<int>{5},
                      std::vector<int>{2, 4}, std::vector<int>{3, 1},
                      std::vector<int>{2, 3, 4}, std::vector<int>{1, 2, 1}));

TEST(MeshTest, ToStringListsAxesInOrder) {
  EXPECT_EQ(MakeMesh({{"x", 2}, {"y", 4}}).ToString(), "{x: 2, y: 4}");
  EXPECT_EQ(MakeMesh({{"d", 8}}).ToString(), "{d: 8}");
}

TEST(MeshTest, ExplicitDeviceListMapsBothWays) {
  auto mesh = Mesh::Create({{"x", 2}, {"y", 2}}, {7, 3, 0, 5});
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_THAT(mesh->devices(), ElementsAre(7, 3, 0, 5));
  EXPECT_EQ(*mesh->GlobalDevice(1), 3);
  EXPECT_EQ(*mesh->LogicalIdOfGlobal(5), 3);
  EXPECT_EQ(*mesh->LogicalIdOfGlobal(7), 0);
  ExpectError(mesh->LogicalIdOfGlobal(4).status(),
              absl::StatusCode::kInvalidArgument,
              {"global device 4", "{x: 2, y: 2}"});
  ExpectError(mesh->LogicalIdOfGlobal(100).status(),
              absl::StatusCode::kInvalidArgument,
              {"global device 100", "{x: 2, y: 2}"});
  ExpectError(mesh->GlobalDevice(4).status(),
              absl::StatusCode::kInvalidArgument,
              {"logical device id 4", "{x: 2, y: 2}"});
}

TEST(MeshTest, ResolveScalarOn1DMesh) {
  Mesh mesh = MakeMesh({{"x", 4}});
  for (int caller = 0; caller < 4; ++caller) {
    for (int target = 0; target < 4; ++target) {
      EXPECT_EQ(*mesh.Resolve(caller, target), target);
      EXPECT_EQ(*mesh.Resolve(caller, target, DeviceIdType::kLogical), target);
    }
  }
  ExpectError(mesh.Resolve(0, 4).status(), absl::StatusCode::kInvalidArgument,
              {"coordinate 4", "'x'", "{x: 4}"});
  ExpectError(mesh.Resolve(0, -1).status(), absl::StatusCode::kInvalidArgument,
              {"-1", "{x: 4}"});
}

TEST(MeshTest, ResolvePartialSingleAxisKeepsCallerCoordinates) {
  Mesh mesh = MakeMesh({{"x", 2}, {"y", 4}});
  // Hand-computed: caller (1, 2) = logical 6.
  EXPECT_EQ(*mesh.Resolve(6, DeviceId::Partial({{{"y"}, 0}})), 4);  // (1, 0)
  EXPECT_EQ(*mesh.Resolve(6, DeviceId::Partial({{{"y"}, 3}})), 7);  // (1, 3)
  EXPECT_EQ(*mesh.Resolve(6, DeviceId::Partial({{{"x"}, 0}})), 2);  // (0, 2)
  // Caller (0, 1) = logical 1.
  EXPECT_EQ(*mesh.Resolve(1, DeviceId::Partial({{{"x"}, 1}})), 5);  // (1, 1)
  EXPECT_EQ(*mesh.Resolve(1, DeviceId::Partial({{{"y"}, 2}})), 2);  // (0, 2)
  // Both axes named separately: the caller does not matter.
  for (int caller = 0; caller < 8; ++caller) {
    EXPECT_EQ(
        *mesh.Resolve(caller, DeviceId::Partial({{{"y"}, 1}, {{"x"}, 1}})), 5);
  }
  // No parts: the caller itself.
  for (int caller = 0; caller < 8; ++caller) {
    EXPECT_EQ(*mesh.Resolve(caller, DeviceId::Partial({})), caller);
  }
}

TEST(MeshTest, ResolvePartialJointKeyDecomposesRowMajor) {
  Mesh mesh = MakeMesh({{"a", 2}, {"b", 3}, {"c", 2}});
  // Joint (a, c): index i sets a = i / 2, c = i % 2; b stays the caller's.
  // Caller (0, 2, 1) = 0*6 + 2*2 + 1 = 5.
  for (int i = 0; i < 4; ++i) {
    const int a = i / 2, c = i % 2;
    EXPECT_EQ(*mesh.Resolve(5, DeviceId::Partial({{{"a", "c"}, i}})),
              a * 6 + 2 * 2 + c)
        << "index " << i;
  }
  // Joint key in the other order (c, a): c = i / 2, a = i % 2.
  for (int i = 0; i < 4; ++i) {
    const int c = i / 2, a = i % 2;
    EXPECT_EQ(*mesh.Resolve(5, DeviceId::Partial({{{"c", "a"}, i}})),
              a * 6 + 2 * 2 + c)
        << "index " << i;
  }
  // Joint (a, b) with index 4 = (1, 1), from caller (1, 0, 0) = 6: c stays 0.
  EXPECT_EQ(*mesh.Resolve(6, DeviceId::Partial({{{"a", "b"}, 4}})),
            1 * 6 + 1 * 2 + 0);
  // From caller (0, 0, 1) = 1: c stays 1.
  EXPECT_EQ(*mesh.Resolve(1, DeviceId::Partial({{{"a", "b"}, 4}})),
            1 * 6 + 1 * 2 + 1);
  ExpectError(mesh.Resolve(0, DeviceId::Partial({{{"a", "c"}, 4}})).status(),
              absl::StatusCode::kInvalidArgument,
              {"index 4", "('a', 'c')", "size 4", "{a: 2, b: 3, c: 2}"});
}

TEST(MeshTest, GroupAndRingOnHostByX) {
  Mesh mesh = MakeMesh({{"host", 2}, {"x", 4}});
  const std::vector<std::string> x = {"x"};
  const std::vector<std::string> host = {"host"};
  const std::vector<std::string> both = {"host", "x"};
  const std::vector<std::string> both_reversed = {"x", "host"};
  for (int id = 0; id < 8; ++id) {
    const int h = id / 4, i = id % 4;
    // psum over "x": one ring of 4 per host.
    EXPECT_THAT(*mesh.Group(id, x),
                ElementsAre(h * 4, h * 4 + 1, h * 4 + 2, h * 4 + 3));
    const RingPosition ring = *mesh.Ring(id, x);
    EXPECT_EQ(ring.index, i);
    EXPECT_EQ(ring.size(), 4);
    EXPECT_EQ(ring.right(), h * 4 + (i + 1) % 4);
    EXPECT_EQ(ring.left(), h * 4 + (i + 3) % 4);
    EXPECT_EQ(ring.Peer(6), h * 4 + (i + 2) % 4);
    EXPECT_EQ(ring.Peer(-9), h * 4 + (i + 3) % 4);
    EXPECT_EQ(ring.PositionAt(-9), (i + 3) % 4);
    // Over both axes: all 8 devices in row-major order.
    EXPECT_THAT(*mesh.Group(id, both), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
    EXPECT_EQ(mesh.Ring(id, both)->right(), (id + 1) % 8);
    // Reversed axis order: "host" varies fastest.
    EXPECT_THAT(*mesh.Group(id, both_reversed),
                ElementsAre(0, 4, 1, 5, 2, 6, 3, 7));
    // Over "host": stride-4 pairs.
    EXPECT_THAT(*mesh.Group(id, host), ElementsAre(i, i + 4));
    EXPECT_EQ(mesh.Ring(id, host)->right(), (id + 4) % 8);
    EXPECT_EQ(mesh.Ring(id, host)->Peer(0), id);
    // No axes: the device alone.
    EXPECT_THAT(*mesh.Group(id, {}), ElementsAre(id));
  }
}

TEST(MeshTest, GroupErrors) {
  Mesh mesh = MakeMesh({{"host", 2}, {"x", 4}});
  const std::vector<std::string> unknown = {"y"};
  const std::vector<std::string> twice = {"x", "x"};
  const std::vector<std::string> x = {"x"};
  ExpectError(mesh.Group(0, unknown).status(), absl::StatusCode::kNotFound,
              {"'y'", "{host: 2, x: 4}"});
  ExpectError(mesh.Group(0, twice).status(), absl::StatusCode::kInvalidArgument,
              {"'x'", "{host: 2, x: 4}"});
  ExpectError(mesh.Group(8, x).status(), absl::StatusCode::kInvalidArgument,
              {"8", "{host: 2, x: 4}"});
  ExpectError(mesh.Ring(-1, x).status(), absl::StatusCode::kInvalidArgument,
              {"-1", "{host: 2, x: 4}"});
}

TEST(MeshTest, DeviceIdToString) {
  EXPECT_EQ(DeviceId(3).ToString(), "3");
  EXPECT_EQ(DeviceId::Coords({1, 5}).ToString(), "(1, 5)");
  EXPECT_EQ(DeviceId::Partial({{{"x"}, 1}, {{"y", "z"}, 5}}).ToString(),
            "{'x': 1, ('y', 'z'): 5}");
}

// Every bad input to `Create`: the error names the value and the mesh.
TEST(MeshTest, CreateErrors) {
  ExpectError(Mesh::Create({{"x", 2}, {"y", 4}}, {0, 1, 2}).status(),
              absl::StatusCode::kInvalidArgument,
              {"is 8", "3 devices", "{x: 2, y: 4}"});
  ExpectError(Mesh::Create({{"x", 2}, {"", 4}}).status(),
              absl::StatusCode::kInvalidArgument,
              {"axis 1", "empty name", "{x: 2, : 4}"});
  ExpectError(Mesh::Create({{"x", 2}, {"x", 4}}).status(),
              absl::StatusCode::kInvalidArgument,
              {"duplicate axis name 'x'", "{x: 2, x: 4}"});
  ExpectError(Mesh::Create({{"x", 2}, {"y", 0}}).status(),
              absl::StatusCode::kInvalidArgument,
              {"'y'", "size 0", "{x: 2, y: 0}"});
  ExpectError(Mesh::Create({{"x", -3}}).status(),
              absl::StatusCode::kInvalidArgument,
              {"'x'", "size -3", "{x: -3}"});
  ExpectError(Mesh::Create({{"x", 2}, {"y", 2}}, {0, 1, 1, 3}).status(),
              absl::StatusCode::kInvalidArgument,
              {"global device 1", "twice", "{x: 2, y: 2}"});
  ExpectError(Mesh::Create({{"x", 2}}, {0, -2}).status(),
              absl::StatusCode::kInvalidArgument,
              {"negative global device -2", "{x: 2}"});
}

// Every bad id: the error names the id and the mesh.
TEST(MeshTest, ResolveErrors) {
  Mesh mesh = MakeMesh({{"x", 2}, {"y", 4}});
  const std::string m = "{x: 2, y: 4}";
  ExpectError(mesh.Resolve(0, DeviceId::Coords({1, 5})).status(),
              absl::StatusCode::kInvalidArgument,
              {"(1, 5)", "coordinate 5", "'y'", "size 4", m});
  ExpectError(mesh.Resolve(0, DeviceId::Coords({-1, 0})).status(),
              absl::StatusCode::kInvalidArgument,
              {"(-1, 0)", "coordinate -1", "'x'", m});
  ExpectError(mesh.Resolve(0, DeviceId::Coords({1, 2, 0})).status(),
              absl::StatusCode::kInvalidArgument,
              {"(1, 2, 0)", "3 coordinates", "2 axes", m});
  ExpectError(mesh.Resolve(0, DeviceId::Coords({1})).status(),
              absl::StatusCode::kInvalidArgument, {"(1)", "1 coordinates", m});
  ExpectError(mesh.Resolve(0, 3).status(), absl::StatusCode::kInvalidArgument,
              {"scalar MESH device id 3", m});
  ExpectError(mesh.Resolve(0, DeviceId::Coords({1, 1}), DeviceIdType::kLogical)
                  .status(),
              absl::StatusCode::kInvalidArgument, {"LOGICAL", "(1, 1)", m});
  ExpectError(
      mesh.Resolve(0, DeviceId::Partial({{{"x"}, 1}}), DeviceIdType::kLogical)
          .status(),
      absl::StatusCode::kInvalidArgument, {"LOGICAL", "{'x': 1}", m});
  ExpectError(mesh.Resolve(0, 8, DeviceIdType::kLogical).status(),
              absl::StatusCode::kInvalidArgument, {"LOGICAL device id 8", m});
  ExpectError(mesh.Resolve(0, DeviceId::Partial({{{"z"}, 0}})).status(),
              absl::StatusCode::kNotFound, {"{'z': 0}", "unknown axis 'z'", m});
  ExpectError(
      mesh.Resolve(0, DeviceId::Partial({{{"x"}, 0}, {{"x"}, 1}})).status(),
      absl::StatusCode::kInvalidArgument,
      {"{'x': 0, 'x': 1}", "axis 'x' twice", m});
  ExpectError(mesh.Resolve(0, DeviceId::Partial({{{"x", "y"}, 1}, {{"y"}, 1}}))
                  .status(),
              absl::StatusCode::kInvalidArgument, {"axis 'y' twice", m});
  ExpectError(mesh.Resolve(0, DeviceId::Partial({{{"y"}, 4}})).status(),
              absl::StatusCode::kInvalidArgument,
              {"{'y': 4}", "index 4", "size 4", m});
  ExpectError(mesh.Resolve(0, DeviceId::Partial({{{"x", "y"}, 8}})).status(),
              absl::StatusCode::kInvalidArgument,
              {"index 8", "('x', 'y')", "size 8", m});
  ExpectError(mesh.Resolve(0, DeviceId::Partial({{{}, 0}})).status(),
              absl::StatusCode::kInvalidArgument, {"no axis", m});
  ExpectError(mesh.Resolve(9, 0, DeviceIdType::kLogical).status(),
              absl::StatusCode::kInvalidArgument, {"caller 9", m});
  ExpectError(mesh.Coords(8).status(), absl::StatusCode::kInvalidArgument,
              {"logical device id 8", m});
  ExpectError(mesh.axis_size("z").status(), absl::StatusCode::kNotFound,
              {"'z'", m});
  ExpectError(mesh.axis_index(0, "z").status(), absl::StatusCode::kNotFound,
              {"'z'", m});
  ExpectError(mesh.axis_index(-1, "x").status(),
              absl::StatusCode::kInvalidArgument, {"-1", m});
}

}  // namespace
}  // namespace meshdma
