// Checked mode sees the collectives' own raw-pointer reads and writes
// (channel rows, reductions, local copies): a user DMA that lands in a
// collective's output, unordered with the collective, is reported naming the
// collective's write; the same DMA started once the receiver has signalled
// that its collective is done is silent.
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/collectives.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/semaphore.h"
#include "meshdma/dma/symmetric_memory.h"
#include "tests/dma/runtime_test_util.h"

namespace meshdma {
namespace {

using ::testing::HasSubstr;

struct Case {
  const char* name;
  int64_t elements;
  CollectiveAlgorithm algorithm;
  const char* write_site;  // How the report names the collective's write.
};

class CollectivesCheckedModeTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    RuntimeOptions o = testing::TierOptions(DmaMode::kAsync);
    o.check = CheckMode::kRaces;
    auto rt = Runtime::Create(o);
    ASSERT_TRUE(rt.ok()) << rt.status();
    rt_ = std::move(*rt);
    auto mesh = rt_->MakeMesh1D("x");
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    mesh_ = std::make_unique<Mesh>(*mesh);
  }
  // After its psum, each device pushes `stray` into its right neighbour's
  // psum output: unordered with the neighbour's psum, or (`ordered`) only
  // once the neighbour has signalled that its psum is done.
  absl::Status PsumThenStrayDma(bool ordered) {
    const Case c = GetParam();
    return rt_->Run(*mesh_, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
      MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
      MESHDMA_ASSIGN_OR_RETURN(auto in, AllocateSymmetric<float>({c.elements}));
      MESHDMA_ASSIGN_OR_RETURN(auto out,
                               AllocateSymmetric<float>({c.elements}));
      MESHDMA_ASSIGN_OR_RETURN(auto stray,
                               AllocateSymmetric<float>({c.elements}));
      MESHDMA_ASSIGN_OR_RETURN(auto send,
                               AllocateSemaphore(SemaphoreType::kDma));
      MESHDMA_ASSIGN_OR_RETURN(auto recv,
                               AllocateSemaphore(SemaphoreType::kDma));
      MESHDMA_ASSIGN_OR_RETURN(auto done,
                               AllocateSemaphore(SemaphoreType::kRegular));
      MESHDMA_RETURN_IF_ERROR(device_barrier());
      CollectiveOptions options;
      options.algorithm = c.algorithm;
      MESHDMA_RETURN_IF_ERROR(psum(in, out, {"x"}, options));
      if (ordered) {
        MESHDMA_RETURN_IF_ERROR(semaphore_signal(done, 1, (me + n - 1) % n));
        MESHDMA_RETURN_IF_ERROR(semaphore_wait(done, 1));
      }
      auto copy = make_async_remote_copy(stray, out, send, recv, (me + 1) % n);
      MESHDMA_RETURN_IF_ERROR(copy.start());
      MESHDMA_RETURN_IF_ERROR(copy.wait_send());
      return copy.wait_recv();
    });
  }
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<Mesh> mesh_;
};

TEST_P(CollectivesCheckedModeTest, StrayDmaIntoTheOutputIsReported) {
  if (mesh_->size() < 2) GTEST_SKIP() << "needs 2 devices";
  // On two devices the neighbour's last ring DMA comes to this device, whose
  // psum waits for it: that orders every neighbour access before the stray
  // DMA, and checked mode is right to stay silent.
  if (GetParam().algorithm == CollectiveAlgorithm::kRing && mesh_->size() < 3) {
    GTEST_SKIP() << "a race only with 3 or more devices";
  }
  absl::Status s = PsumThenStrayDma(/*ordered=*/false);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("data race"));
  EXPECT_THAT(std::string(s.message()), HasSubstr(GetParam().write_site));
}

TEST_P(CollectivesCheckedModeTest, StrayDmaAfterTheNeighboursSignalIsSilent) {
  if (mesh_->size() < 2) GTEST_SKIP() << "needs 2 devices";
  absl::Status s = PsumThenStrayDma(/*ordered=*/true);
  EXPECT_TRUE(s.ok()) << s;
}

INSTANTIATE_TEST_SUITE_P(
    Paths, CollectivesCheckedModeTest,
    ::testing::Values(
        // Small, kAuto: the channel, reduced straight into the output.
        Case{"Channel", 8, CollectiveAlgorithm::kAuto,
             "psum write of its output"},
        // One-shot rows in scratch, reduced into the output.
        Case{"OneShot", 2048, CollectiveAlgorithm::kOneShot,
             "psum write of its output"},
        // The ring: its all-gather reads the output the stray DMA writes.
        Case{"Ring", 8192, CollectiveAlgorithm::kRing, "in kernel 'psum'"}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace meshdma
