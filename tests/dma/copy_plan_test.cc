// CopyPlan against a naive element-by-element strided copy, over random
// shapes, strides and chunkings.
#include "meshdma/dma/internal/copy_plan.h"

#include <random>

#include "gtest/gtest.h"

namespace meshdma::dma_internal {
namespace {

TEST(CopyPlanTest, MatchesNaiveStridedCopy) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const int rank = 1 + rng() % 4;
    std::vector<int64_t> shape(rank), src_strides(rank), dst_strides(rank);
    // Random padding per dimension makes views strided; some are dense.
    int64_t s_stride = 1, d_stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      shape[d] = 1 + rng() % 7;
      src_strides[d] = s_stride;
      dst_strides[d] = d_stride;
      s_stride *= shape[d] + (rng() % 3 == 0 ? rng() % 3 : 0);
      d_stride *= shape[d] + (rng() % 3 == 0 ? rng() % 3 : 0);
    }
    std::vector<int32_t> src(s_stride * 2), dst(d_stride * 2, -1),
        want(d_stride * 2, -1);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<int32_t>(i);
    auto s = ArrayRef::FromPointer(src.data(), DType::kI32, shape, src_strides);
    auto d = ArrayRef::FromPointer(dst.data(), DType::kI32, shape, dst_strides);
    ASSERT_TRUE(s.ok() && d.ok());
    // Naive reference.
    std::vector<int64_t> idx(rank, 0);
    int64_t total = 1;
    for (int64_t x : shape) total *= x;
    for (int64_t e = 0; e < total; ++e) {
      int64_t rem = e, so = 0, dof = 0;
      for (int k = rank - 1; k >= 0; --k) {
        const int64_t i = rem % shape[k];
        rem /= shape[k];
        so += i * src_strides[k];
        dof += i * dst_strides[k];
      }
      want[dof] = src[so];
    }
    CopyPlan plan(ViewLayout::Of(*s), ViewLayout::Of(*d), 4);
    const int64_t chunks = 1 + rng() % 5;
    for (int64_t c = 0; c < chunks; ++c) {
      plan.CopyChunk(reinterpret_cast<const std::byte*>(src.data()),
                     reinterpret_cast<std::byte*>(dst.data()), c, chunks);
    }
    ASSERT_EQ(dst, want) << "trial " << trial;
    EXPECT_EQ(plan.total_bytes(), total * 4);
  }
}

TEST(CopyPlanTest, LongRunSplitsIntoAlignedChunks) {
  std::vector<uint8_t> src(1 << 20), dst(1 << 20);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 13);
  auto s = ArrayRef::FromPointer(src.data(), DType::kU8,
                                 std::vector<int64_t>{1 << 20});
  CopyPlan plan(ViewLayout::Of(*s), ViewLayout::Of(*s), 1);
  EXPECT_EQ(plan.NumChunks(1 << 16), 16);
  for (int c = 15; c >= 0; --c) {
    plan.CopyChunk(reinterpret_cast<const std::byte*>(src.data()),
                   reinterpret_cast<std::byte*>(dst.data()), c, 16);
  }
  EXPECT_EQ(src, dst);
}

}  // namespace
}  // namespace meshdma::dma_internal
