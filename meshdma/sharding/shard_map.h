// Sharded arrays and `shard_map` (docs/semantics.md §8).
//
// A `ShardedArray` is a global array (shape, dtype) laid out over a mesh by a
// `PartitionSpec`. Each process stores the shards of its own devices of the
// mesh, in ordinary host memory owned by the array (one contiguous row-major
// buffer per local device), so an array outlives `Runtime::Run` calls and can
// be passed from one `shard_map` to the next. Devices on other processes hold
// their own shards; no process holds the whole array unless it asks for it
// with `ToHost`. A shard is not in the symmetric heap: a kernel that wants
// peers to push into it allocates a symmetric buffer and copies (that is what
// the overlap kernels in kernels/overlap/ do).
//
// Replication. A dimension the spec does not name is replicated along the
// mesh axes the spec leaves out: every device along such an axis holds the
// same block. `FromHost` writes the same block to each; `ToHost` reads one of
// them (the lowest LOGICAL id's).
//
// Processes. `FromHost`, `ToHost` and a `shard_map` call are collective over
// the processes of the launch (every process calls them with the same
// arguments); they are called from the main thread, never from inside
// `Runtime::Run`. Across processes `ToHost` exchanges shards through the
// runtime's host collectives on the main thread (one all-gather), while the
// device threads are idle; `FromHost` reads the host array on every process,
// or, with `FromHostOptions::root`, only on that rank and broadcasts it.
//
// `shard_map(fn, mesh, in_specs, out_specs)` returns a callable that, given
// global input arrays and the global output shapes, runs `fn` once on every
// device of `mesh` (SPMD, inside `Runtime::Run`) with that device's input
// shards and zeroed output shards (local shapes). `fn` may call `pallas_call`
// kernels, DMAs, semaphores and collectives; they see only local shards. An
// output spec that names an axis concatenates the shards along that
// dimension; an axis it leaves out is a promise that the shards along it are
// equal (checked within each process when `check_replication` is set).
// An input whose mesh or spec differs from the `in_specs` entry is resharded
// first (through the host: `ToHost` then `FromHost`).
#ifndef MESHDMA_SHARDING_SHARD_MAP_H_
#define MESHDMA_SHARDING_SHARD_MAP_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "meshdma/base/dtype.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/kernels/pallas_call.h"
#include "meshdma/topology/mesh.h"
#include "meshdma/topology/partition_spec.h"

namespace meshdma {

struct FromHostOptions {
  // Name used in error messages ("q").
  std::string name = "array";
  // Unset: every process passes the whole host array. Set: only this rank's
  // `host` is read (others may pass an empty ref) and it is broadcast.
  std::optional<int> root;
};

class ShardedArray {
 public:
  ShardedArray() = default;

  // A zero-filled array of `shape` laid out by `spec` over `mesh`. Errors
  // name the array, the dimension and the mesh axis (a size that does not
  // divide, an axis the mesh lacks, too many spec entries).
  static absl::StatusOr<ShardedArray> Zeros(const Runtime& runtime,
                                            const Mesh& mesh,
                                            PartitionSpec spec, DType dtype,
                                            std::vector<int64_t> shape,
                                            std::string name = "array");

  // Scatters a host array (contiguous or strided) into shards. Collective
  // over processes (see the file comment).
  static absl::StatusOr<ShardedArray> FromHost(
      const Runtime& runtime, const Mesh& mesh, PartitionSpec spec,
      const ArrayRef& host, const FromHostOptions& options = {});
  template <typename T>
  static absl::StatusOr<ShardedArray> FromHost(
      const Runtime& runtime, const Mesh& mesh, PartitionSpec spec,
      std::vector<T>& host, std::vector<int64_t> shape,
      const FromHostOptions& options = {}) {
    // Only the processes that read `host` need it to hold the shape.
    if (!options.root.has_value() || *options.root == runtime.launch().rank()) {
      int64_t elements = 1;
      for (int64_t d : shape) {
        if (d < 0 || __builtin_mul_overflow(elements, d, &elements)) {
          elements = -1;
          break;
        }
      }
      if (elements < 0 || static_cast<uint64_t>(elements) > host.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "FromHost('", options.name, "'): the host vector holds ",
            host.size(), " elements but shape [", absl::StrJoin(shape, ", "),
            "] needs ",
            elements < 0 ? std::string("an invalid count")
                         : absl::StrCat(elements)));
      }
    }
    auto ref = ArrayRef::FromPointer(host.data(), kDTypeOf<T>, shape);
    if (!ref.ok()) return ref.status();
    return FromHost(runtime, mesh, std::move(spec), *ref, options);
  }

  // Gathers the global array into `host` (row-major, `size_bytes()` bytes) on
  // every process. Collective over processes.
  absl::Status ToHost(void* host) const;
  template <typename T>
  absl::StatusOr<std::vector<T>> ToHost() const {
    if (kDTypeOf<T> != dtype_) {
      return absl::InvalidArgumentError(
          "ShardedArray::ToHost: element type does not match the array");
    }
    std::vector<T> out(static_cast<size_t>(num_elements()));
    absl::Status s = ToHost(out.data());
    if (!s.ok()) return s;
    return out;
  }

  const std::string& name() const { return name_; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& local_shape() const { return local_shape_; }
  const PartitionSpec& spec() const { return spec_; }
  const Mesh& mesh() const { return mesh_; }
  int64_t num_elements() const;
  int64_t size_bytes() const {
    return num_elements() * static_cast<int64_t>(DTypeSize(dtype_));
  }

  // The shard of mesh device `logical_id`; an error when that device is not
  // in this process.
  absl::StatusOr<ArrayRef> Shard(int logical_id) const;
  // The calling device's shard (inside `Runtime::Run` over this mesh).
  absl::StatusOr<ArrayRef> LocalShard() const;
  // LOGICAL ids of this process's devices of the mesh, ascending.
  const std::vector<int>& local_devices() const { return local_devices_; }

 private:
  absl::Status CheckReplicatedEqual() const;
  friend class ShardMapped;

  std::string name_;
  DType dtype_ = DType::kF32;
  std::vector<int64_t> shape_;
  std::vector<int64_t> local_shape_;
  PartitionSpec spec_;
  Mesh mesh_;
  const Runtime* runtime_ = nullptr;
  std::vector<int> local_devices_;
  // Per LOGICAL id; empty for devices of other processes.
  std::vector<std::shared_ptr<std::vector<std::byte>>> shards_;
};

// `fn` sees the calling device's input shards and output shards, in order.
using ShardMapFn = std::function<absl::Status(
    std::span<const ArrayRef> inputs, std::span<const ArrayRef> outputs)>;

struct ShardMapOptions {
  std::string name = "shard_map";
  std::vector<std::string> input_names;   // Optional, for error messages.
  std::vector<std::string> output_names;  // Optional, for error messages.
  // Compare, within each process, the output shards that the out_specs
  // promise to be equal (bytewise); a difference is an error naming the
  // output, the devices and the axis.
  bool check_replication = false;
};

class ShardMapped {
 public:
  ShardMapped(ShardMapFn fn, Mesh mesh, std::vector<PartitionSpec> in_specs,
              std::vector<PartitionSpec> out_specs, ShardMapOptions options)
      : fn_(std::move(fn)),
        mesh_(std::move(mesh)),
        in_specs_(std::move(in_specs)),
        out_specs_(std::move(out_specs)),
        options_(std::move(options)) {}

  // Runs the map: validates the specs against the inputs and `out_shapes`
  // (global shapes), reshards inputs whose layout differs, runs `fn` on every
  // device and returns the global outputs. Collective over processes.
  absl::StatusOr<std::vector<ShardedArray>> operator()(
      Runtime& runtime, std::span<const ShardedArray> inputs,
      std::span<const ShapeDtype> out_shapes) const;

 private:
  std::string InputName(size_t i) const;
  std::string OutputName(size_t i) const;

  ShardMapFn fn_;
  Mesh mesh_;
  std::vector<PartitionSpec> in_specs_;
  std::vector<PartitionSpec> out_specs_;
  ShardMapOptions options_;
};

inline ShardMapped shard_map(ShardMapFn fn, Mesh mesh,
                             std::vector<PartitionSpec> in_specs,
                             std::vector<PartitionSpec> out_specs,
                             ShardMapOptions options = {}) {
  return ShardMapped(std::move(fn), std::move(mesh), std::move(in_specs),
                     std::move(out_specs), std::move(options));
}

}  // namespace meshdma

#endif  // MESHDMA_SHARDING_SHARD_MAP_H_
