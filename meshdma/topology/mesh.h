// A device mesh: named axes with sizes over an ordered list of global devices
// (docs/semantics.md §2).
//
// A device's position in the list is its LOGICAL id; its MESH id is the tuple
// of coordinates, one per axis in axis order, with LOGICAL = row-major
// linearisation (last axis fastest). Every function that takes an id checks
// it and returns an error naming the id and the mesh ("{x: 2, y: 4}").
#ifndef MESHDMA_TOPOLOGY_MESH_H_
#define MESHDMA_TOPOLOGY_MESH_H_

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace meshdma {

enum class DeviceIdType { kMesh, kLogical };

// A device id as Pallas accepts it: a scalar (LOGICAL id, or the coordinate of
// a 1-D mesh), one coordinate per axis, or a partial id of axis -> index pairs
// in which axes left out keep the caller's coordinate. A partial key may name
// several axes jointly; its index is then decomposed row-major over them.
class DeviceId {
 public:
  struct AxisIndex {
    std::vector<std::string> axes;  // One axis, or several jointly.
    int64_t index = 0;
  };
  DeviceId(int64_t scalar) : v_(scalar) {}  // NOLINT: implicit like Pallas.
  static DeviceId Coords(std::vector<int64_t> coords) {
    return DeviceId(std::move(coords));
  }
  static DeviceId Partial(std::vector<AxisIndex> parts) {
    return DeviceId(std::move(parts));
  }
  const std::variant<int64_t, std::vector<int64_t>, std::vector<AxisIndex>>&
  value() const {
    return v_;
  }
  std::string ToString() const;

 private:
  // Constrained so that `DeviceId(3)` with an `int` picks the public scalar
  // constructor instead of this one.
  template <typename T>
  requires(!std::is_arithmetic_v<T>) explicit DeviceId(T v)
      : v_(std::move(v)) {}
  std::variant<int64_t, std::vector<int64_t>, std::vector<AxisIndex>> v_;
};

// A device's place on a ring: the ring's members in order and the device's
// position among them. Ring steps wrap around: step `offset` may be negative
// or larger than the ring. `Mesh::Ring` gives the ring of a group of axes;
// every ring step in the library goes through this type.
struct RingPosition {
  // LOGICAL ids in ring order; inline up to 16, so that copying a position
  // (every collective call does) allocates nothing.
  absl::InlinedVector<int, 16> members;
  int index = 0;  // The device's position in `members`.

  int size() const { return static_cast<int>(members.size()); }
  // The position `offset` steps after the device's own, in [0, size()).
  int PositionAt(int offset) const {
    const int n = size();
    return ((index + offset) % n + n) % n;
  }
  // LOGICAL id of the member `offset` steps after the device.
  int Peer(int offset) const { return members[PositionAt(offset)]; }
  int right() const { return Peer(1); }
  int left() const { return Peer(-1); }
};

// The most devices a mesh may have: more is a mistake, not a machine.
inline constexpr int64_t kMaxMeshDevices = int64_t{1} << 24;

class Mesh {
 public:
  using Axis = std::pair<std::string, int>;

  // A mesh over `devices` (global device indices, each at most once). The
  // product of the axis sizes must equal `devices.size()`; names must be
  // non-empty and distinct; sizes >= 1.
  static absl::StatusOr<Mesh> Create(std::vector<Axis> axes,
                                     std::vector<int> devices);
  // A mesh over global devices 0..product-1.
  static absl::StatusOr<Mesh> Create(std::vector<Axis> axes);

  int size() const { return static_cast<int>(devices_.size()); }
  int num_axes() const { return static_cast<int>(axes_.size()); }
  const std::vector<Axis>& axes() const { return axes_; }
  // Position of `axis` in the axis order, or NotFound naming the mesh.
  absl::StatusOr<int> AxisPosition(std::string_view axis) const;
  absl::StatusOr<int> axis_size(std::string_view axis) const;
  // The coordinate of device `logical_id` along `axis`.
  absl::StatusOr<int> axis_index(int logical_id, std::string_view axis) const;

  // MESH <-> LOGICAL.
  absl::StatusOr<std::vector<int>> Coords(int logical_id) const;
  absl::StatusOr<int> LogicalId(std::span<const int64_t> coords) const;

  // Resolves `id` as seen from device `caller` (a LOGICAL id) to a LOGICAL
  // id, following docs/semantics.md §2.
  absl::StatusOr<int> Resolve(int caller, const DeviceId& id,
                              DeviceIdType type = DeviceIdType::kMesh) const;

  // Global device index of mesh position `logical_id`, and back.
  absl::StatusOr<int> GlobalDevice(int logical_id) const;
  absl::StatusOr<int> LogicalIdOfGlobal(int global_device) const;
  const std::vector<int>& devices() const { return devices_; }

  // The devices a collective over `axes` talks to from `logical_id`: those
  // whose coordinates differ only along `axes`, ordered row-major over `axes`
  // (in the order given). Its size is the product of those axis sizes and
  // `logical_id` is in it. Unknown or repeated axes are errors.
  absl::StatusOr<std::vector<int>> Group(
      int logical_id, std::span<const std::string> axes) const;
  // The ring `Group(logical_id, axes)` forms, seen from `logical_id`. Errors
  // are `Group`'s.
  absl::StatusOr<RingPosition> Ring(int logical_id,
                                    std::span<const std::string> axes) const;

  std::string ToString() const;  // "{x: 2, y: 4}"

 private:
  std::vector<Axis> axes_;
  std::vector<int> devices_;
  std::vector<int> strides_;            // Row-major stride of each axis.
  std::vector<int> logical_of_global_;  // -1 where a device is not in the mesh.
};

}  // namespace meshdma

#endif  // MESHDMA_TOPOLOGY_MESH_H_
