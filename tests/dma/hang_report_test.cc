// The mesh-wide hang report: a wait that times out reports every device's
// state and the wait-for graph, naming a cycle when there is one.
#include <string>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/semaphore.h"
#include "meshdma/dma/symmetric_memory.h"
#include "tests/dma/runtime_test_util.h"

namespace meshdma {
namespace {

using ::testing::HasSubstr;

// Every device signals its left neighbour once and consumes the signal from
// its right; then waits for a second signal that never comes. With
// `busy_device` >= 0 that device computes instead of waiting.
absl::Status RingThenHang(int busy_device) {
  MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
  MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
  MESHDMA_ASSIGN_OR_RETURN(
      auto sem, AllocateSemaphore(SemaphoreType::kRegular, "from_right"));
  MESHDMA_RETURN_IF_ERROR(semaphore_signal(sem, 1, (me + n - 1) % n));
  MESHDMA_RETURN_IF_ERROR(semaphore_wait(sem, 1));
  if (me == busy_device) {
    absl::SleepFor(absl::Seconds(3));
    return absl::OkStatus();
  }
  return semaphore_wait(sem, 1);
}

class HangReportTest : public ::testing::Test {
 protected:
  absl::Status RunOnce(int busy_device) {
    RuntimeOptions o = testing::TierOptions(DmaMode::kAsync);
    o.wait_timeout = absl::Seconds(1);
    auto rt = Runtime::Create(o);
    if (!rt.ok()) return rt.status();
    auto mesh = (*rt)->MakeMesh1D("x");
    if (!mesh.ok()) return mesh.status();
    return (*rt)->Run(*mesh, [&] { return RingThenHang(busy_device); });
  }
};

TEST_F(HangReportTest, NamesTheCycle) {
  absl::Status s = RunOnce(-1);
  ASSERT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  const std::string msg(s.message());
  EXPECT_THAT(msg, HasSubstr("Mesh-wide state"));
  EXPECT_THAT(msg, HasSubstr("Wait-for graph"));
  EXPECT_THAT(msg, HasSubstr("'from_right' REGULAR semaphore"));
  EXPECT_THAT(msg, HasSubstr("expected >= 1, current 0"));
  EXPECT_THAT(msg, HasSubstr("[last signal received from]"));
  EXPECT_THAT(msg, HasSubstr("Cycle: device "));
}

TEST_F(HangReportTest, PeerBusyInComputeEndsTheChain) {
  absl::Status s = RunOnce(1);
  ASSERT_FALSE(s.ok());
  const std::string msg(s.message());
  EXPECT_THAT(msg, HasSubstr("device 0 -> device 1 (not waiting)"));
  EXPECT_THAT(msg, HasSubstr("No cycle"));
}

}  // namespace
}  // namespace meshdma
