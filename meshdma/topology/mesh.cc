#include "meshdma/topology/mesh.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "meshdma/base/status_macros.h"

namespace meshdma {
namespace {

std::string JoinAxes(const std::vector<std::string>& axes) {
  if (axes.size() == 1) return absl::StrCat("'", axes[0], "'");
  return absl::StrCat("(",
                      absl::StrJoin(axes, ", ",
                                    [](std::string* out, const std::string& a) {
                                      absl::StrAppend(out, "'", a, "'");
                                    }),
                      ")");
}

std::string AxesToString(const std::vector<Mesh::Axis>& axes) {
  return absl::StrCat("{",
                      absl::StrJoin(axes, ", ",
                                    [](std::string* out, const Mesh::Axis& a) {
                                      absl::StrAppend(out, a.first, ": ",
                                                      a.second);
                                    }),
                      "}");
}

}  // namespace

std::string DeviceId::ToString() const {
  if (const auto* scalar = std::get_if<int64_t>(&v_)) {
    return absl::StrCat(*scalar);
  }
  if (const auto* coords = std::get_if<std::vector<int64_t>>(&v_)) {
    return absl::StrCat("(", absl::StrJoin(*coords, ", "), ")");
  }
  const auto& parts = std::get<std::vector<AxisIndex>>(v_);
  return absl::StrCat("{",
                      absl::StrJoin(parts, ", ",
                                    [](std::string* out, const AxisIndex& p) {
                                      absl::StrAppend(out, JoinAxes(p.axes),
                                                      ": ", p.index);
                                    }),
                      "}");
}

absl::StatusOr<Mesh> Mesh::Create(std::vector<Axis> axes,
                                  std::vector<int> devices) {
  const std::string mesh_str = AxesToString(axes);
  // Step 1: axis names and sizes.
  int64_t product = 1;
  for (size_t i = 0; i < axes.size(); ++i) {
    const auto& [name, size] = axes[i];
    if (name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("axis ", i, " has an empty name in mesh ", mesh_str));
    }
    for (size_t j = 0; j < i; ++j) {
      if (axes[j].first == name) {
        return absl::InvalidArgumentError(absl::StrCat(
            "duplicate axis name '", name, "' in mesh ", mesh_str));
      }
    }
    if (size < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("axis '", name, "' has size ", size,
                       " (must be >= 1) in mesh ", mesh_str));
    }
    product *= size;
    if (product > kMaxMeshDevices) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mesh ", mesh_str, " has more than ", kMaxMeshDevices, " devices"));
    }
  }
  // Step 2: the device list matches the axes and names each device once.
  if (product != static_cast<int64_t>(devices.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the product of the axis sizes is ", product, " but ", devices.size(),
        " devices were given for mesh ", mesh_str));
  }
  int max_device = -1;
  for (int d : devices) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative global device ", d,
                       " in the device list of mesh ", mesh_str));
    }
    max_device = std::max(max_device, d);
  }
  std::vector<int> logical_of_global(max_device + 1, -1);
  for (size_t i = 0; i < devices.size(); ++i) {
    int& slot = logical_of_global[devices[i]];
    if (slot != -1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "global device ", devices[i], " appears twice (mesh positions ", slot,
          " and ", i, ") in the device list of mesh ", mesh_str));
    }
    slot = static_cast<int>(i);
  }
  // Step 3: row-major strides, last axis fastest.
  Mesh mesh;
  mesh.strides_.assign(axes.size(), 1);
  for (int i = static_cast<int>(axes.size()) - 2; i >= 0; --i) {
    mesh.strides_[i] = mesh.strides_[i + 1] * axes[i + 1].second;
  }
  mesh.axes_ = std::move(axes);
  mesh.devices_ = std::move(devices);
  mesh.logical_of_global_ = std::move(logical_of_global);
  return mesh;
}

absl::StatusOr<Mesh> Mesh::Create(std::vector<Axis> axes) {
  int64_t product = 1;
  for (const auto& [name, size] : axes) {
    // Invalid sizes are reported by the main overload; only avoid a huge or
    // negative device list here.
    if (size < 1) {
      product = 0;
      break;
    }
    product *= size;
    if (product > kMaxMeshDevices) break;
  }
  if (product > kMaxMeshDevices) {
    return absl::InvalidArgumentError(
        absl::StrCat("mesh ", AxesToString(axes), " has more than ",
                     kMaxMeshDevices, " devices"));
  }
  std::vector<int> devices(product);
  for (int i = 0; i < static_cast<int>(product); ++i) devices[i] = i;
  return Create(std::move(axes), std::move(devices));
}

std::string Mesh::ToString() const { return AxesToString(axes_); }

absl::StatusOr<int> Mesh::AxisPosition(std::string_view axis) const {
  for (int i = 0; i < num_axes(); ++i) {
    if (axes_[i].first == axis) return i;
  }
  return absl::NotFoundError(absl::StrCat("unknown axis '", std::string(axis),
                                          "' in mesh ", ToString()));
}

absl::StatusOr<int> Mesh::axis_size(std::string_view axis) const {
  MESHDMA_ASSIGN_OR_RETURN(int pos, AxisPosition(axis));
  return axes_[pos].second;
}

absl::StatusOr<int> Mesh::axis_index(int logical_id,
                                     std::string_view axis) const {
  MESHDMA_ASSIGN_OR_RETURN(std::vector<int> coords, Coords(logical_id));
  MESHDMA_ASSIGN_OR_RETURN(int pos, AxisPosition(axis));
  return coords[pos];
}

absl::StatusOr<std::vector<int>> Mesh::Coords(int logical_id) const {
  if (logical_id < 0 || logical_id >= size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("logical device id ", logical_id, " out of range [0, ",
                     size(), ") in mesh ", ToString()));
  }
  std::vector<int> coords(axes_.size());
  for (size_t i = 0; i < axes_.size(); ++i) {
    coords[i] = (logical_id / strides_[i]) % axes_[i].second;
  }
  return coords;
}

absl::StatusOr<int> Mesh::LogicalId(std::span<const int64_t> coords) const {
  auto id_str = [&] {
    return absl::StrCat("(", absl::StrJoin(coords, ", "), ")");
  };
  if (coords.size() != axes_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device id ", id_str(), " has ", coords.size(),
        " coordinates but mesh ", ToString(), " has ", axes_.size(), " axes"));
  }
  int64_t logical = 0;
  for (size_t i = 0; i < axes_.size(); ++i) {
    if (coords[i] < 0 || coords[i] >= axes_[i].second) {
      return absl::InvalidArgumentError(
          absl::StrCat("device id ", id_str(), ": coordinate ", coords[i],
                       " out of range for axis '", axes_[i].first, "' of size ",
                       axes_[i].second, " in mesh ", ToString()));
    }
    logical += coords[i] * strides_[i];
  }
  return static_cast<int>(logical);
}

absl::StatusOr<int> Mesh::Resolve(int caller, const DeviceId& id,
                                  DeviceIdType type) const {
  // Step 1: the caller and the id's type.
  if (caller < 0 || caller >= size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "caller ", caller, " resolving device id ", id.ToString(),
        " is out of range [0, ", size(), ") in mesh ", ToString()));
  }
  if (type != DeviceIdType::kMesh && type != DeviceIdType::kLogical) {
    return absl::InvalidArgumentError(
        absl::StrCat("device id type (DeviceIdType) ", static_cast<int>(type),
                     " of device id ", id.ToString(),
                     " is not one of kMesh (0), kLogical (1)"));
  }
  const auto& v = id.value();

  // Step 2, LOGICAL: the linear index itself, given as a scalar.
  if (type == DeviceIdType::kLogical) {
    const auto* scalar = std::get_if<int64_t>(&v);
    if (scalar == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "LOGICAL device id ", id.ToString(),
          " must be a scalar, not coordinates, in mesh ", ToString()));
    }
    if (*scalar < 0 || *scalar >= size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("LOGICAL device id ", *scalar, " out of range [0, ",
                       size(), ") in mesh ", ToString()));
    }
    return static_cast<int>(*scalar);
  }

  // Step 3, MESH, scalar: only a 1-D mesh takes one.
  if (const auto* scalar = std::get_if<int64_t>(&v)) {
    if (num_axes() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "scalar MESH device id ", *scalar, " needs a 1-D mesh but mesh ",
          ToString(), " has ", num_axes(), " axes"));
    }
    const int64_t coord = *scalar;
    return LogicalId(std::span<const int64_t>(&coord, 1));
  }

  // Step 4, MESH, full coordinates.
  if (const auto* coords = std::get_if<std::vector<int64_t>>(&v)) {
    return LogicalId(*coords);
  }

  // Step 5, MESH, partial: start from the caller's coordinates; each part
  // overrides
  // the coordinates of its axes, a joint key decomposed row-major over them.
  const auto& parts = std::get<std::vector<DeviceId::AxisIndex>>(v);
  MESHDMA_ASSIGN_OR_RETURN(std::vector<int> caller_coords, Coords(caller));
  std::vector<int64_t> coords(caller_coords.begin(), caller_coords.end());
  std::vector<bool> named(axes_.size(), false);
  for (const DeviceId::AxisIndex& part : parts) {
    if (part.axes.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("device id ", id.ToString(),
                       " has a part with no axis in mesh ", ToString()));
    }
    std::vector<int> positions;
    int64_t extent = 1;
    for (const std::string& axis : part.axes) {
      auto pos = AxisPosition(axis);
      if (!pos.ok()) {
        return absl::NotFoundError(absl::StrCat("device id ", id.ToString(),
                                                ": unknown axis '", axis,
                                                "' in mesh ", ToString()));
      }
      if (named[*pos]) {
        return absl::InvalidArgumentError(
            absl::StrCat("device id ", id.ToString(), " names axis '", axis,
                         "' twice in mesh ", ToString()));
      }
      named[*pos] = true;
      positions.push_back(*pos);
      extent *= axes_[*pos].second;
    }
    if (part.index < 0 || part.index >= extent) {
      return absl::InvalidArgumentError(
          absl::StrCat("device id ", id.ToString(), ": index ", part.index,
                       " out of range for ", JoinAxes(part.axes), " of size ",
                       extent, " in mesh ", ToString()));
    }
    int64_t rest = part.index;
    for (int k = static_cast<int>(positions.size()) - 1; k >= 0; --k) {
      const int axis_size = axes_[positions[k]].second;
      coords[positions[k]] = rest % axis_size;
      rest /= axis_size;
    }
  }
  return LogicalId(coords);
}

absl::StatusOr<int> Mesh::GlobalDevice(int logical_id) const {
  if (logical_id < 0 || logical_id >= size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("logical device id ", logical_id, " out of range [0, ",
                     size(), ") in mesh ", ToString()));
  }
  return devices_[logical_id];
}

absl::StatusOr<int> Mesh::LogicalIdOfGlobal(int global_device) const {
  if (global_device < 0 ||
      global_device >= static_cast<int>(logical_of_global_.size()) ||
      logical_of_global_[global_device] < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "global device ", global_device, " is not in mesh ", ToString()));
  }
  return logical_of_global_[global_device];
}

absl::StatusOr<std::vector<int>> Mesh::Group(
    int logical_id, std::span<const std::string> axes) const {
  MESHDMA_ASSIGN_OR_RETURN(std::vector<int> coords, Coords(logical_id));
  std::vector<int> positions;
  int64_t group_size = 1;
  for (const std::string& axis : axes) {
    MESHDMA_ASSIGN_OR_RETURN(int pos, AxisPosition(axis));
    if (std::find(positions.begin(), positions.end(), pos) != positions.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "axis '", axis, "' is named twice in a group of mesh ", ToString()));
    }
    positions.push_back(pos);
    group_size *= axes_[pos].second;
  }
  // Member i of the group sets the coordinates along `axes` to i decomposed
  // row-major over them (the last named axis fastest); the others stay.
  std::vector<int> group(group_size);
  for (int64_t i = 0; i < group_size; ++i) {
    int64_t rest = i;
    for (int k = static_cast<int>(positions.size()) - 1; k >= 0; --k) {
      const int axis_size = axes_[positions[k]].second;
      coords[positions[k]] = static_cast<int>(rest % axis_size);
      rest /= axis_size;
    }
    int logical = 0;
    for (size_t a = 0; a < coords.size(); ++a) {
      logical += coords[a] * strides_[a];
    }
    group[i] = logical;
  }
  return group;
}

absl::StatusOr<RingPosition> Mesh::Ring(
    int logical_id, std::span<const std::string> axes) const {
  RingPosition ring;
  MESHDMA_ASSIGN_OR_RETURN(const std::vector<int> members,
                           Group(logical_id, axes));
  ring.members.assign(members.begin(), members.end());
  ring.index = static_cast<int>(
      std::find(ring.members.begin(), ring.members.end(), logical_id) -
      ring.members.begin());
  return ring;
}

}  // namespace meshdma
