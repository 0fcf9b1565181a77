// docs/semantics.md §7: in the asynchronous mode `start()` returns before the
// bytes move, so compute placed between `start()` and `wait()` overlaps the
// copy: the pair takes about max(compute, copy), not their sum. In the eager
// mode the copy happens inside `start()`.
#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"
#include "tests/dma/runtime_test_util.h"

namespace meshdma {
namespace {

constexpr int64_t kFloats = 32 << 20;  // 128 MiB: well past the L3.

// Work that stays in cache and does not touch memory bandwidth.
double Compute(int64_t iters) {
  double x = 0.5;
  for (int64_t i = 0; i < iters; ++i)
    x = x * 0.9999999 + std::sqrt(x + i * 1e-12);
  return x;
}

struct Timings {
  double copy_s, compute_s, both_s, start_s;
};

absl::StatusOr<Timings> Measure(int64_t iters, ArrayRef src, ArrayRef dst,
                                Semaphore sem) {
  Timings t{};
  auto copy = make_async_copy(src, dst, sem);
  absl::Time t0 = absl::Now();
  MESHDMA_RETURN_IF_ERROR(copy.start());
  MESHDMA_RETURN_IF_ERROR(copy.wait());
  t.copy_s = absl::ToDoubleSeconds(absl::Now() - t0);
  t0 = absl::Now();
  volatile double sink = Compute(iters);
  t.compute_s = absl::ToDoubleSeconds(absl::Now() - t0);
  t0 = absl::Now();
  MESHDMA_RETURN_IF_ERROR(copy.start());
  t.start_s = absl::ToDoubleSeconds(absl::Now() - t0);
  sink = Compute(iters);
  MESHDMA_RETURN_IF_ERROR(copy.wait());
  t.both_s = absl::ToDoubleSeconds(absl::Now() - t0);
  (void)sink;
  const float* d = dst.data_as<float>();
  for (int64_t i = 0; i < kFloats; i += 4099) {
    if (d[i] != static_cast<float>(i % 1000)) {
      return absl::InternalError("copied data is wrong");
    }
  }
  return t;
}

absl::StatusOr<std::vector<Timings>> RunOnDeviceZero(DmaMode mode) {
  RuntimeOptions o = testing::TierOptions(mode);
  o.heap_bytes = 2 * kFloats * 4 + (16 << 20);
  o.copy_threads = 1;
  MESHDMA_ASSIGN_OR_RETURN(auto rt, Runtime::Create(o));
  MESHDMA_ASSIGN_OR_RETURN(auto mesh, Mesh::Create({{"x", 1}}, {0}));
  std::vector<Timings> out;
  MESHDMA_RETURN_IF_ERROR(rt->Run(mesh, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(auto src, AllocateSymmetric<float>({kFloats}));
    MESHDMA_ASSIGN_OR_RETURN(auto dst, AllocateSymmetric<float>({kFloats}));
    MESHDMA_ASSIGN_OR_RETURN(auto sem, AllocateSemaphore(SemaphoreType::kDma));
    for (int64_t i = 0; i < kFloats; ++i) src.data_as<float>()[i] = i % 1000;
    // Calibrate the compute loop to take about as long as the copy (after a
    // first pass that faults the destination's pages in).
    MESHDMA_RETURN_IF_ERROR(Measure(1 << 16, src, dst, sem).status());
    MESHDMA_ASSIGN_OR_RETURN(Timings cal, Measure(1 << 20, src, dst, sem));
    const int64_t iters =
        static_cast<int64_t>((1 << 20) * cal.copy_s / cal.compute_s);
    for (int attempt = 0; attempt < 5; ++attempt) {
      MESHDMA_ASSIGN_OR_RETURN(Timings t, Measure(iters, src, dst, sem));
      out.push_back(t);
    }
    return absl::OkStatus();
  }));
  return out;
}

// Overlap needs a second free core for the copy worker. True when two
// threads computing at once take about as long as one alone.
bool SecondCoreIsFree() {
  auto time_it = [](int threads) {
    const absl::Time t0 = absl::Now();
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i) {
      pool.emplace_back([] {
        volatile double sink = Compute(1 << 22);
        (void)sink;
      });
    }
    for (auto& t : pool) t.join();
    return absl::ToDoubleSeconds(absl::Now() - t0);
  };
  double best_one = 1e9, best_two = 1e9;
  for (int i = 0; i < 3; ++i) {
    best_one = std::min(best_one, time_it(1));
    best_two = std::min(best_two, time_it(2));
  }
  std::printf("one thread %.1f ms, two threads %.1f ms\n", best_one * 1e3,
              best_two * 1e3);
  return best_two < 1.3 * best_one;
}

TEST(OverlapTest, AsyncCopyOverlapsCompute) {
  if (std::thread::hardware_concurrency() < 2 || !SecondCoreIsFree()) {
    GTEST_SKIP() << "no second free core on this machine now: overlap cannot "
                    "be measured";
  }
  auto timings = RunOnDeviceZero(DmaMode::kAsync);
  ASSERT_TRUE(timings.ok()) << timings.status();
  if (timings->empty()) GTEST_SKIP() << "device 0 lives in another process";
  // The best of five attempts (the machine is shared): overlapped time close
  // to max(copy, compute) and clearly below their sum.
  double best = 1e9, best_start = 1e9;
  for (const Timings& t : *timings) {
    const double ratio = t.both_s / (t.copy_s + t.compute_s);
    std::printf(
        "async: copy %.1f ms, compute %.1f ms, start() %.3f ms, both %.1f ms "
        "(%.2f of the sum)\n",
        t.copy_s * 1e3, t.compute_s * 1e3, t.start_s * 1e3, t.both_s * 1e3,
        ratio);
    best = std::min(best, ratio);
    best_start = std::min(best_start, t.start_s / t.copy_s);
  }
  EXPECT_LT(best, 0.8)
      << "compute between start() and wait() did not overlap the copy";
  EXPECT_LT(best_start, 0.25) << "start() must return before the copy is done";
}

TEST(OverlapTest, EagerCopyHappensInsideStart) {
  auto timings = RunOnDeviceZero(DmaMode::kEager);
  ASSERT_TRUE(timings.ok()) << timings.status();
  if (timings->empty()) GTEST_SKIP() << "device 0 lives in another process";
  // The best of five attempts (the machine is shared): start() holds the
  // whole copy, so it takes about as long as the copy alone.
  double best = 0;
  for (const Timings& t : *timings) {
    std::printf("eager: copy %.1f ms, start() %.1f ms, both %.1f ms\n",
                t.copy_s * 1e3, t.start_s * 1e3, t.both_s * 1e3);
    best = std::max(best, t.start_s / t.copy_s);
  }
  EXPECT_GT(best, 0.5) << "in eager mode start() must perform the copy";
}

}  // namespace
}  // namespace meshdma
