#include "meshdma/sharding/shard_map.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "meshdma/base/status_macros.h"

namespace meshdma {
namespace {

std::string ShapeString(std::span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::Status Prefixed(const absl::Status& s, absl::string_view prefix) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

bool SameMesh(const Mesh& a, const Mesh& b) {
  return a.axes() == b.axes() && a.devices() == b.devices();
}

bool SameSpec(const PartitionSpec& a, const PartitionSpec& b, size_t rank) {
  // Trailing replicated entries do not change a layout.
  for (size_t d = 0; d < rank; ++d) {
    const PartitionSpec::Dim empty;
    const auto& da = d < a.dims().size() ? a.dims()[d] : empty;
    const auto& db = d < b.dims().size() ? b.dims()[d] : empty;
    if (da != db) return false;
  }
  return true;
}

// Copies the block `extents` (elements) between two strided layouts (strides
// in elements), one dimension at a time; the innermost run is one memcpy when
// both sides are contiguous along it.
void CopyBlock(const std::byte* src, std::span<const int64_t> src_strides,
               std::byte* dst, std::span<const int64_t> dst_strides,
               std::span<const int64_t> extents, int64_t elem) {
  const size_t rank = extents.size();
  if (rank == 0) {
    std::memcpy(dst, src, elem);
    return;
  }
  if (rank == 1) {
    if (src_strides[0] == 1 && dst_strides[0] == 1) {
      std::memcpy(dst, src, extents[0] * elem);
    } else {
      for (int64_t i = 0; i < extents[0]; ++i) {
        std::memcpy(dst + i * dst_strides[0] * elem,
                    src + i * src_strides[0] * elem, elem);
      }
    }
    return;
  }
  for (int64_t i = 0; i < extents[0]; ++i) {
    CopyBlock(src + i * src_strides[0] * elem, src_strides.subspan(1),
              dst + i * dst_strides[0] * elem, dst_strides.subspan(1),
              extents.subspan(1), elem);
  }
}

std::vector<int64_t> RowMajorStrides(std::span<const int64_t> shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) {
    strides[d] = strides[d + 1] * shape[d + 1];
  }
  return strides;
}

// `status` with `context` before its message.
absl::Status AddContext(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(context, ": ", status.message()));
}
template <typename T>
absl::StatusOr<T> AddContext(absl::StatusOr<T> value,
                             absl::string_view context) {
  if (value.ok()) return value;
  return AddContext(value.status(), context);
}

bool MultiProcess(const Runtime& rt) { return rt.launch().num_processes() > 1; }

// The rank of the process holding mesh device `logical_id`.
int RankOf(const Runtime& rt, const Mesh& mesh, int logical_id) {
  return rt.launch().devices()[mesh.devices()[logical_id]].rank;
}

}  // namespace

int64_t ShardedArray::num_elements() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

absl::StatusOr<ShardedArray> ShardedArray::Zeros(
    const Runtime& runtime, const Mesh& mesh, PartitionSpec spec, DType dtype,
    std::vector<int64_t> shape, std::string name) {
  const std::string prefix =
      absl::StrCat("array '", name, "' of shape ", ShapeString(shape), ": ");
  if (static_cast<int>(shape.size()) > kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "rank ", shape.size(), " exceeds ", kMaxRank));
  }
  for (int g : mesh.devices()) {
    if (g < 0 || g >= runtime.num_devices()) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "mesh ", mesh.ToString(), " names device ", g,
                       ", but the launch has ", runtime.num_devices()));
    }
  }
  auto local = spec.LocalShape(mesh, shape);
  if (!local.ok()) return Prefixed(local.status(), prefix);
  ShardedArray a;
  a.name_ = std::move(name);
  a.dtype_ = dtype;
  a.shape_ = std::move(shape);
  a.local_shape_ = *std::move(local);
  a.spec_ = std::move(spec);
  a.mesh_ = mesh;
  a.runtime_ = &runtime;
  a.shards_.resize(mesh.size());
  int64_t shard_bytes = static_cast<int64_t>(DTypeSize(dtype));
  for (int64_t s : a.local_shape_) shard_bytes *= s;
  const int rank = runtime.launch().rank();
  for (int l = 0; l < mesh.size(); ++l) {
    if (RankOf(runtime, mesh, l) != rank) continue;
    a.local_devices_.push_back(l);
    a.shards_[l] = std::make_shared<std::vector<std::byte>>(shard_bytes);
  }
  return a;
}

absl::StatusOr<ShardedArray> ShardedArray::FromHost(
    const Runtime& runtime, const Mesh& mesh, PartitionSpec spec,
    const ArrayRef& host, const FromHostOptions& options) {
  // Step 0: a root must be a rank of the launch, checked on every process
  // before any message (all pass the same root, so all fail alike).
  if (options.root.has_value()) {
    MESHDMA_RETURN_IF_ERROR(AddContext(
        runtime.processes().CheckRoot("FromHostOptions::root", *options.root),
        absl::StrCat("FromHost('", options.name, "')")));
  }
  const bool multi = MultiProcess(runtime);
  const bool is_root =
      !options.root.has_value() || *options.root == runtime.launch().rank();
  // Step 1: agree on the shape and dtype (with a root, only it knows them).
  std::vector<int64_t> shape(host.shape().begin(), host.shape().end());
  DType dtype = host.dtype();
  if (options.root.has_value() && multi) {
    int64_t header[kMaxRank + 2] = {};
    if (is_root) {
      header[0] = static_cast<int64_t>(shape.size());
      header[1] = static_cast<int64_t>(dtype);
      for (size_t d = 0; d < shape.size(); ++d) header[2 + d] = shape[d];
    }
    std::string bytes(reinterpret_cast<const char*>(header), sizeof(header));
    MESHDMA_RETURN_IF_ERROR(
        AddContext(runtime.processes().Broadcast(bytes, *options.root),
                   absl::StrCat("FromHost('", options.name, "')")));
    std::memcpy(header, bytes.data(), sizeof(header));
    shape.assign(header + 2, header + 2 + header[0]);
    dtype = static_cast<DType>(header[1]);
  }
  MESHDMA_ASSIGN_OR_RETURN(ShardedArray a,
                           Zeros(runtime, mesh, std::move(spec), dtype,
                                 std::move(shape), options.name));
  const int64_t elem = static_cast<int64_t>(DTypeSize(dtype));
  // Step 2: with a root, broadcast the packed array; else read `host`.
  std::vector<std::byte> packed;
  const std::byte* base = host.data();
  std::vector<int64_t> strides(host.strides().begin(), host.strides().end());
  if (options.root.has_value() && multi) {
    packed.resize(a.size_bytes());
    const auto dense = RowMajorStrides(a.shape_);
    if (is_root) {
      CopyBlock(host.data(), host.strides(), packed.data(), dense, a.shape_,
                elem);
    }
    std::string bytes(reinterpret_cast<const char*>(packed.data()),
                      is_root ? packed.size() : 0);
    MESHDMA_RETURN_IF_ERROR(
        AddContext(runtime.processes().Broadcast(bytes, *options.root),
                   absl::StrCat("FromHost('", options.name, "')")));
    if (bytes.size() != packed.size()) {
      return absl::InternalError(absl::StrCat(
          "FromHost('", options.name, "'): rank ", *options.root, " sent ",
          bytes.size(), " bytes, expected ", packed.size()));
    }
    std::memcpy(packed.data(), bytes.data(), packed.size());
    base = packed.data();
    strides = dense;
  } else if (base == nullptr && a.num_elements() > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FromHost('", options.name, "'): the host array is empty on rank ",
        runtime.launch().rank(), " and no root was given"));
  }
  // Step 3: copy every local device's block out of the global array.
  const auto shard_strides = RowMajorStrides(a.local_shape_);
  for (int l : a.local_devices_) {
    MESHDMA_ASSIGN_OR_RETURN(auto shard, a.spec_.ShardOf(mesh, a.shape_, l));
    int64_t offset = 0;
    for (size_t d = 0; d < a.shape_.size(); ++d) {
      offset += shard.offsets[d] * strides[d];
    }
    CopyBlock(base + offset * elem, strides, a.shards_[l]->data(),
              shard_strides, shard.extents, elem);
  }
  return a;
}

absl::Status ShardedArray::ToHost(void* host) const {
  if (runtime_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("ToHost('", name_, "'): the array was never created"));
  }
  const int64_t elem = static_cast<int64_t>(DTypeSize(dtype_));
  const int64_t shard_bytes =
      shards_.empty() || local_devices_.empty()
          ? [&] {
              int64_t n = elem;
              for (int64_t s : local_shape_) n *= s;
              return n;
            }()
          : static_cast<int64_t>(shards_[local_devices_[0]]->size());
  // Step 1: collect every device's shard: local ones in place, others (under
  // mpirun) by one host all-gather of each process's shards in LOGICAL order.
  std::vector<const std::byte*> shard_of(mesh_.size(), nullptr);
  for (int l : local_devices_) shard_of[l] = shards_[l]->data();
  std::vector<std::string> gathered;
  if (MultiProcess(*runtime_)) {
    const int nprocs = runtime_->launch().num_processes();
    std::vector<std::vector<int>> devices_of(nprocs);
    for (int l = 0; l < mesh_.size(); ++l) {
      devices_of[RankOf(*runtime_, mesh_, l)].push_back(l);
    }
    std::string send;
    send.reserve(local_devices_.size() * shard_bytes);
    for (int l : local_devices_) {
      send.append(reinterpret_cast<const char*>(shards_[l]->data()),
                  shards_[l]->size());
    }
    MESHDMA_ASSIGN_OR_RETURN(gathered,
                             AddContext(runtime_->processes().AllGather(send),
                                        absl::StrCat("ToHost('", name_, "')")));
    for (int r = 0; r < nprocs; ++r) {
      if (gathered[r].size() != devices_of[r].size() * shard_bytes) {
        return absl::InternalError(absl::StrCat(
            "ToHost('", name_, "'): rank ", r, " sent ", gathered[r].size(),
            " bytes of shards, expected ", devices_of[r].size() * shard_bytes));
      }
      for (size_t i = 0; i < devices_of[r].size(); ++i) {
        shard_of[devices_of[r][i]] = reinterpret_cast<const std::byte*>(
            gathered[r].data() + i * shard_bytes);
      }
    }
  }
  // Step 2: write each block; replicated blocks are written by the lowest
  // LOGICAL id last, so it wins.
  const auto dense = RowMajorStrides(shape_);
  const auto shard_strides = RowMajorStrides(local_shape_);
  for (int l = mesh_.size() - 1; l >= 0; --l) {
    if (shard_of[l] == nullptr) {
      return absl::InternalError(
          absl::StrCat("ToHost('", name_, "'): no shard for mesh device ", l));
    }
    MESHDMA_ASSIGN_OR_RETURN(auto shard, spec_.ShardOf(mesh_, shape_, l));
    int64_t offset = 0;
    for (size_t d = 0; d < shape_.size(); ++d) {
      offset += shard.offsets[d] * dense[d];
    }
    CopyBlock(shard_of[l], shard_strides,
              static_cast<std::byte*>(host) + offset * elem, dense,
              shard.extents, elem);
  }
  return absl::OkStatus();
}

absl::StatusOr<ArrayRef> ShardedArray::Shard(int logical_id) const {
  if (logical_id < 0 || logical_id >= static_cast<int>(shards_.size()) ||
      shards_[logical_id] == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "array '", name_, "': mesh device ", logical_id, " of mesh ",
        mesh_.ToString(), " holds no shard in this process"));
  }
  return ArrayRef::FromPointer(shards_[logical_id]->data(), dtype_,
                               local_shape_);
}

absl::StatusOr<ArrayRef> ShardedArray::LocalShard() const {
  MESHDMA_ASSIGN_OR_RETURN(int l, logical_device_id());
  return Shard(l);
}

absl::Status ShardedArray::CheckReplicatedEqual() const {
  // Devices whose shards cover the same block must hold the same bytes.
  std::map<std::vector<int64_t>, int> first_of_block;
  for (int l : local_devices_) {
    MESHDMA_ASSIGN_OR_RETURN(auto shard, spec_.ShardOf(mesh_, shape_, l));
    auto [it, inserted] = first_of_block.emplace(shard.offsets, l);
    if (inserted) continue;
    const int first = it->second;
    if (std::memcmp(shards_[first]->data(), shards_[l]->data(),
                    shards_[l]->size()) == 0) {
      continue;
    }
    // Name the axes along which the two devices differ.
    const auto a = *mesh_.Coords(first);
    const auto b = *mesh_.Coords(l);
    std::vector<std::string> axes;
    for (int i = 0; i < mesh_.num_axes(); ++i) {
      if (a[i] != b[i])
        axes.push_back(absl::StrCat("'", mesh_.axes()[i].first, "'"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "output '", name_, "' with spec ", spec_.ToString(),
        " promises replication along mesh axis ", absl::StrJoin(axes, ", "),
        " of mesh ", mesh_.ToString(), ", but devices ", first, " and ", l,
        " hold different shards"));
  }
  return absl::OkStatus();
}

std::string ShardMapped::InputName(size_t i) const {
  if (i < options_.input_names.size()) {
    return absl::StrCat("input ", i, " ('", options_.input_names[i], "')");
  }
  return absl::StrCat("input ", i);
}

std::string ShardMapped::OutputName(size_t i) const {
  if (i < options_.output_names.size()) {
    return absl::StrCat("output ", i, " ('", options_.output_names[i], "')");
  }
  return absl::StrCat("output ", i);
}

absl::StatusOr<std::vector<ShardedArray>> ShardMapped::operator()(
    Runtime& runtime, std::span<const ShardedArray> inputs,
    std::span<const ShapeDtype> out_shapes) const {
  const std::string where = absl::StrCat(
      "shard_map '", options_.name, "' over mesh ", mesh_.ToString(), ": ");
  // Step 1: a function, and the arity.
  if (!fn_) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "the function to map is empty"));
  }
  if (inputs.size() != in_specs_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, inputs.size(), " inputs but ", in_specs_.size(), " in_specs"));
  }
  if (out_shapes.size() != out_specs_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, out_shapes.size(), " output shapes but ",
                     out_specs_.size(), " out_specs"));
  }
  // Step 2: validate each input against its spec; reshard through the host
  // when its layout differs (collective, like the map itself).
  std::vector<ShardedArray> args(inputs.begin(), inputs.end());
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string what =
        absl::StrCat(where, InputName(i), " '", args[i].name(), "' of shape ",
                     ShapeString(args[i].shape()), ": ");
    MESHDMA_RETURN_IF_ERROR(
        Prefixed(in_specs_[i].Validate(mesh_, args[i].shape()), what));
    if (SameMesh(args[i].mesh(), mesh_) &&
        SameSpec(args[i].spec(), in_specs_[i], args[i].shape().size())) {
      continue;
    }
    std::vector<std::byte> host(args[i].size_bytes());
    MESHDMA_RETURN_IF_ERROR(Prefixed(args[i].ToHost(host.data()), what));
    MESHDMA_ASSIGN_OR_RETURN(
        ArrayRef ref,
        ArrayRef::FromPointer(host.data(), args[i].dtype(), args[i].shape()));
    MESHDMA_ASSIGN_OR_RETURN(
        args[i],
        ShardedArray::FromHost(runtime, mesh_, in_specs_[i], ref,
                               {.name = args[i].name(), .root = std::nullopt}));
  }
  // Step 3: zeroed outputs in their out_spec layouts.
  std::vector<ShardedArray> outs(out_shapes.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    const std::string what = absl::StrCat(where, OutputName(i), ": ");
    auto out = ShardedArray::Zeros(
        runtime, mesh_, out_specs_[i], out_shapes[i].dtype, out_shapes[i].shape,
        i < options_.output_names.size() ? options_.output_names[i]
                                         : absl::StrCat("output ", i));
    if (!out.ok()) return Prefixed(out.status(), what);
    outs[i] = *std::move(out);
  }
  // Step 4: run `fn` on every device with its shards.
  absl::Status run = runtime.Run(mesh_, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int l, logical_device_id());
    std::vector<ArrayRef> in_refs, out_refs;
    for (const ShardedArray& a : args) {
      MESHDMA_ASSIGN_OR_RETURN(ArrayRef r, a.Shard(l));
      in_refs.push_back(r);
    }
    for (const ShardedArray& a : outs) {
      MESHDMA_ASSIGN_OR_RETURN(ArrayRef r, a.Shard(l));
      out_refs.push_back(r);
    }
    return fn_(in_refs, out_refs);
  });
  MESHDMA_RETURN_IF_ERROR(Prefixed(run, where));
  // Step 5: the replication promise of the out_specs.
  if (options_.check_replication) {
    for (const ShardedArray& o : outs) {
      MESHDMA_RETURN_IF_ERROR(Prefixed(o.CheckReplicatedEqual(), where));
    }
  }
  return outs;
}

}  // namespace meshdma
