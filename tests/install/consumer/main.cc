// Uses the installed headers and libraries: builds a 2x2 mesh, resolves ids
// and shards an array over it, and checks the results against closed forms.
// Exit status 0 when every check passes.
#include <meshdma/topology/host_topology.h>
#include <meshdma/topology/mesh.h>
#include <meshdma/topology/partition_spec.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {

int failures = 0;

void Check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "consumer: check failed: %s\n", what.c_str());
    ++failures;
  }
}

}  // namespace

int main() {
  absl::StatusOr<meshdma::Mesh> mesh =
      meshdma::Mesh::Create({{"x", 2}, {"y", 2}});
  if (!mesh.ok()) {
    std::fprintf(stderr, "consumer: %s\n", mesh.status().ToString().c_str());
    return 1;
  }
  Check(mesh->ToString() == "{x: 2, y: 2}", "ToString");
  for (int id = 0; id < 4; ++id) {
    Check(*mesh->axis_index(id, "x") == id / 2, "axis_index x");
    Check(*mesh->axis_index(id, "y") == id % 2, "axis_index y");
    // The right neighbour along y.
    auto right = mesh->Resolve(
        id, meshdma::DeviceId::Partial({{{"y"}, (id % 2 + 1) % 2}}));
    Check(right.ok() && *right == (id / 2) * 2 + (id + 1) % 2, "Resolve");
  }
  Check(!mesh->Resolve(0, meshdma::DeviceId::Coords({2, 0})).ok(),
        "out-of-range id is an error");

  const std::vector<int64_t> shape = {4, 6};
  meshdma::PartitionSpec spec({{"x"}, {"y"}});
  auto shard = spec.ShardOf(*mesh, shape, 3);
  Check(shard.ok() && shard->offsets == std::vector<int64_t>{2, 3} &&
            shard->extents == std::vector<int64_t>{2, 3},
        "ShardOf");

  meshdma::HostTopology topology = meshdma::HostTopology::Flat(2);
  Check(topology.num_cores() == 2, "HostTopology::Flat");

  if (failures == 0)
    std::printf("consumer: mesh %s OK\n", mesh->ToString().c_str());
  return failures == 0 ? 0 : 1;
}
