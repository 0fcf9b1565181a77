// all_to_all and all_gather in place (the caller's buffer holds its input and
// receives its output, as MPI_IN_PLACE), against naive loops over the
// inputs' closed form: on 1 to 4 devices as threads and, under mpirun, on
// the launch's processes. Sizes on both sides of the channel's, every
// algorithm that can be requested; all_to_all where kDirect swaps blocks
// pairwise (blocks that are byte ranges) and where the call reads a private
// copy of its input (strided blocks, two axes, the DMA pushes).
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives_test_util.h"
#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/collectives.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"
#include "meshdma/topology/launch.h"

namespace meshdma {
namespace {

using testing::CheckArray;
using testing::InputValue;
using testing::Store;

// Runs `fn` on every device of a 1-D mesh "x": under mpirun once with the
// launch's devices, alone with 1 to 4 devices as threads.
void OnEachMesh(const std::function<absl::Status()>& fn) {
  std::vector<int> counts = {0};
  if (!LaunchedByMpi() && std::getenv(kDevicesPerProcessEnv) == nullptr) {
    counts = {1, 2, 3, 4};
  }
  for (int devices : counts) {
    auto rt = Runtime::Create(testing::OptionsFor(devices));
    ASSERT_TRUE(rt.ok()) << rt.status();
    auto mesh = (*rt)->MakeMesh1D("x");
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    const absl::Status s = (*rt)->Run(*mesh, fn);
    EXPECT_TRUE(s.ok()) << (*rt)->num_devices() << " devices: " << s;
  }
}

// Element `index` (row-major) of `shape`, as a multi-index.
std::vector<int64_t> Unravel(int64_t index, const std::vector<int64_t>& shape) {
  std::vector<int64_t> at(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    at[d] = index % shape[d];
    index /= shape[d];
  }
  return at;
}

int64_t Ravel(const std::vector<int64_t>& at,
              const std::vector<int64_t>& shape) {
  int64_t index = 0;
  for (size_t d = 0; d < shape.size(); ++d) index = index * shape[d] + at[d];
  return index;
}

// One in-place all_to_all of a [shape] input whose split axis the group
// divides (so the output has the input's bytes): the buffer is filled with
// this device's input, the call runs on it viewed as the output, and every
// element is compared with the input element of its sender, found by a
// naive walk over the output's indices.
absl::Status AllToAllInPlace(DType t, const std::vector<int64_t>& shape,
                             int split, int concat, CollectiveAlgorithm a) {
  return run_scoped([&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(const int me, logical_device_id());
    MESHDMA_ASSIGN_OR_RETURN(const int n, axis_size("x"));
    const std::vector<int64_t> out_shape =
        AllToAllOutputShape(shape, split, concat, n, me);
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef in, AllocateSymmetric(t, {count}));
    MESHDMA_ASSIGN_OR_RETURN(in, in.Reshape(shape));
    MESHDMA_ASSIGN_OR_RETURN(const ArrayRef out, in.Reshape(out_shape));
    for (int64_t i = 0; i < count; ++i) {
      Store(in, i, InputValue(me, i, t));
    }
    CollectiveOptions o;
    o.algorithm = a;
    const std::string what = absl::StrCat(
        "all_to_all in place ", DTypeName(t), "[", absl::StrJoin(shape, ","),
        "] split ", split, " concat ", concat, " ", CollectiveAlgorithmName(a),
        " on LOGICAL device ", me, " of ", n);
    const absl::Status s = all_to_all(in, out, {"x"}, split, concat, o);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
    }
    const int64_t block = out_shape[concat] / n;
    const int64_t split_begin = shape[split] / n * me;
    return CheckArray(what, out, [&](int64_t i) {
      std::vector<int64_t> at = Unravel(i, out_shape);
      const int sender = static_cast<int>(at[concat] / block);
      at[concat] %= block;
      at[split] += split_begin;
      return InputValue(sender, Ravel(at, shape), t);
    });
  });
}

TEST(InPlace, AllToAll) {
  OnEachMesh([]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(const int n, axis_size("x"));
    for (CollectiveAlgorithm a :
         {CollectiveAlgorithm::kAuto, CollectiveAlgorithm::kDirect,
          CollectiveAlgorithm::kRing}) {
      for (DType t : {DType::kF32, DType::kU8}) {
        // Blocks that are byte ranges: kDirect swaps them. Small rows take
        // the channel under kAuto; 301 f32 columns of 24 rows per device
        // are above it, and odd, so that halves of a pair's block split
        // inside a row.
        for (int64_t cols : {int64_t{5}, int64_t{301}}) {
          MESHDMA_RETURN_IF_ERROR(AllToAllInPlace(t, {24 * n, cols}, 0, 0, a));
          MESHDMA_RETURN_IF_ERROR(
              AllToAllInPlace(t, {1, 24 * n, cols}, 1, 1, a));
        }
        // Strided blocks, and two axes: a private copy of the input.
        MESHDMA_RETURN_IF_ERROR(AllToAllInPlace(t, {3, 8 * n, 301}, 1, 1, a));
        MESHDMA_RETURN_IF_ERROR(AllToAllInPlace(t, {8 * n, 301}, 0, 1, a));
      }
    }
    return absl::OkStatus();
  });
}

// One all_gather (tiled) of `count` elements per device whose input is
// block `(me + shift) % n` of its own output: shift 0 is the in-place form;
// another shift overlaps a block that a peer writes, which the call must
// still gather from the input's values as they were at entry.
absl::Status AllGatherInPlace(DType t, int64_t count, int shift,
                              CollectiveAlgorithm a) {
  return run_scoped([&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(const int me, logical_device_id());
    MESHDMA_ASSIGN_OR_RETURN(const int n, axis_size("x"));
    MESHDMA_ASSIGN_OR_RETURN(const ArrayRef out,
                             AllocateSymmetric(t, {n * count}));
    MESHDMA_ASSIGN_OR_RETURN(const ArrayRef in,
                             out.Slice(0, (me + shift) % n * count, count));
    for (int64_t i = 0; i < n * count; ++i) {
      Store(out, i, t == DType::kU8 ? 255 : -99);
    }
    for (int64_t i = 0; i < count; ++i) Store(in, i, InputValue(me, i, t));
    CollectiveOptions o;
    o.algorithm = a;
    const std::string what = absl::StrCat(
        "all_gather in place ", DTypeName(t), "[", count, "] shift ", shift,
        " ", CollectiveAlgorithmName(a), " on LOGICAL device ", me, " of ", n);
    const absl::Status s = all_gather(in, out, {"x"}, /*tiled=*/true, o);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
    }
    return CheckArray(what, out, [&](int64_t i) {
      return InputValue(static_cast<int>(i / count), i % count, t);
    });
  });
}

TEST(InPlace, AllGather) {
  OnEachMesh([]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(const int n, axis_size("x"));
    for (CollectiveAlgorithm a :
         {CollectiveAlgorithm::kAuto, CollectiveAlgorithm::kDirect,
          CollectiveAlgorithm::kRing,
          CollectiveAlgorithm::kBidirectionalRing}) {
      for (int64_t count : {int64_t{7}, int64_t{70001}}) {
        for (int shift = 0; shift < std::min(n, 2); ++shift) {
          MESHDMA_RETURN_IF_ERROR(
              AllGatherInPlace(DType::kF32, count, shift, a));
        }
      }
    }
    return absl::OkStatus();
  });
}

}  // namespace
}  // namespace meshdma
