// Flagged (LL) copies (dma/flagged_copy.h): a ring of devices passes
// messages of odd sizes through two flagged slots guarded by a credit
// semaphore, checked against a closed form; reachability follows the
// launch (same process or host: yes; another host or checked mode: no); bad
// buffers and flags are errors; a flag that never comes times out; heads
// with plain tails arrive whole.
#include "meshdma/dma/flagged_copy.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
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

// Heads with plain tails (contract 5) through two resolved buffers of one
// cache line each: a 16-byte head, tails of 0 to 40 bytes whose words look
// like the next calls' flags (never polled, so harmless), and heads of the
// old form in between; every head and tail checked. A tail that does not fit
// is an error naming both sizes.
TEST_F(FlaggedCopyTest, HeadsWithPlainTails) {
  if (mesh_->size() < 2) GTEST_SKIP() << "needs 2 devices";
  const int n = mesh_->size();
  for (int d = 0; d < n; ++d) {
    if (!SameHost(d, (d + 1) % n)) GTEST_SKIP() << "neighbours on two hosts";
  }
  constexpr int64_t kHead = 16, kMaxTail = 40;
  absl::Status s = rt_->Run(*mesh_, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    const int right = (me + 1) % n, left = (me + n - 1) % n;
    // 4 head words + 40 tail bytes = 72 bytes: 9 words per slot.
    MESHDMA_ASSIGN_OR_RETURN(auto slots,
                             AllocateSymmetric(DType::kI64, {2, 9}));
    MESHDMA_ASSIGN_OR_RETURN(auto credit,
                             AllocateSemaphore(SemaphoreType::kRegular));
    std::vector<FlaggedBuffer> out, in;
    for (int k = 0; k < 2; ++k) {
      MESHDMA_ASSIGN_OR_RETURN(ArrayRef slot, slots.At(k));
      MESHDMA_ASSIGN_OR_RETURN(FlaggedBuffer o,
                               FlaggedBuffer::ForCopy(slot, DeviceId(right)));
      MESHDMA_ASSIGN_OR_RETURN(FlaggedBuffer i, FlaggedBuffer::ForWait(slot));
      out.push_back(std::move(o));
      in.push_back(std::move(i));
    }
    std::vector<std::byte> head(kHead), tail(kMaxTail), got_head(kHead),
        got_tail(kMaxTail);
    for (int call = 0; call < 300; ++call) {
      const uint32_t flag = call + 1;
      const int64_t tail_bytes =
          call % 3 == 2 ? 0 : (call * 7) % (kMaxTail + 1);
      if (call >= 2) MESHDMA_RETURN_IF_ERROR(semaphore_wait(credit, 1));
      for (int64_t i = 0; i < kHead; ++i) head[i] = Expected(me, call, i);
      for (int64_t w = 0; w * 8 < tail_bytes; ++w) {
        // Each tail word's upper half holds a flag a later call uses.
        const uint64_t word = (uint64_t{flag + 2} << 32) | (me * 1000 + w);
        std::memcpy(tail.data() + w * 8, &word,
                    std::min<int64_t>(8, tail_bytes - w * 8));
      }
      const int k = call % 2;
      MESHDMA_RETURN_IF_ERROR(
          out[k].Copy(head, {tail.data(), size_t(tail_bytes)}, flag));
      MESHDMA_RETURN_IF_ERROR(
          in[k].Wait(flag, got_head, {got_tail.data(), size_t(tail_bytes)}));
      for (int64_t i = 0; i < kHead; ++i) {
        if (got_head[i] != Expected(left, call, i)) {
          return absl::InternalError(absl::StrCat("call ", call, " head byte ",
                                                  i, " from device ", left));
        }
      }
      for (int64_t w = 0; w * 8 < tail_bytes; ++w) {
        const uint64_t want = (uint64_t{flag + 2} << 32) | (left * 1000 + w);
        uint64_t got = 0;
        const int64_t b = std::min<int64_t>(8, tail_bytes - w * 8);
        std::memcpy(&got, got_tail.data() + w * 8, b);
        const uint64_t mask =
            b == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * b)) - 1;
        if (got != (want & mask)) {
          return absl::InternalError(
              absl::StrCat("call ", call, " tail word ", w, " from device ",
                           left, ": ", got, ", expected ", want & mask));
        }
      }
      MESHDMA_RETURN_IF_ERROR(semaphore_signal(credit, 1, DeviceId(left)));
    }
    MESHDMA_RETURN_IF_ERROR(semaphore_wait(credit, 2));
    // 4 head words and 41 tail bytes need 73 bytes; the slot holds 72.
    std::vector<std::byte> long_tail(kMaxTail + 1);
    absl::Status too_long = out[0].Copy(head, long_tail, 1000);
    if (!absl::IsInvalidArgument(too_long) ||
        !absl::StrContains(too_long.message(), "tail of 41 bytes") ||
        !absl::StrContains(too_long.message(), "72 bytes")) {
      return absl::InternalError(
          absl::StrCat("long tail: ", too_long.ToString()));
    }
    // A tail with no head would be read unpublished.
    absl::Status headless = in[0].Wait(1000, {}, got_tail);
    if (!absl::IsInvalidArgument(headless) ||
        !absl::StrContains(headless.message(), "head of at least 1 byte")) {
      return absl::InternalError(
          absl::StrCat("tail without head: ", headless.ToString()));
    }
    return absl::OkStatus();
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
