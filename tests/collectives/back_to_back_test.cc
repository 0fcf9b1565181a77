// Back-to-back collectives with no barrier between them: thousands of calls
// of every collective at random sizes (1 B to 4 MiB, most of them small so
// that they take the channel path with no entry barrier, some large so that
// the kernel paths interleave with it), every algorithm, and devices delayed
// by random sleeps before calls; a quarter of the calls take their input from
// the device's ordinary memory rather than the symmetric heap (the
// reductions copy it for peers in other processes, and threads of one
// process read it in place). Every result is checked against
// a closed form. All devices draw the same sequence of calls from one seed;
// each device draws its own delays.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives_test_util.h"
#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/collectives.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma {
namespace {

enum class Op { kPsum, kAllGather, kPsumScatter, kAllToAll, kPpermute };

struct Call {
  Op op;
  int64_t count;  // Elements per device (a multiple of the group size).
  CollectiveAlgorithm algorithm;
  bool delay;
  bool private_input;
};

// The value device `d` contributes at element `i` of call `c`: small
// integers, so float sums are exact.
float Value(int c, int d, int64_t i) {
  return static_cast<float>((c * 7 + d * 13 + i) % 61);
}

std::vector<Call> DrawCalls(int num_calls, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Call> calls;
  for (int c = 0; c < num_calls; ++c) {
    Call call;
    call.op = static_cast<Op>(rng() % 5);
    // Bytes from 1 to 4 MiB, log-uniform, 1 in 16 calls above 64 KiB.
    const int max_log = rng() % 16 == 0 ? 22 : 16;
    const int64_t bytes = int64_t{1} << (rng() % (max_log + 1));
    call.count = std::max<int64_t>(1, bytes / 4 / n) * n;
    const CollectiveAlgorithm algorithms[] = {
        CollectiveAlgorithm::kAuto,
        CollectiveAlgorithm::kRing,
        CollectiveAlgorithm::kBidirectionalRing,
        CollectiveAlgorithm::kOneShot,
        CollectiveAlgorithm::kHierarchical,
        CollectiveAlgorithm::kDirect};
    call.algorithm = algorithms[rng() % 6];
    if ((call.op != Op::kPsum && call.op != Op::kPsumScatter &&
         call.algorithm == CollectiveAlgorithm::kOneShot) ||
        ((call.op == Op::kAllToAll || call.op == Op::kPpermute) &&
         call.algorithm == CollectiveAlgorithm::kDirect)) {
      call.algorithm = CollectiveAlgorithm::kAuto;
    }
    if (call.op == Op::kPpermute &&
        call.algorithm == CollectiveAlgorithm::kHierarchical) {
      call.algorithm = CollectiveAlgorithm::kAuto;
    }
    call.delay = rng() % 8 == 0;
    call.private_input = rng() % 4 == 0;
    calls.push_back(call);
  }
  return calls;
}

absl::Status Check(const std::string& what, const ArrayRef& out,
                   const std::function<float(int64_t)>& want) {
  const float* o = out.data_as<float>();
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    if (o[i] != want(i)) {
      return absl::InternalError(absl::StrCat(what, ": element ", i, " is ",
                                              o[i], ", expected ", want(i)));
    }
  }
  return absl::OkStatus();
}

absl::Status RunCall(int c, const Call& call, int me, int n,
                     std::mt19937& delays) {
  if (call.delay) {
    std::this_thread::sleep_for(std::chrono::microseconds(delays() % 2000));
  }
  CollectiveOptions options;
  options.algorithm = call.algorithm;
  const int64_t count = call.count;
  const std::vector<std::string> axes = {"x"};
  const std::string what =
      absl::StrCat("call ", c, " (op ", static_cast<int>(call.op), ", ", count,
                   " f32) on device ", me);
  std::vector<float> storage;
  return run_scoped([&]() -> absl::Status {
    ArrayRef in;
    if (call.private_input) {
      storage.resize(count);
      const int64_t shape[] = {count};
      MESHDMA_ASSIGN_OR_RETURN(
          in, ArrayRef::FromPointer(storage.data(), DType::kF32, shape));
    } else {
      MESHDMA_ASSIGN_OR_RETURN(in, AllocateSymmetric<float>({count}));
    }
    for (int64_t i = 0; i < count; ++i)
      in.data_as<float>()[i] = Value(c, me, i);
    switch (call.op) {
      case Op::kPsum: {
        MESHDMA_ASSIGN_OR_RETURN(ArrayRef out,
                                 AllocateSymmetric<float>({count}));
        MESHDMA_RETURN_IF_ERROR(psum(in, out, axes, options));
        return Check(what, out, [&](int64_t i) {
          float s = 0;
          for (int d = 0; d < n; ++d) s += Value(c, d, i);
          return s;
        });
      }
      case Op::kAllGather: {
        MESHDMA_ASSIGN_OR_RETURN(ArrayRef out,
                                 AllocateSymmetric<float>({n * count}));
        MESHDMA_ASSIGN_OR_RETURN(ArrayRef stacked, out.Reshape({n, count}));
        MESHDMA_RETURN_IF_ERROR(all_gather(in, stacked, axes, false, options));
        return Check(what, out, [&](int64_t i) {
          return Value(c, static_cast<int>(i / count), i % count);
        });
      }
      case Op::kPsumScatter: {
        const int64_t seg = count / n;
        MESHDMA_ASSIGN_OR_RETURN(ArrayRef out, AllocateSymmetric<float>({seg}));
        MESHDMA_RETURN_IF_ERROR(psum_scatter(in, out, axes, options));
        return Check(what, out, [&](int64_t i) {
          float s = 0;
          for (int d = 0; d < n; ++d) s += Value(c, d, me * seg + i);
          return s;
        });
      }
      case Op::kAllToAll: {
        const int64_t block = count / n;
        MESHDMA_ASSIGN_OR_RETURN(ArrayRef out,
                                 AllocateSymmetric<float>({count}));
        MESHDMA_RETURN_IF_ERROR(all_to_all(in, out, axes, 0, 0, options));
        return Check(what, out, [&](int64_t i) {
          return Value(c, static_cast<int>(i / block), me * block + i % block);
        });
      }
      case Op::kPpermute: {
        MESHDMA_ASSIGN_OR_RETURN(ArrayRef out,
                                 AllocateSymmetric<float>({count}));
        std::vector<std::pair<int, int>> right;
        for (int d = 0; d < n; ++d) right.push_back({d, (d + 1) % n});
        MESHDMA_RETURN_IF_ERROR(ppermute(in, out, axes, right, options));
        return Check(what, out,
                     [&](int64_t i) { return Value(c, (me + n - 1) % n, i); });
      }
    }
    return absl::OkStatus();
  });
}

TEST(BackToBack, RandomCallsWithoutBarriers) {
  testing::ForEachRuntime([](Runtime& rt) {
    const int n = rt.num_devices();
    const int num_calls = std::max(1000, 2000 / n);
    const std::vector<Call> calls = DrawCalls(num_calls, n, 20261122);
    auto mesh = rt.MakeMesh1D("x");
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    absl::Status s = rt.Run(*mesh, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
      std::mt19937 delays(1000 + me);
      for (int c = 0; c < static_cast<int>(calls.size()); ++c) {
        MESHDMA_RETURN_IF_ERROR(RunCall(c, calls[c], me, n, delays));
      }
      return absl::OkStatus();
    });
    EXPECT_TRUE(s.ok()) << s;
  });
}

}  // namespace
}  // namespace meshdma
