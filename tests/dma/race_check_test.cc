// Checked mode's race detector (docs/checked_mode.md): each classic bug of
// Pallas distributed kernels is reported, and its corrected form is not.
#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/check.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/semaphore.h"
#include "meshdma/dma/symmetric_memory.h"
#include "meshdma/kernels/pallas_call.h"
#include "meshdma/kernels/ref.h"
#include "tests/dma/runtime_test_util.h"

namespace meshdma {
namespace {

using ::testing::HasSubstr;

class RaceCheckTest : public ::testing::Test {
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
  absl::Status Run(std::function<absl::Status()> fn) {
    return rt_->Run(*mesh_, std::move(fn));
  }
  int n() const { return mesh_->size(); }

  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<Mesh> mesh_;
};

// Pushes `src` into the right neighbour's `dst`; `bug` touches a buffer
// before the wait that makes it safe.
absl::Status PermuteWith(bool touch_src_early, bool read_dst_early) {
  MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
  MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
  MESHDMA_ASSIGN_OR_RETURN(auto src, AllocateSymmetric<float>({64}));
  MESHDMA_ASSIGN_OR_RETURN(auto dst, AllocateSymmetric<float>({64}));
  return RunKernel({.name = "permute"}, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(auto send,
                             AllocateSemaphore(SemaphoreType::kDma, "send"));
    MESHDMA_ASSIGN_OR_RETURN(auto recv,
                             AllocateSemaphore(SemaphoreType::kDma, "recv"));
    auto copy = make_async_remote_copy(src, dst, send, recv, (me + 1) % n);
    MESHDMA_RETURN_IF_ERROR(copy.start());
    if (touch_src_early) AnnotateWrite(src, "refill of the send buffer");
    MESHDMA_RETURN_IF_ERROR(copy.wait_send());
    if (!touch_src_early) AnnotateWrite(src, "refill of the send buffer");
    if (read_dst_early) AnnotateRead(dst, "use of the receive buffer");
    MESHDMA_RETURN_IF_ERROR(copy.wait_recv());
    if (!read_dst_early) AnnotateRead(dst, "use of the receive buffer");
    return absl::OkStatus();
  });
}

TEST_F(RaceCheckTest, SendBufferWrittenBeforeWaitSend) {
  absl::Status s = Run([] { return PermuteWith(true, false); });
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("data race"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("wait_send on send_sem"));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("refill of the send buffer on device 0"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("kernel 'permute'"));
}

TEST_F(RaceCheckTest, ReceiveBufferReadBeforeWaitRecv) {
  absl::Status s = Run([] { return PermuteWith(false, true); });
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("data race"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("wait_recv on recv_sem"));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("allocation #1 of kernel 'Run'"));
}

TEST_F(RaceCheckTest, CorrectPermuteIsSilent) {
  EXPECT_TRUE(Run([] { return PermuteWith(false, false); }).ok());
}

// Kernel 1 receives into scratch and reads it; kernel 2 pushes into scratch
// at the same heap offset. Without an entry barrier a neighbour already in
// kernel 2 may overwrite what this device still reads in kernel 1.
absl::Status ScratchReuse(bool entry_barrier) {
  MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
  MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
  MESHDMA_ASSIGN_OR_RETURN(auto src, AllocateSymmetric<float>({32}));
  MESHDMA_ASSIGN_OR_RETURN(auto sems,
                           AllocateSemaphoreArray(SemaphoreType::kDma, 2));
  for (const char* name : {"step_a", "step_b"}) {
    MESHDMA_RETURN_IF_ERROR(RunKernel(
        {.name = name, .entry_barrier = entry_barrier}, [&]() -> absl::Status {
          // The second kernel starts late, so that its DMA follows the
          // neighbour's read in the first (a race all the same: nothing
          // orders them).
          if (std::string(name) == "step_b")
            absl::SleepFor(absl::Milliseconds(20));
          MESHDMA_ASSIGN_OR_RETURN(auto scratch,
                                   AllocateSymmetric<float>({32}));
          auto copy = make_async_remote_copy(src, scratch, sems[0], sems[1],
                                             (me + 1) % n);
          MESHDMA_RETURN_IF_ERROR(copy.start());
          MESHDMA_RETURN_IF_ERROR(copy.wait());
          MESHDMA_ASSIGN_OR_RETURN(auto ref, Ref<float>::Of(scratch));
          (void)ref.Load();  // Consumes the scratch.
          return absl::OkStatus();
        }));
  }
  return absl::OkStatus();
}

TEST_F(RaceCheckTest, ScratchReuseWithoutEntryBarrier) {
  absl::Status s = Run([] { return ScratchReuse(false); });
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("data race"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("Ref load"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("kernel 'step_b'"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("entry barrier"));
}

TEST_F(RaceCheckTest, ScratchReuseWithEntryBarrierIsSilent) {
  EXPECT_TRUE(Run([] { return ScratchReuse(true); }).ok());
}

// The same bug written as two `pallas_call`s that each push into the right
// neighbour's VMEM scratch: with default options the calls communicate (they
// declare DMA semaphores), so each starts with the entry barrier and the
// scratch of the first call cannot be overwritten by the second. The named
// opt-out `entry_barrier = false` brings the race back.
absl::Status PallasScratchReuse(std::optional<bool> entry_barrier) {
  MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
  MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
  MESHDMA_ASSIGN_OR_RETURN(auto src, AllocateSymmetric<float>({32}));
  for (const char* name : {"call_a", "call_b"}) {
    PallasCallParams params{
        .name = name,
        .grid = {1},
        .scratch_shapes = {VMEM({32}, DType::kF32),
                           SemaphoreShape(SemaphoreType::kDma, 2)},
        .entry_barrier = entry_barrier};
    auto body = [&](const KernelArgs& args) -> absl::Status {
      if (std::string(name) == "call_b") absl::SleepFor(absl::Milliseconds(20));
      MESHDMA_ASSIGN_OR_RETURN(ArrayRef scratch, args.scratch_buffer(0));
      MESHDMA_ASSIGN_OR_RETURN(SemaphoreArray sems, args.semaphores(1));
      auto copy =
          make_async_remote_copy(src, scratch, sems[0], sems[1], (me + 1) % n);
      MESHDMA_RETURN_IF_ERROR(copy.start());
      MESHDMA_RETURN_IF_ERROR(copy.wait());
      MESHDMA_ASSIGN_OR_RETURN(auto ref, args.scratch<float>(0));
      (void)ref.Load();  // Consumes the scratch.
      return absl::OkStatus();
    };
    MESHDMA_RETURN_IF_ERROR(pallas_call(params, body, {}, {}));
  }
  return absl::OkStatus();
}

TEST_F(RaceCheckTest, BackToBackPallasCallsAreSafeByDefault) {
  absl::Status s = Run([] { return PallasScratchReuse(std::nullopt); });
  EXPECT_TRUE(s.ok()) << s;
}

TEST_F(RaceCheckTest, BackToBackPallasCallsRaceWhenBarrierOptedOut) {
  absl::Status s = Run([] { return PallasScratchReuse(false); });
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("data race"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("kernel 'call_b'"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("Ref load at grid point ("));
}

// Devices 1 and 2 both push 32 floats into device 0's buffer; with
// `overlap` their rows overlap.
absl::Status TwoWriters(bool overlap) {
  MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
  MESHDMA_ASSIGN_OR_RETURN(auto src, AllocateSymmetric<float>({32}));
  MESHDMA_ASSIGN_OR_RETURN(auto dst, AllocateSymmetric<float>({64}));
  return RunKernel({.name = "gather"}, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(auto send, AllocateSemaphore(SemaphoreType::kDma));
    MESHDMA_ASSIGN_OR_RETURN(auto recv, AllocateSemaphore(SemaphoreType::kDma));
    if (me == 1 || me == 2) {
      const int64_t start = overlap ? (me - 1) * 16 : (me - 1) * 32;
      MESHDMA_ASSIGN_OR_RETURN(auto part, dst.Slice(0, start, 32));
      auto copy = make_async_remote_copy(src, part, send, recv, 0);
      MESHDMA_RETURN_IF_ERROR(copy.start());
      MESHDMA_RETURN_IF_ERROR(copy.wait_send());
    }
    if (me == 0) {
      auto copy = make_async_remote_copy(src, dst, send, recv, 0);
      MESHDMA_RETURN_IF_ERROR(copy.wait_recv());  // 32 floats, twice.
      MESHDMA_RETURN_IF_ERROR(copy.wait_recv());
    }
    return absl::OkStatus();
  });
}

TEST_F(RaceCheckTest, TwoDevicesWriteOverlappingBytes) {
  if (n() < 3) GTEST_SKIP() << "needs 3 devices";
  absl::Status s = Run([] { return TwoWriters(true); });
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), ::testing::Not(HasSubstr("exit")));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("data race on device 0's heap"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("issued by device 1"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("issued by device 2"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("bytes ["));
}

TEST_F(RaceCheckTest, TwoDevicesWriteDisjointBytesIsSilent) {
  if (n() < 3) GTEST_SKIP() << "needs 3 devices";
  EXPECT_TRUE(Run([] { return TwoWriters(false); }).ok());
}

// A ring with two receive slots: at step s a device pushes into slot s % 2
// of its right neighbour, after (from step 2 on) the neighbour has said the
// slot is free on a REGULAR capacity semaphore. `early` signals capacity
// right after wait_recv, before the slot has been read.
absl::Status CapacityRing(bool early) {
  MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
  MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
  constexpr int kSteps = 6;
  MESHDMA_ASSIGN_OR_RETURN(auto src, AllocateSymmetric<float>({16}));
  MESHDMA_ASSIGN_OR_RETURN(auto slots, AllocateSymmetric<float>({2, 16}));
  return RunKernel({.name = "ring"}, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(auto send, AllocateSemaphore(SemaphoreType::kDma));
    MESHDMA_ASSIGN_OR_RETURN(auto recv,
                             AllocateSemaphoreArray(SemaphoreType::kDma, 2));
    MESHDMA_ASSIGN_OR_RETURN(
        auto capacity, AllocateSemaphore(SemaphoreType::kRegular, "capacity"));
    const int right = (me + 1) % n, left = (me + n - 1) % n;
    for (int s = 0; s < kSteps; ++s) {
      MESHDMA_ASSIGN_OR_RETURN(auto slot, slots.At(s % 2));
      if (s >= 2) MESHDMA_RETURN_IF_ERROR(semaphore_wait(capacity, 1));
      auto copy = make_async_remote_copy(src, slot, send, recv[s % 2], right);
      MESHDMA_RETURN_IF_ERROR(copy.start());
      MESHDMA_RETURN_IF_ERROR(copy.wait_send());
      MESHDMA_RETURN_IF_ERROR(copy.wait_recv());
      if (early) MESHDMA_RETURN_IF_ERROR(semaphore_signal(capacity, 1, left));
      MESHDMA_ASSIGN_OR_RETURN(auto ref, Ref<float>::Of(slot));
      (void)ref.Load();
      if (!early) MESHDMA_RETURN_IF_ERROR(semaphore_signal(capacity, 1, left));
    }
    return semaphore_wait(capacity, 2);
  });
}

TEST_F(RaceCheckTest, CapacitySignalOneStepEarly) {
  // With two devices the neighbour's next DMA, issued after the load, does
  // order the load before its DMA into the slot: no race.
  if (n() < 3) GTEST_SKIP() << "needs 3 devices";
  absl::Status s = Run([] { return CapacityRing(true); });
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("data race"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("Ref load"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("capacity semaphore"));
}

TEST_F(RaceCheckTest, CapacityRingIsSilent) {
  EXPECT_TRUE(Run([] { return CapacityRing(false); }).ok());
}

// Two DMAs of one device into the same bytes, the second started before the
// first was waited for.
TEST_F(RaceCheckTest, OneDeviceTwoDmasIntoTheSameBytes) {
  absl::Status s = Run([]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(auto src, AllocateSymmetric<float>({16}));
    MESHDMA_ASSIGN_OR_RETURN(auto dst, AllocateSymmetric<float>({16}));
    return RunKernel({.name = "twice"}, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(auto sem,
                               AllocateSemaphore(SemaphoreType::kDma));
      auto copy = make_async_copy(src, dst, sem);
      MESHDMA_RETURN_IF_ERROR(copy.start());
      MESHDMA_RETURN_IF_ERROR(copy.start());
      MESHDMA_RETURN_IF_ERROR(copy.wait());
      return copy.wait();
    });
  });
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("data race"));
}

// Each pair of sites is reported once, however often it races.
TEST_F(RaceCheckTest, ReportedOncePerPairOfSites) {
  absl::Status s = Run([]() -> absl::Status {
    for (int i = 0; i < 5; ++i) {
      MESHDMA_RETURN_IF_ERROR(PermuteWith(true, false));
    }
    return absl::OkStatus();
  });
  ASSERT_FALSE(s.ok());
  const std::string msg(s.message());
  size_t count = 0;
  for (size_t p = msg.find("data race on"); p != std::string::npos;
       p = msg.find("data race on", p + 1)) {
    ++count;
  }
  EXPECT_EQ(count, static_cast<size_t>(n()));
}

// A race seen by one device's process fails Run on every process, naming the
// device and the buffer: here only the last device reads its receive buffer
// before wait_recv.
TEST_F(RaceCheckTest, RaceOnOneDeviceFailsRunEverywhere) {
  absl::Status s = Run([]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
    return PermuteWith(false, me == n - 1);
  });
  ASSERT_FALSE(s.ok());
  const std::string msg(s.message());
  EXPECT_THAT(msg, HasSubstr("1 data race(s)"));
  EXPECT_THAT(msg, HasSubstr(absl::StrCat("data race on device ", n() - 1,
                                          "'s heap, allocation #1")));
  EXPECT_THAT(msg, HasSubstr(absl::StrCat(
                       "use of the receive buffer on device ", n() - 1)));
  EXPECT_THAT(msg, HasSubstr(absl::StrCat("issued by device ", n() - 2)));
  if (rt_->launch().num_processes() > 1) {
    EXPECT_THAT(msg, HasSubstr(absl::StrCat(
                         "rank ", rt_->launch().num_processes() - 1, ": ")));
  }
  // The next Run starts clean, on every process.
  EXPECT_TRUE(Run([] { return PermuteWith(false, false); }).ok());
}

// Ordinary memory that one device used and gave up, and another device then
// takes (as the allocator hands freed bytes out again): a new view of it
// starts its history afresh, so the two devices' DMAs are not a race. The
// hand-over is an atomic flag the checker does not see, as the allocator's
// own ordering is.
TEST_F(RaceCheckTest, OrdinaryMemoryReusedByAnotherDeviceIsSilent) {
  if (testing::LocalDevices(*rt_).size() < 2) {
    GTEST_SKIP() << "needs 2 devices in this process";
  }
  std::vector<float> pool(256, 0.0f);
  std::atomic<bool> handed_over{false};
  const int first = testing::LocalDevices(*rt_)[0];
  const int second = testing::LocalDevices(*rt_)[1];
  absl::Status s = Run([&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    if (me != first && me != second) return absl::OkStatus();
    if (me == second) {
      while (!handed_over.load(std::memory_order_acquire)) {
        absl::SleepFor(absl::Microseconds(50));
      }
    }
    MESHDMA_ASSIGN_OR_RETURN(auto src, AllocateSymmetric<float>({256}));
    MESHDMA_ASSIGN_OR_RETURN(auto dst,
                             ArrayRef::FromPointer(pool.data(), DType::kF32,
                                                   std::vector<int64_t>{256}));
    MESHDMA_ASSIGN_OR_RETURN(auto sem, AllocateSemaphore(SemaphoreType::kDma));
    auto copy = make_async_copy(src, dst, sem);
    MESHDMA_RETURN_IF_ERROR(copy.start());
    MESHDMA_RETURN_IF_ERROR(copy.wait());
    if (me == first) handed_over.store(true, std::memory_order_release);
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

// Two devices copy into overlapping parts of one host buffer, viewed before
// the Run: a race on memory outside the heap, naming both devices.
TEST_F(RaceCheckTest, OrdinaryMemorySharedByTwoDevicesRaces) {
  if (testing::LocalDevices(*rt_).size() < 2) {
    GTEST_SKIP() << "needs 2 devices in this process";
  }
  std::vector<float> host(96, 0.0f);
  auto view =
      ArrayRef::FromPointer(host.data(), DType::kF32, std::vector<int64_t>{96});
  ASSERT_TRUE(view.ok()) << view.status();
  const int first = testing::LocalDevices(*rt_)[0];
  const int second = testing::LocalDevices(*rt_)[1];
  absl::Status s = Run([&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    MESHDMA_ASSIGN_OR_RETURN(auto src, AllocateSymmetric<float>({64}));
    if (me != first && me != second) return absl::OkStatus();
    MESHDMA_ASSIGN_OR_RETURN(auto part,
                             view->Slice(0, me == first ? 0 : 32, 64));
    MESHDMA_ASSIGN_OR_RETURN(auto sem, AllocateSemaphore(SemaphoreType::kDma));
    auto copy = make_async_copy(src, part, sem);
    MESHDMA_RETURN_IF_ERROR(copy.start());
    return copy.wait();
  });
  ASSERT_FALSE(s.ok());
  const std::string msg(s.message());
  EXPECT_THAT(msg, HasSubstr("data race on memory outside the heap"));
  EXPECT_THAT(msg, HasSubstr(absl::StrCat("issued by device ", first)));
  EXPECT_THAT(msg, HasSubstr(absl::StrCat("issued by device ", second)));
  // Bytes [128, 256) of the buffer: floats 32 to 63.
  const intptr_t base = reinterpret_cast<intptr_t>(host.data());
  EXPECT_THAT(msg, HasSubstr(absl::StrCat("bytes [", base + 128, ", ",
                                          base + 256, ")")));
}

}  // namespace
}  // namespace meshdma
