// Thousands of random DMAs and signals among all devices, every byte checked:
// nothing lost, duplicated or misplaced, on whatever transport the launch
// uses. The schedule is drawn from a seed every device shares, so each
// receiver knows what to expect without extra messages.
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"
#include "tests/dma/runtime_test_util.h"

namespace meshdma {
namespace {

constexpr int kFanout = 2;  // DMAs per device per round.

struct Send {
  int target;
  int64_t bytes;
  int64_t inc;  // Signal added to the target's REGULAR semaphore.
};

uint8_t Pattern(int round, int sender, int k, int64_t i) {
  return static_cast<uint8_t>(
      (round * 131 + sender * 31 + k * 17 + i * 7 + (i >> 8)) & 0xff);
}

class StressTest : public ::testing::TestWithParam<DmaMode> {
 protected:
  // Rounds of kFanout DMAs of 1 to `max_bytes` bytes, each followed by a
  // signal, from every device to random targets (itself included); every
  // byte and every signal checked. `dmas_per_launch` sets the rounds.
  void RandomDmasAndSignals(int64_t max_bytes, int dmas_per_launch,
                            int min_rounds);
};

void StressTest::RandomDmasAndSignals(int64_t max_bytes, int dmas_per_launch,
                                      int min_rounds) {
  RuntimeOptions o = testing::TierOptions(GetParam());
  o.copy_chunk_bytes = 4096;  // Many chunks per DMA: workers and helpers mix.
  auto rt = Runtime::Create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  const int n = (*rt)->num_devices();
  auto mesh = (*rt)->MakeMesh1D("x");
  const int rounds = std::max(min_rounds, dmas_per_launch / (n * kFanout));
  std::atomic<int64_t> wrong{0}, dmas{0};
  absl::Status s = (*rt)->Run(*mesh, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    MESHDMA_ASSIGN_OR_RETURN(auto src,
                             AllocateSymmetric<uint8_t>({kFanout, max_bytes}));
    // Slot (sender, k) of my inbox receives sender's k-th DMA to me.
    MESHDMA_ASSIGN_OR_RETURN(
        auto inbox, AllocateSymmetric<uint8_t>({n, kFanout, max_bytes}));
    return RunKernel({.name = "stress"}, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(auto send_sem,
                               AllocateSemaphore(SemaphoreType::kDma, "send"));
      MESHDMA_ASSIGN_OR_RETURN(auto recv_sem,
                               AllocateSemaphore(SemaphoreType::kDma, "recv"));
      MESHDMA_ASSIGN_OR_RETURN(
          auto signals, AllocateSemaphore(SemaphoreType::kRegular, "signals"));
      std::mt19937_64 rng(12345);
      std::vector<std::vector<Send>> plan(n, std::vector<Send>(kFanout));
      for (int round = 0; round < rounds; ++round) {
        for (auto& sends : plan) {
          for (Send& x : sends) {
            x.target = static_cast<int>(rng() % n);
            x.bytes = 1 + static_cast<int64_t>(rng() % max_bytes);
            x.inc = 1 + static_cast<int64_t>(rng() % 5);
          }
        }
        // 1. Push my DMAs and signals.
        int64_t sent = 0;
        for (int k = 0; k < kFanout; ++k) {
          const Send& x = plan[me][k];
          uint8_t* p = src.data_as<uint8_t>() + k * max_bytes;
          for (int64_t i = 0; i < x.bytes; ++i) p[i] = Pattern(round, me, k, i);
          MESHDMA_ASSIGN_OR_RETURN(auto s_row, src.At(k));
          MESHDMA_ASSIGN_OR_RETURN(auto s_part, s_row.Slice(0, 0, x.bytes));
          MESHDMA_ASSIGN_OR_RETURN(auto slot, inbox.At(me));
          MESHDMA_ASSIGN_OR_RETURN(auto d_row, slot.At(k));
          MESHDMA_ASSIGN_OR_RETURN(auto d_part, d_row.Slice(0, 0, x.bytes));
          MESHDMA_RETURN_IF_ERROR(make_async_remote_copy(s_part, d_part,
                                                         send_sem, recv_sem,
                                                         x.target)
                                      .start());
          MESHDMA_RETURN_IF_ERROR(semaphore_signal(signals, x.inc, x.target));
          sent += x.bytes;
        }
        // 2. Wait for everything addressed to me: bytes and signal counts
        // accumulate across senders, so one wait each covers them all.
        int64_t expect_bytes = 0, expect_signals = 0;
        for (int sender = 0; sender < n; ++sender) {
          for (const Send& x : plan[sender]) {
            if (x.target == me) {
              expect_bytes += x.bytes;
              expect_signals += x.inc;
            }
          }
        }
        MESHDMA_ASSIGN_OR_RETURN(auto whole_src,
                                 src.Reshape({kFanout * max_bytes}));
        MESHDMA_ASSIGN_OR_RETURN(auto sent_view, whole_src.Slice(0, 0, sent));
        MESHDMA_RETURN_IF_ERROR(
            make_async_remote_copy(sent_view, sent_view, send_sem, recv_sem, me)
                .wait_send());
        if (expect_bytes > 0) {
          MESHDMA_ASSIGN_OR_RETURN(auto whole_inbox,
                                   inbox.Reshape({n * kFanout * max_bytes}));
          MESHDMA_ASSIGN_OR_RETURN(auto got,
                                   whole_inbox.Slice(0, 0, expect_bytes));
          MESHDMA_RETURN_IF_ERROR(
              make_async_remote_copy(got, got, send_sem, recv_sem, me)
                  .wait_recv());
        }
        if (expect_signals > 0)
          MESHDMA_RETURN_IF_ERROR(semaphore_wait(signals, expect_signals));
        // 3. Check every byte that arrived.
        for (int sender = 0; sender < n; ++sender) {
          for (int k = 0; k < kFanout; ++k) {
            const Send& x = plan[sender][k];
            if (x.target != me) continue;
            const uint8_t* p =
                inbox.data_as<uint8_t>() + (sender * kFanout + k) * max_bytes;
            for (int64_t i = 0; i < x.bytes; ++i) {
              if (p[i] != Pattern(round, sender, k, i)) ++wrong;
            }
            ++dmas;
          }
        }
        // 4. Nobody overwrites an inbox before its owner has checked it.
        MESHDMA_RETURN_IF_ERROR(device_barrier());
      }
      return absl::OkStatus();
    });
  });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(wrong.load(), 0);
  const auto local = testing::LocalDevices(**rt);
  EXPECT_GT(dmas.load(), 0);
  if (local.size() == static_cast<size_t>(n)) {
    EXPECT_EQ(dmas.load(), int64_t{rounds} * n * kFanout);
  }
}

TEST_P(StressTest, RandomDmasAndSignalsArriveExactly) {
  // Above async_min: both copy paths.
  RandomDmasAndSignals(96 << 10, 2400, 50);
}

// DMAs up to 2 MiB: between hosts over TCP the socket takes a long one in
// parts, written as the devices poll, and the signals and DMAs behind it
// must queue behind it.
TEST_P(StressTest, RandomLongDmasAndSignalsArriveExactly) {
  RandomDmasAndSignals(2 << 20, 120, 12);
}

INSTANTIATE_TEST_SUITE_P(Modes, StressTest,
                         ::testing::Values(DmaMode::kAsync, DmaMode::kEager),
                         [](const auto& info) {
                           return testing::ModeName(info.param);
                         });

}  // namespace
}  // namespace meshdma
