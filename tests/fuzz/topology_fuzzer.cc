// Fuzzes the mesh and partition-spec entry points (meshdma/topology/):
// arbitrary axis names and sizes, device lists, specs and global shapes, then
// every query that takes an index, coordinates or a shape.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "meshdma/topology/mesh.h"
#include "meshdma/topology/partition_spec.h"

namespace {

std::string Name(FuzzedDataProvider& in) {
  // Mostly a few real names, so that specs hit known axes.
  static const char* kNames[] = {"x", "y", "z", ""};
  if (in.ConsumeBool()) return kNames[in.ConsumeIntegralInRange<int>(0, 3)];
  return in.ConsumeRandomLengthString(8);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  std::vector<meshdma::Mesh::Axis> axes;
  const int num_axes = in.ConsumeIntegralInRange<int>(0, 4);
  for (int i = 0; i < num_axes; ++i) {
    const int axis_size = in.ConsumeBool()
                              ? in.ConsumeIntegralInRange<int>(-1, 8)
                              : in.ConsumeIntegral<int>();
    axes.emplace_back(Name(in), axis_size);
  }
  absl::StatusOr<meshdma::Mesh> mesh;
  if (in.ConsumeBool()) {
    std::vector<int> devices;
    const int n = in.ConsumeIntegralInRange<int>(0, 64);
    for (int i = 0; i < n; ++i) {
      devices.push_back(in.ConsumeIntegralInRange<int>(-2, 70));
    }
    mesh = meshdma::Mesh::Create(axes, devices);
  } else {
    mesh = meshdma::Mesh::Create(axes);
  }
  if (!mesh.ok()) return 0;
  (void)mesh->ToString();
  const int id = in.ConsumeIntegralInRange<int>(-2, mesh->size() + 1);
  const std::string axis = Name(in);
  (void)mesh->AxisPosition(axis);
  (void)mesh->axis_size(axis);
  (void)mesh->axis_index(id, axis);
  (void)mesh->Coords(id);
  std::vector<int64_t> coords;
  const int num_coords = in.ConsumeIntegralInRange<int>(0, 5);
  for (int i = 0; i < num_coords; ++i) {
    coords.push_back(in.ConsumeIntegralInRange<int64_t>(-9, 9));
  }
  (void)mesh->LogicalId(coords);
  (void)mesh->GlobalDevice(id);
  (void)mesh->LogicalIdOfGlobal(in.ConsumeIntegralInRange<int>(-2, 70));
  const auto type = in.ConsumeBool() ? meshdma::DeviceIdType::kMesh
                                     : meshdma::DeviceIdType::kLogical;
  (void)mesh->Resolve(id, meshdma::DeviceId(in.ConsumeIntegral<int64_t>()),
                      type);
  (void)mesh->Resolve(id, meshdma::DeviceId::Coords(coords), type);
  std::vector<std::string> group_axes;
  const int num_group_axes = in.ConsumeIntegralInRange<int>(0, 3);
  for (int i = 0; i < num_group_axes; ++i) group_axes.push_back(Name(in));
  (void)mesh->Ring(id, group_axes);
  (void)mesh->Group(id, group_axes);

  std::vector<meshdma::PartitionSpec::Dim> dims;
  const int rank = in.ConsumeIntegralInRange<int>(0, 5);
  for (int i = 0; i < rank; ++i) {
    meshdma::PartitionSpec::Dim dim;
    const int n = in.ConsumeIntegralInRange<int>(0, 3);
    for (int j = 0; j < n; ++j) dim.push_back(Name(in));
    dims.push_back(dim);
  }
  const meshdma::PartitionSpec spec(dims);
  (void)spec.ToString();
  std::vector<int64_t> shape;
  const int shape_rank = in.ConsumeIntegralInRange<int>(0, 5);
  for (int i = 0; i < shape_rank; ++i) {
    shape.push_back(in.ConsumeBool()
                        ? in.ConsumeIntegralInRange<int64_t>(-1, 64)
                        : in.ConsumeIntegral<int64_t>());
  }
  (void)spec.Validate(*mesh, shape);
  (void)spec.LocalShape(*mesh, shape);
  (void)spec.ShardOf(*mesh, shape, id);
  return 0;
}
