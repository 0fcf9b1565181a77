// Flagged (LL) copies (dma/flagged_copy.h): a ring of devices passes
// messages of odd sizes through two flagged slots guarded by a credit
// semaphore, checked against a closed form; reachability follows the
// launch (same process or host: yes; another host or checked mode: no); bad
// buffers and flags are errors; a flag that never comes times out.
#include "meshdma/dma/flagged_copy.h"

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/semaphore.h"
#include "meshdma/dma/symmetric_memory.h"
#include "tests/dma/runtime_test_util.h"

namespace meshdma {
namespace {

using ::testing::HasSubstr;

std::byte Expected(int sender, int call, int64_t i) {
  return static_cast<std::byte>((sender * 31 + call * 7 + i) % 251);
}

using FlaggedCopyTest = testing::OneAxisTest;

// 200 messages right around the ring, sizes 1 B to 4 KiB + 3, through two
// slots; the receiver hands a slot back with a credit.
TEST_F(FlaggedCopyTest, RingOfMessagesThroughTwoSlots) {
  if (mesh_->size() < 2) GTEST_SKIP() << "needs 2 devices";
  const int n = mesh_->size();
  const Launch& launch = rt_->launch();
  for (int d = 0; d < n; ++d) {
    if (!SameHost(d, (d + 1) % n)) GTEST_SKIP() << "neighbours on two hosts";
  }
  (void)launch;
  constexpr int64_t kMax = 4099;
  absl::Status s = rt_->Run(*mesh_, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    const int right = (me + 1) % n, left = (me + n - 1) % n;
    MESHDMA_ASSIGN_OR_RETURN(
        auto slots, AllocateSymmetric(DType::kI64, {2, FlaggedWords(kMax)}));
    MESHDMA_ASSIGN_OR_RETURN(auto credit,
                             AllocateSemaphore(SemaphoreType::kRegular));
    MESHDMA_ASSIGN_OR_RETURN(bool reaches,
                             flagged_copy_reaches(DeviceId(right)));
    if (!reaches) return absl::InternalError("right neighbour not reachable");
    std::vector<std::byte> payload(kMax), got(kMax);
    for (int call = 0; call < 200; ++call) {
      const int64_t bytes = 1 + (call * 977) % kMax;
      MESHDMA_ASSIGN_OR_RETURN(ArrayRef slot, slots.At(call % 2));
      if (call >= 2) MESHDMA_RETURN_IF_ERROR(semaphore_wait(credit, 1));
      for (int64_t i = 0; i < bytes; ++i) payload[i] = Expected(me, call, i);
      MESHDMA_RETURN_IF_ERROR(flagged_copy({payload.data(), size_t(bytes)},
                                           slot, call + 1, DeviceId(right)));
      MESHDMA_RETURN_IF_ERROR(
          flagged_wait(slot, call + 1, {got.data(), size_t(bytes)}));
      for (int64_t i = 0; i < bytes; ++i) {
        if (got[i] != Expected(left, call, i)) {
          return absl::InternalError(
              absl::StrCat("call ", call, " byte ", i, " from device ", left));
        }
      }
      MESHDMA_RETURN_IF_ERROR(semaphore_signal(credit, 1, DeviceId(left)));
    }
    // The last two credits, owed by the right neighbour.
    return semaphore_wait(credit, 2);
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST_F(FlaggedCopyTest, ReachesFollowsTheLaunch) {
  const int n = mesh_->size();
  std::vector<int> wrong(n, 0);
  absl::Status s = rt_->Run(*mesh_, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    for (int peer = 0; peer < n; ++peer) {
      MESHDMA_ASSIGN_OR_RETURN(bool reaches,
                               flagged_copy_reaches(DeviceId(peer)));
      if (reaches != SameHost(me, peer)) ++wrong[me];
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  for (int d = 0; d < n; ++d) EXPECT_EQ(wrong[d], 0) << "device " << d;
}

TEST_F(FlaggedCopyTest, BadBuffersAndFlagsAreErrors) {
  absl::Status s = rt_->Run(*mesh_, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    MESHDMA_ASSIGN_OR_RETURN(auto slot, AllocateSymmetric(DType::kI64, {4}));
    std::vector<std::byte> payload(64);
    absl::Status flag0 = flagged_copy(payload, slot, 0, DeviceId(me));
    if (!absl::IsInvalidArgument(flag0) ||
        !absl::StrContains(flag0.message(), "flag 0")) {
      return absl::InternalError(absl::StrCat("flag 0: ", flag0.ToString()));
    }
    // 64 bytes need 16 words; the slot has 4.
    absl::Status small = flagged_copy(payload, slot, 1, DeviceId(me));
    if (!absl::IsInvalidArgument(small) ||
        !absl::StrContains(small.message(), "16 flagged words")) {
      return absl::InternalError(absl::StrCat("small: ", small.ToString()));
    }
    std::vector<int64_t> ordinary(16);
    const int64_t shape[] = {16};
    auto view = ArrayRef::FromPointer(ordinary.data(), DType::kI64, shape);
    if (!view.ok()) return view.status();
    absl::Status not_heap = flagged_wait(*view, 1, {payload.data(), 8});
    if (!absl::IsInvalidArgument(not_heap) ||
        !absl::StrContains(not_heap.message(), "symmetric heap")) {
      return absl::InternalError(
          absl::StrCat("ordinary memory: ", not_heap.ToString()));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST(FlaggedCopyTimeoutTest, AFlagThatNeverComesTimesOut) {
  RuntimeOptions o = testing::TierOptions(DmaMode::kAsync);
  o.wait_timeout = absl::Milliseconds(300);
  auto rt = Runtime::Create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  auto mesh = (*rt)->MakeMesh1D("x");
  ASSERT_TRUE(mesh.ok());
  absl::Status s = (*rt)->Run(*mesh, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(auto slot, AllocateSymmetric(DType::kI64, {4}));
    std::vector<std::byte> out(8);
    return flagged_wait(slot, 9, out);
  });
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("flagged_wait"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("expected 9"));
}

TEST(FlaggedCopyCheckedTest, CheckedModeFallsBackToDmas) {
  testing::RunCheckedOnRing([](int peer) -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(bool reaches,
                             flagged_copy_reaches(DeviceId(peer)));
    if (reaches) return absl::InternalError("reachable in checked mode");
    MESHDMA_ASSIGN_OR_RETURN(auto slot, AllocateSymmetric(DType::kI64, {4}));
    std::vector<std::byte> payload(8);
    absl::Status st = flagged_copy(payload, slot, 1, DeviceId(peer));
    if (!absl::IsFailedPrecondition(st)) {
      return absl::InternalError(absl::StrCat("checked: ", st.ToString()));
    }
    return absl::OkStatus();
  });
}

}  // namespace
}  // namespace meshdma
