// PartitionSpec: how an array's dimensions are sharded over mesh axes
// (docs/semantics.md §8). Entry d lists the axes dimension d is split over:
// none (replicated), one, or several (split over their product, the first axis
// major). Dimensions past the spec's length are replicated.
#ifndef MESHDMA_TOPOLOGY_PARTITION_SPEC_H_
#define MESHDMA_TOPOLOGY_PARTITION_SPEC_H_

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "meshdma/topology/mesh.h"

namespace meshdma {

class PartitionSpec {
 public:
  using Dim = std::vector<std::string>;  // Empty: replicated.
  PartitionSpec() = default;
  PartitionSpec(std::initializer_list<Dim> dims) : dims_(dims) {}
  explicit PartitionSpec(std::vector<Dim> dims) : dims_(std::move(dims)) {}

  const std::vector<Dim>& dims() const { return dims_; }
  std::string ToString() const;  // "P('x', None, ('x', 'y'))"

  // Checks the spec against `mesh` and a global `shape`: no more entries than
  // dimensions, every axis known, no axis used twice, every sharded dimension
  // divisible by the product of its axes. Errors name the dimension, the
  // axis, the size and the mesh.
  absl::Status Validate(const Mesh& mesh, std::span<const int64_t> shape) const;

  // Shape of one shard.
  absl::StatusOr<std::vector<int64_t>> LocalShape(
      const Mesh& mesh, std::span<const int64_t> shape) const;

  // Offsets and extents of device `logical_id`'s shard in the global array.
  struct Shard {
    std::vector<int64_t> offsets;
    std::vector<int64_t> extents;
  };
  absl::StatusOr<Shard> ShardOf(const Mesh& mesh,
                                std::span<const int64_t> shape,
                                int logical_id) const;

 private:
  std::vector<Dim> dims_;
};

}  // namespace meshdma

#endif  // MESHDMA_TOPOLOGY_PARTITION_SPEC_H_
