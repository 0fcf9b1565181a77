// Recovery (docs/semantics.md §6, "Recovery"): after a failed Run
// the runtime resets its semaphores, scopes, persistent memory and channels
// on every process together, and the next Run computes correct results; a
// runtime can be destroyed and created again in the same process. Each
// failure below is followed by collectives checked against closed forms.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
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

// psum of (me * 1000 + i) over n devices is 1000 * n(n-1)/2 + n * i.
absl::Status CheckPsum(int64_t count, int me, int n) {
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef buf,
                           AllocateSymmetric(DType::kF32, {count}));
  float* v = buf.data_as<float>();
  for (int64_t i = 0; i < count; ++i) v[i] = float(me * 1000 + i);
  MESHDMA_RETURN_IF_ERROR(psum(buf, buf, {"x"}));
  for (int64_t i = 0; i < count; ++i) {
    const float want = float(1000.0 * n * (n - 1) / 2 + double(n) * i);
    if (v[i] != want) {
      return absl::InternalError(absl::StrCat("psum of ", count, " on device ",
                                              me, ": [", i, "] = ", v[i],
                                              ", want ", want));
    }
  }
  return absl::OkStatus();
}

// all_gather of (me * count + i) is the identity 0, 1, ..., n * count - 1.
absl::Status CheckAllGather(int64_t count, int me, int n) {
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef in,
                           AllocateSymmetric(DType::kI32, {count}));
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef out,
                           AllocateSymmetric(DType::kI32, {n * count}));
  for (int64_t i = 0; i < count; ++i) {
    in.data_as<int32_t>()[i] = static_cast<int32_t>(me * count + i);
  }
  MESHDMA_RETURN_IF_ERROR(all_gather(in, out, {"x"}, /*tiled=*/true));
  for (int64_t i = 0; i < n * count; ++i) {
    if (out.data_as<int32_t>()[i] != i) {
      return absl::InternalError(
          absl::StrCat("all_gather of ", count, " on device ", me, ": [", i,
                       "] = ", out.data_as<int32_t>()[i], ", want ", i));
    }
  }
  return absl::OkStatus();
}

// A Run that must succeed: fresh semaphores read 0, then small (channel) and
// large (ring) collectives, several times, with device 0 late each time so
// that a stale barrier count would let a device run ahead.
absl::Status HealthyRun(Runtime& rt, const Mesh& mesh) {
  const int n = rt.num_devices();
  return rt.Run(mesh, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    MESHDMA_ASSIGN_OR_RETURN(auto sem,
                             AllocateSemaphore(SemaphoreType::kRegular));
    MESHDMA_ASSIGN_OR_RETURN(int64_t count, semaphore_read(sem));
    if (count != 0) {
      return absl::InternalError(absl::StrCat("a fresh semaphore on device ",
                                              me, " reads ", count,
                                              " after "
                                              "recovery"));
    }
    for (int round = 0; round < 3; ++round) {
      if (me == 0) absl::SleepFor(absl::Milliseconds(5));
      MESHDMA_RETURN_IF_ERROR(CheckPsum(16, me, n));
      MESHDMA_RETURN_IF_ERROR(CheckPsum(40000, me, n));
      MESHDMA_RETURN_IF_ERROR(CheckAllGather(8, me, n));
      MESHDMA_RETURN_IF_ERROR(device_barrier());
    }
    return absl::OkStatus();
  });
}

bool HoldsDevice(const Runtime& rt, int g) {
  const std::vector<int> mine = testing::LocalDevices(rt);
  return std::find(mine.begin(), mine.end(), g) != mine.end();
}

class RecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override { Create(testing::TierOptions(DmaMode::kAsync)); }
  void Create(RuntimeOptions o) {
    rt_.reset();
    // Failures here are errors, not timeouts: a generous timeout keeps a
    // loaded machine from failing the healthy Runs.
    o.wait_timeout = absl::Seconds(20);
    auto rt = Runtime::Create(o);
    ASSERT_TRUE(rt.ok()) << rt.status();
    rt_ = std::move(*rt);
    mesh_ = std::make_unique<Mesh>(*rt_->MakeMesh1D("x"));
    n_ = rt_->num_devices();
  }
  // The failed Run's status on a process that holds device 0 (which fails
  // first) must be an error naming it; elsewhere it may be OK (the process's
  // devices finished before they heard) or Aborted.
  void ExpectFailed(const absl::Status& s, absl::string_view what) {
    if (HoldsDevice(*rt_, 0)) {
      EXPECT_FALSE(s.ok());
      EXPECT_THAT(s.message(), HasSubstr("device 0"));
      EXPECT_THAT(s.message(), HasSubstr(what));
    }
  }
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<Mesh> mesh_;
  int n_ = 0;
};

// A kernel returns an error on device 0 while every other device waits for
// it in a collective: the waits abort, and the next Run is correct. Three
// times, each after a Run that built the collective channel.
TEST_F(RecoveryTest, KernelErrorWhileOthersWait) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    SCOPED_TRACE(absl::StrCat("attempt ", attempt));
    absl::Status before = HealthyRun(*rt_, *mesh_);
    ASSERT_TRUE(before.ok()) << before;
    absl::Status s = rt_->Run(*mesh_, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
      MESHDMA_RETURN_IF_ERROR(CheckPsum(16, me, n_));  // Builds the channel.
      return RunKernel({.name = "fails"}, [&]() -> absl::Status {
        if (me == 0) return absl::InternalError("device 0 gives up");
        return CheckPsum(16, me, n_);  // Waits for device 0 forever.
      });
    });
    ExpectFailed(s, "gives up");
    absl::Status healthy = HealthyRun(*rt_, *mesh_);
    ASSERT_TRUE(healthy.ok()) << healthy;
  }
}

// Exit-contract violation: every device leaves a semaphore count behind,
// and a signal of the failed Run lands late, in memory the failed device had
// already freed. The next Run's fresh semaphores read 0.
TEST_F(RecoveryTest, ExitContractViolationAndLateSignal) {
  absl::Status s = rt_->Run(*mesh_, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    MESHDMA_ASSIGN_OR_RETURN(auto late,
                             AllocateSemaphore(SemaphoreType::kRegular));
    MESHDMA_RETURN_IF_ERROR(RunKernel({.name = "leaks"}, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(auto sem,
                               AllocateSemaphore(SemaphoreType::kRegular));
      MESHDMA_RETURN_IF_ERROR(semaphore_signal(sem, me == 0 ? 2 : 1));
      return semaphore_wait(sem, 1);  // Device 0 leaves 1 behind.
    }));
    if (n_ > 1 && me == 1) {
      // By now device 0 has failed and freed `late`.
      absl::SleepFor(absl::Milliseconds(200));
      MESHDMA_RETURN_IF_ERROR(semaphore_signal(late, 1, DeviceId(0)));
    }
    return absl::OkStatus();
  });
  ExpectFailed(s, "exit contract of 'leaks' violated");
  absl::Status healthy = HealthyRun(*rt_, *mesh_);
  ASSERT_TRUE(healthy.ok()) << healthy;
}

// Device-barrier and DMA semaphores left mid-flight: device 0 fails before
// the barrier the others enter, after DMAs were started to it.
TEST_F(RecoveryTest, FailureInsideBarrierWithDmasInFlight) {
  absl::Status s = rt_->Run(*mesh_, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef buf,
                             AllocateSymmetric(DType::kF32, {100000}));
    // Only peers write a device's inbox (no entry barrier orders a peer's
    // DMA after this device's own writes).
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef inbox,
                             AllocateSymmetric(DType::kF32, {100000}));
    MESHDMA_ASSIGN_OR_RETURN(auto sems,
                             AllocateSemaphoreArray(SemaphoreType::kDma, 2));
    std::fill_n(buf.data_as<float>(), 100000, 1.0f);
    if (me == 0) return absl::InternalError("device 0 gives up");
    auto copy = make_async_remote_copy(buf, inbox, sems[0], sems[1],
                                       DeviceId((me + 1) % n_));
    MESHDMA_RETURN_IF_ERROR(copy.start());
    MESHDMA_RETURN_IF_ERROR(copy.wait_send());
    return device_barrier();
  });
  ExpectFailed(s, "gives up");
  absl::Status healthy = HealthyRun(*rt_, *mesh_);
  ASSERT_TRUE(healthy.ok()) << healthy;
}

// Every device waits for a signal nobody sends: the waits time out after
// MESHDMA_WAIT_TIMEOUT_S, and the next Run is correct.
TEST_F(RecoveryTest, WaitTimeout) {
  setenv(kWaitTimeoutEnv, "2", 1);
  RuntimeOptions o = testing::TierOptions(DmaMode::kEager);
  rt_.reset();
  o.wait_timeout.reset();
  auto rt = Runtime::Create(o);
  unsetenv(kWaitTimeoutEnv);
  ASSERT_TRUE(rt.ok()) << rt.status();
  ASSERT_EQ((*rt)->wait_timeout(), absl::Seconds(2));
  auto mesh = (*rt)->MakeMesh1D("x");
  ASSERT_TRUE(mesh.ok());
  absl::Status s = (*rt)->Run(*mesh, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(auto sem,
                             AllocateSemaphore(SemaphoreType::kRegular));
    return semaphore_wait(sem, 1);
  });
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.code() == absl::StatusCode::kDeadlineExceeded ||
              s.code() == absl::StatusCode::kAborted)
      << s;
  absl::Status healthy = HealthyRun(**rt, *mesh);
  ASSERT_TRUE(healthy.ok()) << healthy;
}

// A runtime destroyed and created again, in a loop, also after a failed
// (and recovered) Run; MPI, when meshdma initialised it, stays initialised
// until the process exits.
TEST(RuntimeRecreateTest, DestroyAndCreateAgain) {
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(absl::StrCat("runtime ", i));
    RuntimeOptions o =
        testing::TierOptions(i % 2 == 0 ? DmaMode::kAsync : DmaMode::kEager);
    o.wait_timeout = absl::Seconds(20);
    auto rt = Runtime::Create(o);
    ASSERT_TRUE(rt.ok()) << rt.status();
    auto mesh = (*rt)->MakeMesh1D("x");
    ASSERT_TRUE(mesh.ok());
    if (i == 1) {
      absl::Status failed = (*rt)->Run(*mesh, [&]() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
        if (me == 0) return absl::InternalError("device 0 gives up");
        return device_barrier();
      });
      if (HoldsDevice(**rt, 0)) {
        EXPECT_FALSE(failed.ok());
      }
    }
    absl::Status healthy = HealthyRun(**rt, *mesh);
    ASSERT_TRUE(healthy.ok()) << healthy;
    if (i == 3) {
      ASSERT_TRUE((*rt)->Shutdown().ok());
    }
  }
}

}  // namespace
}  // namespace meshdma
