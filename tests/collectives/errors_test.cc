// Bad input to the collectives is an error naming the operand, shape or axis,
// on every device, never a hang.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectives_test_util.h"
#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/collectives.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"
#include "meshdma/topology/launch.h"

namespace meshdma {
namespace {

// Runs `fn` on every device of a fresh runtime (at least 2 devices) and
// returns what `Run` returned.
absl::Status RunFresh(const std::function<absl::Status()>& fn) {
  const bool mpi = LaunchedByMpi();
  RuntimeOptions o = testing::OptionsFor(mpi ? 0 : 3);
  o.wait_timeout = absl::Seconds(20);
  MESHDMA_ASSIGN_OR_RETURN(auto rt, Runtime::Create(o));
  MESHDMA_ASSIGN_OR_RETURN(Mesh mesh, rt->MakeMesh1D("x"));
  return rt->Run(mesh, fn);
}

void ExpectError(absl::Status s, absl::string_view needle) {
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), needle))
      << "wanted '" << needle << "' in: " << s;
}

TEST(CollectiveErrors, UnknownAxis) {
  ExpectError(RunFresh([]() -> absl::Status {
                MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({8}));
                return psum(a, a, {"y"});
              }),
              "over axes {y}");
}

TEST(CollectiveErrors, MismatchedDtype) {
  ExpectError(RunFresh([]() -> absl::Status {
                MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({8}));
                MESHDMA_ASSIGN_OR_RETURN(auto b,
                                         AllocateSymmetric<double>({8}));
                return psum(a, b, {"x"});
              }),
              "must have the same dtype and element count");
}

TEST(CollectiveErrors, OutputTooSmall) {
  ExpectError(RunFresh([]() -> absl::Status {
                MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({8}));
                MESHDMA_ASSIGN_OR_RETURN(auto b, AllocateSymmetric<float>({9}));
                return all_gather(a, b, {"x"}, /*tiled=*/true);
              }),
              "needs f32[");
}

TEST(CollectiveErrors, ReductionOfU8) {
  ExpectError(RunFresh([]() -> absl::Status {
                MESHDMA_ASSIGN_OR_RETURN(auto a,
                                         AllocateSymmetric<uint8_t>({8}));
                return pmax(a, a, {"x"});
              }),
              "cannot reduce u8");
}

TEST(CollectiveErrors, OutputNotSymmetric) {
  ExpectError(
      RunFresh([]() -> absl::Status {
        std::vector<float> in(8), out(8);
        const int64_t shape[] = {8};
        MESHDMA_ASSIGN_OR_RETURN(
            auto a, ArrayRef::FromPointer(in.data(), DType::kF32, shape));
        MESHDMA_ASSIGN_OR_RETURN(
            auto b, ArrayRef::FromPointer(out.data(), DType::kF32, shape));
        return psum(a, b, {"x"});
      }),
      "is not in the symmetric heap");
}

TEST(CollectiveErrors, BadPermutation) {
  ExpectError(RunFresh([]() -> absl::Status {
                MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({8}));
                MESHDMA_ASSIGN_OR_RETURN(auto b, AllocateSymmetric<float>({8}));
                return ppermute(a, b, {"x"}, {{0, 1}, {1, 1}});
              }),
              "repeats a destination");
}

// Devices disagree on the element count: the neighbour check reports both
// calls instead of waiting for bytes that never come.
TEST(CollectiveErrors, MismatchedCountAcrossDevices) {
  ExpectError(
      RunFresh([]() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
        MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({64}));
        MESHDMA_ASSIGN_OR_RETURN(auto in, a.Slice(0, 0, me == 0 ? 10 : 11));
        return psum(in, in, {"x"});
      }),
      "this device calls psum of");
}

// The same with the ring reduce-scatter (neighbour check before any data).
TEST(CollectiveErrors, MismatchedCountRingReduceScatter) {
  ExpectError(
      RunFresh([]() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
        MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({64}));
        MESHDMA_ASSIGN_OR_RETURN(auto o, AllocateSymmetric<float>({64}));
        MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
        const int64_t count = me == 0 ? 30 : 33;
        MESHDMA_ASSIGN_OR_RETURN(auto in, a.Slice(0, 0, count));
        MESHDMA_ASSIGN_OR_RETURN(
            auto out, o.Slice(0, 0, ScatterSegment(count, n, me).second));
        CollectiveOptions opts;
        opts.algorithm = CollectiveAlgorithm::kRing;
        return psum_scatter(in, out, {"x"}, opts);
      }),
      "this device calls psum_scatter of");
}

// A call a device remembered (channel.h, ChannelCall) is still compared
// with its peers' calls: after 20 identical small psums, one device calls
// pmax on the same arrays.
TEST(CollectiveErrors, RememberedCallStillComparesPeers) {
  ExpectError(RunFresh([]() -> absl::Status {
                MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
                MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({8}));
                MESHDMA_ASSIGN_OR_RETURN(auto b, AllocateSymmetric<float>({8}));
                for (int i = 0; i < 20; ++i) {
                  MESHDMA_RETURN_IF_ERROR(psum(a, b, {"x"}));
                }
                return me == 0 ? pmax(a, b, {"x"}) : psum(a, b, {"x"});
              }),
              "this device calls p");
}

// ... and its operands are still checked: a strided input of the same type
// and shape as the remembered call's is an error, not a copy of the wrong
// bytes.
TEST(CollectiveErrors, RememberedCallRechecksOperands) {
  ExpectError(
      RunFresh([]() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(auto dense, AllocateSymmetric<float>({4, 8}));
        MESHDMA_ASSIGN_OR_RETURN(auto wide, AllocateSymmetric<float>({4, 16}));
        MESHDMA_ASSIGN_OR_RETURN(auto out, AllocateSymmetric<float>({4, 8}));
        MESHDMA_ASSIGN_OR_RETURN(auto strided, wide.Slice(1, 0, 8));
        for (int i = 0; i < 5; ++i) {
          MESHDMA_RETURN_IF_ERROR(psum(dense, out, {"x"}));
        }
        return psum(strided, out, {"x"});
      }),
      "is strided");
}

// A remembered ppermute (its permutation part of the key) still checks a
// new permutation, and still refuses to run in place.
TEST(CollectiveErrors, RememberedPpermuteRechecksPermutation) {
  auto run = [](bool in_place) {
    return RunFresh([in_place]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
      MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({8}));
      MESHDMA_ASSIGN_OR_RETURN(auto b, AllocateSymmetric<float>({8}));
      std::vector<std::pair<int, int>> shift;
      for (int i = 0; i < n; ++i) shift.push_back({i, (i + 1) % n});
      for (int i = 0; i < 5; ++i) {
        MESHDMA_RETURN_IF_ERROR(ppermute(a, b, {"x"}, shift));
      }
      if (in_place) return ppermute(a, a, {"x"}, shift);
      // Two sources for destination 1.
      std::vector<std::pair<int, int>> twice = shift;
      twice[0].second = 1;
      twice[1].second = 1;
      return ppermute(a, b, {"x"}, twice);
    });
  };
  ExpectError(run(/*in_place=*/false), "repeats a destination");
  ExpectError(run(/*in_place=*/true), "does not run in place");
}

// A ReduceOp outside the enum (an integer cast to it) is an error naming the
// value and the device, on the one-shot path (8 floats) and on the kernel
// paths (1 MiB), never a silent copy of each device's own input.
TEST(CollectiveErrors, ReduceOpOutsideTheEnum) {
  for (const int64_t count : {int64_t{8}, int64_t{1} << 18}) {
    for (const int op : {4, -1, 99}) {
      absl::Status s = RunFresh([count, op]() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({count}));
        MESHDMA_ASSIGN_OR_RETURN(auto b, AllocateSymmetric<float>({count}));
        return all_reduce(static_cast<ReduceOp>(op), a, b, {"x"});
      });
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      ExpectError(s, absl::StrCat("all_reduce on device "));
      ExpectError(s, absl::StrCat("reduction op (ReduceOp) ", op,
                                  " is not one of sum (0)"));
    }
  }
  ExpectError(RunFresh([]() -> absl::Status {
                MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
                MESHDMA_ASSIGN_OR_RETURN(auto a,
                                         AllocateSymmetric<float>({8 * n}));
                MESHDMA_ASSIGN_OR_RETURN(auto b, AllocateSymmetric<float>({8}));
                return reduce_scatter(static_cast<ReduceOp>(5), a, b, {"x"});
              }),
              "reduce_scatter on device");
}

// A CollectiveAlgorithm outside the enum is an error naming the value, in
// every collective.
TEST(CollectiveErrors, AlgorithmOutsideTheEnum) {
  CollectiveOptions bad;
  bad.algorithm = static_cast<CollectiveAlgorithm>(42);
  const std::string why =
      "options.algorithm (CollectiveAlgorithm) 42 is not one of auto (0)";
  auto run = [&](auto call) {
    return RunFresh([&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
      MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({8 * n}));
      MESHDMA_ASSIGN_OR_RETURN(auto b, AllocateSymmetric<float>({8 * n}));
      MESHDMA_ASSIGN_OR_RETURN(auto c, AllocateSymmetric<float>({8 * n * n}));
      MESHDMA_ASSIGN_OR_RETURN(auto d, AllocateSymmetric<float>({8}));
      return call(a, b, c, d, n);
    });
  };
  ExpectError(run([&](auto& a, auto& b, auto&, auto&, int) {
                return psum(a, b, {"x"}, bad);
              }),
              why);
  ExpectError(run([&](auto& a, auto&, auto&, auto& d, int) {
                return psum_scatter(a, d, {"x"}, bad);
              }),
              why);
  ExpectError(run([&](auto& a, auto&, auto& c, auto&, int) {
                return all_gather(a, c, {"x"}, /*tiled=*/true, bad);
              }),
              why);
  ExpectError(run([&](auto& a, auto& b, auto&, auto&, int) {
                return all_to_all(a, b, {"x"}, 0, 0, bad);
              }),
              why);
  ExpectError(run([&](auto& a, auto& b, auto&, auto&, int n) {
                std::vector<std::pair<int, int>> shift;
                for (int i = 0; i < n; ++i) shift.push_back({i, (i + 1) % n});
                return ppermute(a, b, {"x"}, shift, bad);
              }),
              why);
}

}  // namespace
}  // namespace meshdma
