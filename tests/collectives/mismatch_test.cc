// Devices of a group that disagree about a collective (which one, its size,
// its element type) get an error naming both calls at once, on every path,
// never the wait timeout; collectives whose members' outputs differ in size
// by design work without padding.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "collectives_test_util.h"
#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/collectives.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"
#include "meshdma/topology/launch.h"

namespace meshdma {
namespace {

// A mismatch must be reported well before this.
constexpr int kTimeoutSeconds = 8;

// Runs `fn` on every device of a fresh runtime (3 threads alone, the
// launch's devices under mpirun) with a short wait timeout.
absl::Status RunFresh(const std::function<absl::Status()>& fn) {
  RuntimeOptions o = testing::OptionsFor(LaunchedByMpi() ? 0 : 3);
  o.wait_timeout = absl::Seconds(kTimeoutSeconds);
  MESHDMA_ASSIGN_OR_RETURN(auto rt, Runtime::Create(o));
  MESHDMA_ASSIGN_OR_RETURN(Mesh mesh, rt->MakeMesh1D("x"));
  return rt->Run(mesh, fn);
}

// `s` failed at once (not by the timeout) with every needle in its message.
void ExpectPromptError(const std::function<absl::Status()>& fn,
                       std::vector<std::string> needles) {
  const absl::Time start = absl::Now();
  absl::Status s = RunFresh(fn);
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(s.ok());
  EXPECT_LT(took, absl::Seconds(kTimeoutSeconds / 2)) << s;
  EXPECT_FALSE(absl::StrContains(s.message(), "timed out")) << s;
  for (const std::string& needle : needles) {
    EXPECT_TRUE(absl::StrContains(s.message(), needle))
        << "wanted '" << needle << "' in: " << s;
  }
}

CollectiveOptions OneShot() {
  CollectiveOptions o;
  o.algorithm = CollectiveAlgorithm::kOneShot;
  return o;
}

// --- The one-shot path (inputs above the channel's row size).

TEST(OneShotMismatch, PsumAgainstAllGather) {
  ExpectPromptError(
      []() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
        MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
        MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({8192}));
        if (me == 0) return psum(a, a, {"x"}, OneShot());
        MESHDMA_ASSIGN_OR_RETURN(auto o, AllocateSymmetric<float>({8192 * n}));
        return all_gather(a, o, {"x"}, /*tiled=*/true);
      },
      {"psum", "all_gather"});
}

TEST(OneShotMismatch, ElementCount) {
  ExpectPromptError(
      []() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
        const int64_t count = me == 0 ? 8192 : 16384;
        MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({count}));
        return psum(a, a, {"x"}, OneShot());
      },
      {"psum of 8192 f32", "psum of 16384 f32"});
}

TEST(OneShotMismatch, ElementType) {
  ExpectPromptError(
      []() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
        MESHDMA_ASSIGN_OR_RETURN(
            auto a, AllocateSymmetric(me == 0 ? DType::kF64 : DType::kF32,
                                      {8192}));
        return psum(a, a, {"x"}, OneShot());
      },
      {"psum of 8192 f64", "psum of 8192 f32"});
}

TEST(OneShotMismatch, ReduceScatterElementCount) {
  ExpectPromptError(
      []() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
        MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
        const int64_t count = (me == 0 ? 8192 : 16384) * n;
        MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({count}));
        MESHDMA_ASSIGN_OR_RETURN(auto o, AllocateSymmetric<float>({count / n}));
        return psum_scatter(a, o, {"x"}, OneShot());
      },
      {"psum_scatter of"});
}

}  // namespace
}  // namespace meshdma
