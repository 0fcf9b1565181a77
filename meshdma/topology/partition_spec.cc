#include "meshdma/topology/partition_spec.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "meshdma/base/status_macros.h"

namespace meshdma {
namespace {

std::string DimToString(const PartitionSpec::Dim& dim) {
  if (dim.empty()) return "None";
  auto quoted = [](std::string* out, const std::string& a) {
    absl::StrAppend(out, "'", a, "'");
  };
  if (dim.size() == 1) return absl::StrCat("'", dim[0], "'");
  return absl::StrCat("(", absl::StrJoin(dim, ", ", quoted), ")");
}

std::string ShapeToString(std::span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// The product of the sizes of `dim`'s axes (1 for a replicated dimension).
// Assumes the spec was validated.
int64_t DimProduct(const Mesh& mesh, const PartitionSpec::Dim& dim) {
  int64_t product = 1;
  for (const std::string& axis : dim) product *= *mesh.axis_size(axis);
  return product;
}

}  // namespace

std::string PartitionSpec::ToString() const {
  return absl::StrCat("P(",
                      absl::StrJoin(dims_, ", ",
                                    [](std::string* out, const Dim& d) {
                                      absl::StrAppend(out, DimToString(d));
                                    }),
                      ")");
}

absl::Status PartitionSpec::Validate(const Mesh& mesh,
                                     std::span<const int64_t> shape) const {
  auto where = [&] {
    return absl::StrCat(" (spec ", ToString(), ", shape ", ShapeToString(shape),
                        ", mesh ", mesh.ToString(), ")");
  };
  if (dims_.size() > shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "partition spec has ", dims_.size(), " entries but the array has ",
        shape.size(), " dimensions", where()));
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "array dimension ", d, " has negative size ", shape[d], where()));
    }
  }
  std::vector<std::string> used;
  std::vector<size_t> used_in;
  for (size_t d = 0; d < dims_.size(); ++d) {
    int64_t product = 1;
    for (const std::string& axis : dims_[d]) {
      absl::StatusOr<int> size = mesh.axis_size(axis);
      if (!size.ok()) {
        return absl::NotFoundError(absl::StrCat(
            "dimension ", d, " names unknown mesh axis '", axis, "'", where()));
      }
      for (size_t u = 0; u < used.size(); ++u) {
        if (used[u] == axis) {
          return absl::InvalidArgumentError(
              absl::StrCat("mesh axis '", axis, "' is used twice (dimensions ",
                           used_in[u], " and ", d, ")", where()));
        }
      }
      used.push_back(axis);
      used_in.push_back(d);
      product *= *size;
    }
    if (shape[d] % product != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "array dimension ", d, " of size ", shape[d], " is not divisible by ",
          product, ", the product of mesh axes ", DimToString(dims_[d]),
          where()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> PartitionSpec::LocalShape(
    const Mesh& mesh, std::span<const int64_t> shape) const {
  MESHDMA_RETURN_IF_ERROR(Validate(mesh, shape));
  std::vector<int64_t> local(shape.begin(), shape.end());
  for (size_t d = 0; d < dims_.size(); ++d) {
    local[d] /= DimProduct(mesh, dims_[d]);
  }
  return local;
}

absl::StatusOr<PartitionSpec::Shard> PartitionSpec::ShardOf(
    const Mesh& mesh, std::span<const int64_t> shape, int logical_id) const {
  MESHDMA_RETURN_IF_ERROR(Validate(mesh, shape));
  MESHDMA_ASSIGN_OR_RETURN(std::vector<int> coords, mesh.Coords(logical_id));
  Shard shard;
  shard.offsets.assign(shape.size(), 0);
  shard.extents.assign(shape.begin(), shape.end());
  for (size_t d = 0; d < dims_.size(); ++d) {
    // The shard index along `d` is the device's coordinates along the
    // dimension's axes, linearised row-major (first axis major).
    int64_t index = 0;
    for (const std::string& axis : dims_[d]) {
      const int pos = *mesh.AxisPosition(axis);
      index = index * mesh.axes()[pos].second + coords[pos];
    }
    shard.extents[d] = shape[d] / DimProduct(mesh, dims_[d]);
    shard.offsets[d] = index * shard.extents[d];
  }
  return shard;
}

}  // namespace meshdma
