// Peer views (dma/peer_view.h): each device stores into its right
// neighbour's symmetric buffer through a peer view and signals; the
// neighbour checks every element against a closed form. Reachability follows
// the launch (same process or host: yes; another host or checked mode: no),
// and so does sharing all memory (same process only);
// a view that is not this device's symmetric memory is InvalidArgument.
// A neighbour that shares the address space (contract 6) has its private
// memory read in place at the address it published.
#include "meshdma/dma/peer_view.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/semaphore.h"
#include "meshdma/dma/symmetric_memory.h"
#include "tests/dma/runtime_test_util.h"

namespace meshdma {
namespace {

int64_t Expected(int sender, int64_t i) { return sender * 1000003 + i * 7; }

class PeerViewTest : public testing::OneAxisTest {
 protected:
  // The `races` ctest variants turn checked mode on through the environment.
  static bool Checked() {
    const char* check = std::getenv("MESHDMA_CHECK");
    return check != nullptr && std::string(check) == "races";
  }
  // Skips the test unless every device can make a peer view of its right
  // neighbour (2 devices or more, one host, checked mode off).
  void RequireReachableNeighbours() {
    const int n = mesh_->size();
    if (n < 2) GTEST_SKIP() << "needs 2 devices";
    for (int d = 0; d < n; ++d) {
      if (!SameHost(d, (d + 1) % n)) GTEST_SKIP() << "neighbours on two hosts";
    }
    if (Checked()) GTEST_SKIP() << "peer views are off in checked mode";
  }
};

TEST_F(PeerViewTest, StoresReachTheNeighbourAfterItsSignal) {
  RequireReachableNeighbours();
  if (IsSkipped()) return;
  const int n = mesh_->size();
  constexpr int64_t kCount = 40009;
  absl::Status s = rt_->Run(*mesh_, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    const int right = (me + 1) % n, left = (me + n - 1) % n;
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef inbox,
                             AllocateSymmetric(DType::kI64, {kCount}));
    MESHDMA_ASSIGN_OR_RETURN(Semaphore landed,
                             AllocateSemaphore(SemaphoreType::kRegular));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef theirs,
                             peer_view(inbox, DeviceId(right)));
    if (theirs.is_symmetric() || theirs.data() == inbox.data()) {
      return absl::InternalError("a peer view must be ordinary memory");
    }
    for (int64_t i = 0; i < kCount; ++i) {
      theirs.data_as<int64_t>()[i] = Expected(me, i);
    }
    MESHDMA_RETURN_IF_ERROR(semaphore_signal(landed, 1, DeviceId(right)));
    MESHDMA_RETURN_IF_ERROR(semaphore_wait(landed, 1));
    for (int64_t i = 0; i < kCount; ++i) {
      if (inbox.data_as<int64_t>()[i] != Expected(left, i)) {
        return absl::InternalError(
            absl::StrCat("element ", i, " from device ", left));
      }
    }
    // The calling device itself: its own bytes.
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef own, peer_view(inbox, DeviceId(me)));
    if (own.data() != inbox.data()) {
      return absl::InternalError("own view is not the buffer");
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST_F(PeerViewTest, ReachesFollowsTheLaunch) {
  const int n = mesh_->size();
  std::vector<int> wrong(n, 0);
  absl::Status s = rt_->Run(*mesh_, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef buf, AllocateSymmetric(DType::kF32, {8}));
    for (int peer = 0; peer < n; ++peer) {
      MESHDMA_ASSIGN_OR_RETURN(bool reaches, peer_view_reaches(DeviceId(peer)));
      const bool want = peer == me || (SameHost(me, peer) && !Checked());
      if (reaches != want) ++wrong[me];
      absl::StatusOr<ArrayRef> view = peer_view(buf, DeviceId(peer));
      if (view.ok() != want) ++wrong[me];
      if (!want && !absl::IsFailedPrecondition(view.status())) ++wrong[me];
      // Contract 6: all memory is shared with the threads of one process.
      MESHDMA_ASSIGN_OR_RETURN(bool shares,
                               peer_shares_address_space(DeviceId(peer)));
      if (shares != (peer == me || (SameProcess(me, peer) && !Checked())))
        ++wrong[me];
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  for (int d = 0; d < n; ++d) EXPECT_EQ(wrong[d], 0) << "device " << d;
}

TEST_F(PeerViewTest, PrivateMemoryOfAThreadNeighbourIsReadInPlace) {
  const int n = mesh_->size();
  constexpr int64_t kCount = 300007;  // Not a whole number of pages.
  std::vector<std::string> wrong(n);
  absl::Status s = rt_->Run(*mesh_, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    const int right = (me + 1) % n, left = (me + n - 1) % n;
    std::vector<int64_t> mine(kCount);
    for (int64_t i = 0; i < kCount; ++i) mine[i] = Expected(me, i);
    // Publish the address; the signal orders it before the left neighbour's
    // reads, and `done` keeps `mine` alive until that neighbour has read.
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef board,
                             AllocateSymmetric(DType::kI64, {1}));
    MESHDMA_ASSIGN_OR_RETURN(Semaphore published,
                             AllocateSemaphore(SemaphoreType::kRegular));
    MESHDMA_ASSIGN_OR_RETURN(Semaphore done,
                             AllocateSemaphore(SemaphoreType::kRegular));
    board.data_as<int64_t>()[0] =
        static_cast<int64_t>(reinterpret_cast<uintptr_t>(mine.data()));
    MESHDMA_RETURN_IF_ERROR(semaphore_signal(published, 1, DeviceId(left)));
    MESHDMA_RETURN_IF_ERROR(semaphore_wait(published, 1));
    // Contract 6: the right neighbour's private bytes, at the address its
    // board holds, where it shares this device's address space.
    MESHDMA_ASSIGN_OR_RETURN(bool shares,
                             peer_shares_address_space(DeviceId(right)));
    if (shares) {
      MESHDMA_ASSIGN_OR_RETURN(ArrayRef their_board,
                               peer_view(board, DeviceId(right)));
      const int64_t* theirs = reinterpret_cast<const int64_t*>(
          static_cast<uintptr_t>(their_board.data_as<int64_t>()[0]));
      for (int64_t i = 0; i < kCount; ++i) {
        if (theirs[i] != Expected(right, i)) {
          wrong[me] = absl::StrCat("element ", i, " of device ", right, ": ",
                                   theirs[i]);
          break;
        }
      }
    }
    MESHDMA_RETURN_IF_ERROR(semaphore_signal(done, 1, DeviceId(right)));
    return semaphore_wait(done, 1);
  });
  ASSERT_TRUE(s.ok()) << s;
  for (int d = 0; d < n; ++d) EXPECT_EQ(wrong[d], "") << "device " << d;
}

TEST_F(PeerViewTest, OrdinaryOrForgedViewsAreErrors) {
  absl::Status s = rt_->Run(*mesh_, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    std::vector<float> host(8);
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef ordinary,
                             ArrayRef::FromPointer(host.data(), DType::kF32,
                                                   std::vector<int64_t>{8}));
    absl::Status st = peer_view(ordinary, DeviceId(me)).status();
    if (!absl::IsInvalidArgument(st) ||
        !absl::StrContains(st.message(), "not in the symmetric heap")) {
      return absl::InternalError(absl::StrCat("ordinary: ", st.ToString()));
    }
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef buf, AllocateSymmetric(DType::kF32, {8}));
    MESHDMA_ASSIGN_OR_RETURN(
        ArrayRef forged,
        ArrayRef::Symmetric(buf.data(), buf.heap_offset() + 64, DType::kF32,
                            std::vector<int64_t>{8}));
    st = peer_view(forged, DeviceId(me)).status();
    if (!absl::IsInvalidArgument(st) ||
        !absl::StrContains(st.message(), "claims heap offset")) {
      return absl::InternalError(absl::StrCat("forged: ", st.ToString()));
    }
    st = peer_view(buf, DeviceId(1 << 20)).status();
    if (st.ok()) return absl::InternalError("a device off the mesh was taken");
    st = peer_shares_address_space(DeviceId(1 << 20)).status();
    if (st.ok() ||
        !absl::StrContains(st.message(), "peer_shares_address_space"))
      return absl::InternalError(absl::StrCat("off the mesh: ", st.ToString()));
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  // Outside a Run there is no calling device.
  absl::Status outside = peer_shares_address_space(DeviceId(0)).status();
  EXPECT_FALSE(outside.ok());
  EXPECT_TRUE(absl::StrContains(outside.message(), "peer_shares_address_space"))
      << outside;
}

// Counters (contract 5): for kRounds rounds each device stores a block into
// its right neighbour's inbox and advances the neighbour's `filled` counter;
// the neighbour waits on it, checks the block, and advances the writer's
// `drained` counter, which the writer waits on before the next round.
TEST_F(PeerViewTest, CountersOrderRoundsOfStores) {
  RequireReachableNeighbours();
  if (IsSkipped()) return;
  const int n = mesh_->size();
  constexpr int64_t kCount = 509;
  constexpr int kRounds = 2000;
  absl::Status s = rt_->Run(*mesh_, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    const int right = (me + 1) % n, left = (me + n - 1) % n;
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef inbox,
                             AllocateSymmetric(DType::kI64, {kCount}));
    // Two counters, a cache line apart: written by the left neighbour
    // (filled) and by the right one (drained).
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef words,
                             AllocateSymmetric(DType::kI64, {16}));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef filled, words.Slice(0, 0, 1));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef drained, words.Slice(0, 8, 1));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef their_inbox,
                             peer_view(inbox, DeviceId(right)));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef their_filled,
                             peer_view(filled, DeviceId(right)));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef their_drained,
                             peer_view(drained, DeviceId(left)));
    for (int k = 0; k < kRounds; ++k) {
      if (k > 0) MESHDMA_RETURN_IF_ERROR(counter_wait(drained, k));
      for (int64_t i = 0; i < kCount; ++i) {
        their_inbox.data_as<int64_t>()[i] = Expected(me, i) + k;
      }
      __atomic_store_n(their_filled.data_as<uint64_t>(), uint64_t(k + 1),
                       __ATOMIC_RELEASE);
      MESHDMA_RETURN_IF_ERROR(counter_wait(filled, k + 1));
      for (int64_t i = 0; i < kCount; ++i) {
        if (inbox.data_as<int64_t>()[i] != Expected(left, i) + k) {
          return absl::InternalError(
              absl::StrCat("round ", k, " element ", i, " from device ", left));
        }
      }
      __atomic_store_n(their_drained.data_as<uint64_t>(), uint64_t(k + 1),
                       __ATOMIC_RELEASE);
    }
    // The right neighbour has read the last round before this Run ends.
    return counter_wait(drained, kRounds);
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST_F(PeerViewTest, CounterWaitRejectsOtherViews) {
  absl::Status s = rt_->Run(*mesh_, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef words,
                             AllocateSymmetric(DType::kI64, {4}));
    std::vector<int64_t> host(1);
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef ordinary,
                             ArrayRef::FromPointer(host.data(), DType::kI64,
                                                   std::vector<int64_t>{1}));
    MESHDMA_ASSIGN_OR_RETURN(
        ArrayRef as_u8,
        ArrayRef::Symmetric(words.data() + 4, words.heap_offset() + 4,
                            DType::kU8, std::vector<int64_t>{8}));
    const std::pair<ArrayRef, const char*> bad[] = {
        {words, "not one 8-byte-aligned word"},     // 4 words
        {ordinary, "not one 8-byte-aligned word"},  // not symmetric
        {as_u8, "not one 8-byte-aligned word"},     // misaligned
    };
    for (const auto& [view, want] : bad) {
      absl::Status st = counter_wait(view, 1);
      if (!absl::IsInvalidArgument(st) ||
          !absl::StrContains(st.message(), want) ||
          !absl::StrContains(st.message(), "counter_wait on device")) {
        return absl::InternalError(
            absl::StrCat(view.ToString(), ": ", st.ToString()));
      }
    }
    MESHDMA_ASSIGN_OR_RETURN(
        ArrayRef forged,
        ArrayRef::Symmetric(words.data(), words.heap_offset() + 64, DType::kI64,
                            std::vector<int64_t>{1}));
    absl::Status st = counter_wait(forged, 1);
    if (!absl::IsInvalidArgument(st) ||
        !absl::StrContains(st.message(), "claims heap offset")) {
      return absl::InternalError(absl::StrCat("forged: ", st.ToString()));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST(PeerViewTimeoutTest, ACounterThatNeverGrowsTimesOut) {
  RuntimeOptions o = testing::TierOptions(DmaMode::kAsync);
  o.wait_timeout = absl::Milliseconds(300);
  auto rt = Runtime::Create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  auto mesh = (*rt)->MakeMesh1D("x");
  ASSERT_TRUE(mesh.ok());
  absl::Status s = (*rt)->Run(*mesh, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(
        ArrayRef word, AllocateSymmetric(DType::kI64, std::vector<int64_t>{1}));
    return counter_wait(word, 3);
  });
  // The device that times out first fails with DeadlineExceeded; under
  // mpirun the other rank may hear of it before its own wait expires, and is
  // then aborted with that device's timeout as the reason.
  ASSERT_TRUE(absl::IsDeadlineExceeded(s) || absl::IsAborted(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "counter_wait on device")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "timed out after 300ms")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "holds 0, expected >= 3")) << s;
}

TEST(PeerViewCheckedTest, CheckedModeRefusesPeerViews) {
  testing::RunCheckedOnRing([](int peer) -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(bool reaches, peer_view_reaches(DeviceId(peer)));
    if (reaches) return absl::InternalError("reachable in checked mode");
    MESHDMA_ASSIGN_OR_RETURN(bool shares,
                             peer_shares_address_space(DeviceId(peer)));
    if (shares) return absl::InternalError("shared memory in checked mode");
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef buf, AllocateSymmetric(DType::kF32, {8}));
    absl::Status st = peer_view(buf, DeviceId(peer)).status();
    if (!absl::IsFailedPrecondition(st)) {
      return absl::InternalError(absl::StrCat("checked: ", st.ToString()));
    }
    return absl::OkStatus();
  });
}

}  // namespace
}  // namespace meshdma
