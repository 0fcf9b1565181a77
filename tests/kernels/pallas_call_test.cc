// pallas_call, refs, blocks and pipelining: grid iteration, program_id,
// copy counts (a block is fetched only when its index changes), ragged edges,
// scratch and semaphores, vmap, emit_pipeline, and every bad-input error.
#include "meshdma/kernels/pallas_call.h"

#include <atomic>
#include <numeric>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/kernels/block.h"
#include "meshdma/kernels/pipeline.h"
#include "meshdma/kernels/vmap.h"
#include "tests/kernels/kernel_test_util.h"

namespace meshdma {
namespace {

using ::meshdma::testing::RandomVector;
using ::meshdma::testing::RunOnDevices;
using ::meshdma::testing::View;
using ::testing::AllOf;
using ::testing::HasSubstr;
using G = std::span<const int64_t>;

TEST(BlockTest, ElementwiseBroadcastReduce) {
  Block<float> a = Block<float>::Iota({2, 3}, 1);  // [[0,1,2],[0,1,2]]
  Block<float> b = Block<float>::Iota({2, 1}, 0);  // [[0],[1]]
  Block<float> c = a + b * 10.0f;
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c(1, 2), 12.0f);
  EXPECT_EQ(c.Sum(1)(1, 0), 33.0f);
  EXPECT_EQ(c.Max(0)(0, 2), 12.0f);
  EXPECT_EQ(c.Sum(1).dim(1), 1);
  Block<float> bad = a + Block<float>({3, 2});
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("[2,3]"));
  Block<float> d = Dot(a, a.Transpose());  // [2,3]x[3,2]
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d(0, 0), 5.0f);
  Block<float> dt = Dot(a, a, /*transpose_b=*/true);
  EXPECT_EQ(dt(1, 1), 5.0f);
  Block<int32_t> m = Block<int32_t>::Iota({4}, 0);
  Block<float> w =
      Where(m, Block<float>::Full({4}, 1.0f), Block<float>::Full({4}, -1.0f));
  EXPECT_EQ(w[0], -1.0f);
  EXPECT_EQ(w[3], 1.0f);
}

TEST(RefTest, SliceAtMaskedLoadStore) {
  std::vector<float> v(12);
  std::iota(v.begin(), v.end(), 0.0f);
  auto r = *Ref<float>::Of(View(v, {3, 4}));
  EXPECT_EQ(r(2, 1), 9.0f);
  auto row = *r.at(1);
  EXPECT_EQ(row(3), 7.0f);
  auto cols = *r.Slice(1, 1, 2);
  EXPECT_EQ(cols(2, 1), 10.0f);
  EXPECT_FALSE(r.Slice(1, 3, 2).ok());
  const int64_t valid[] = {2, 3};
  Block<float> b = r.LoadMasked(valid, -1.0f);
  EXPECT_EQ(b(1, 2), 6.0f);
  EXPECT_EQ(b(1, 3), -1.0f);
  EXPECT_EQ(b(2, 0), -1.0f);
  ASSERT_TRUE(cols.Store(Block<float>::Full({3, 2}, 5.0f)).ok());
  EXPECT_EQ(v[1], 5.0f);
  EXPECT_EQ(v[3], 3.0f);
  EXPECT_FALSE(cols.Store(Block<float>::Full({2, 2}, 5.0f)).ok());
  EXPECT_FALSE(Ref<int32_t>::Of(View(v, {12})).ok());
}

// The add kernel of the quickstart, no grid: whole arrays in VMEM.
TEST(PallasCallTest, NoGridWholeArray) {
  ASSERT_TRUE(RunOnDevices([]() -> absl::Status {
                auto x = RandomVector(100, 1), y = RandomVector(100, 2);
                std::vector<float> o(100);
                const ArrayRef ins[] = {View(x, {100}), View(y, {100})};
                const ArrayRef outs[] = {View(o, {100})};
                PallasCallParams p;
                p.name = "add";
                p.out_shape = {{DType::kF32, {100}}};
                MESHDMA_RETURN_IF_ERROR(pallas_call(
                    p,
                    [](const KernelArgs& a) -> absl::Status {
                      EXPECT_EQ(program_id(0), -1);
                      MESHDMA_ASSIGN_OR_RETURN(auto xr, a.in<float>(0));
                      MESHDMA_ASSIGN_OR_RETURN(auto yr, a.in<float>(1));
                      MESHDMA_ASSIGN_OR_RETURN(auto orf, a.out<float>(0));
                      return orf.Store(xr.Load() + yr.Load());
                    },
                    ins, outs));
                for (int i = 0; i < 100; ++i) EXPECT_EQ(o[i], x[i] + y[i]);
                return absl::OkStatus();
              }).ok());
}

// A 3-D grid visits points row-major; inputs are copied only when their
// block index changes; outputs are written once per block.
TEST(PallasCallTest, GridOrderAndCopyCounts) {
  ASSERT_TRUE(
      RunOnDevices([]() -> absl::Status {
        // x: [4*8, 16] blocks [8, 16] indexed by grid axis 0 only.
        std::vector<float> x = RandomVector(32 * 16, 3);
        std::vector<float> o(32 * 16, 0.0f);
        std::vector<int64_t> visits;
        PallasCallParams p;
        p.name = "order";
        p.grid = {4, 3, 2};
        p.in_specs = {{{8, 16}, [](G g) {
                         return std::vector<int64_t>{g[0], 0};
                       }}};
        p.out_specs = {{{8, 16}, [](G g) {
                          return std::vector<int64_t>{g[0], 0};
                        }}};
        PipelineStats stats;
        p.stats = &stats;
        const ArrayRef ins[] = {View(x, {32, 16})};
        const ArrayRef outs[] = {View(o, {32, 16})};
        MESHDMA_RETURN_IF_ERROR(pallas_call(
            p,
            [&](const KernelArgs& a) -> absl::Status {
              visits.push_back(program_id(0) * 100 + program_id(1) * 10 +
                               program_id(2));
              EXPECT_EQ(num_programs(1), 3);
              MESHDMA_ASSIGN_OR_RETURN(auto xr, a.in<float>(0));
              MESHDMA_ASSIGN_OR_RETURN(auto orf, a.out<float>(0));
              // Accumulate into the resident output block: 6 visits per block.
              if (program_id(1) == 0 && program_id(2) == 0) {
                MESHDMA_RETURN_IF_ERROR(orf.Store(Block<float>({8, 16})));
              }
              return orf.Store(orf.Load() + xr.Load());
            },
            ins, outs));
        EXPECT_EQ(visits.size(), 24u);
        EXPECT_EQ(visits[1], 1);
        EXPECT_EQ(visits[2], 10);
        EXPECT_EQ(visits[23], 321);
        EXPECT_EQ(stats.input_copies[0], 4);
        EXPECT_EQ(stats.output_copies[0], 4);
        EXPECT_EQ(stats.grid_steps, 24);
        for (size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(o[i], 6 * x[i]);
        return absl::OkStatus();
      }).ok());
}

// `in_place`: blocks laid out as asked reach the body where they lie in
// the array (no copy). kContiguous stages a ragged edge block (it reads as
// zero past the edge) and strided blocks; kStridedRows hands every block
// over with its strides, a ragged one as its valid part.
TEST(PallasCallTest, ReadInPlaceBlocks) {
  ASSERT_TRUE(
      RunOnDevices([]() -> absl::Status {
        // x [10, 4] in row blocks of 4: blocks 0 and 1 whole, block 2 ragged
        // (2 valid rows). y and z [4, 10] in column blocks of 4: strided.
        std::vector<float> x = RandomVector(40, 5), y = RandomVector(40, 6),
                           z = RandomVector(40, 7);
        std::vector<float> o(3 * 4 * 4);
        PallasCallParams p;
        p.name = "in_place";
        p.grid = {3};
        auto row_block = [](G g) { return std::vector<int64_t>{g[0], 0}; };
        auto col_block = [](G g) { return std::vector<int64_t>{0, g[0]}; };
        p.in_specs = {
            {{4, 4}, row_block}, {{4, 4}, col_block}, {{4, 4}, col_block}};
        p.in_specs[0].in_place = InPlace::kContiguous;
        p.in_specs[1].in_place = InPlace::kStridedRows;
        p.in_specs[2].in_place = InPlace::kContiguous;
        p.out_specs = {{{kSqueezed, 4, 4}, [](G g) {
                          return std::vector<int64_t>{g[0], 0, 0};
                        }}};
        PipelineStats stats;
        p.stats = &stats;
        const ArrayRef ins[] = {View(x, {10, 4}), View(y, {4, 10}),
                                View(z, {4, 10})};
        const ArrayRef outs[] = {View(o, {3, 4, 4})};
        std::vector<const float*> seen_x, seen_y;
        std::vector<int64_t> y_row_strides, y_cols;
        MESHDMA_RETURN_IF_ERROR(pallas_call(
            p,
            [&](const KernelArgs& a) -> absl::Status {
              seen_x.push_back(a.input(0).data_as<float>());
              seen_y.push_back(a.input(1).data_as<float>());
              y_row_strides.push_back(a.input(1).strides()[0]);
              y_cols.push_back(a.input(1).dim(1));
              EXPECT_EQ(a.in_valid(1, 1), a.input(1).dim(1));
              MESHDMA_ASSIGN_OR_RETURN(auto xr, a.in<float>(0));
              MESHDMA_ASSIGN_OR_RETURN(auto yr, a.in<float>(1));
              MESHDMA_ASSIGN_OR_RETURN(auto zr, a.in<float>(2));
              float* out = a.output(0).data_as<float>();
              for (int64_t r = 0; r < 4; ++r) {
                for (int64_t c = 0; c < 4; ++c) {
                  const float yv = c < yr.dim(1) ? yr(r, c) : 0.0f;
                  out[r * 4 + c] = xr(r, c) + yv + zr(r, c);
                }
              }
              return absl::OkStatus();
            },
            ins, outs));
        // Whole blocks are the arrays' own elements; the ragged ones copies.
        EXPECT_EQ(seen_x[0], x.data());
        EXPECT_EQ(seen_x[1], x.data() + 16);
        EXPECT_NE(seen_x[2], x.data() + 32);
        // Every y block is y's own, the ragged one 2 columns wide.
        EXPECT_EQ(seen_y[1], y.data() + 4);
        EXPECT_EQ(seen_y[2], y.data() + 8);
        EXPECT_THAT(y_row_strides, ::testing::ElementsAre(10, 10, 10));
        EXPECT_THAT(y_cols, ::testing::ElementsAre(4, 4, 2));
        EXPECT_EQ(stats.input_in_place[0], 2);
        EXPECT_EQ(stats.input_copies[0], 1);
        EXPECT_EQ(stats.input_in_place[1], 3);
        EXPECT_EQ(stats.input_copies[1], 0);
        EXPECT_EQ(stats.input_in_place[2], 0);
        EXPECT_EQ(stats.input_copies[2], 3);
        for (int b = 0; b < 3; ++b) {
          for (int r = 0; r < 4; ++r) {
            for (int c = 0; c < 4; ++c) {
              const int xr = b * 4 + r, yc = b * 4 + c;
              const float xv = xr < 10 ? x[xr * 4 + c] : 0.0f;
              const float yv = yc < 10 ? y[r * 10 + yc] : 0.0f;
              const float zv = yc < 10 ? z[r * 10 + yc] : 0.0f;
              EXPECT_EQ(o[(b * 4 + r) * 4 + c], (xv + yv) + zv) << b << r << c;
            }
          }
        }
        return absl::OkStatus();
      }).ok());
}

// `in_place` on outputs: the body writes blocks laid out as asked where
// they lie in the array (no write-back), and an output block stays the same
// memory while the grid sweeps it (here: written at j == 0, added to at
// j == 1). kContiguous stages a ragged edge block and writes back its valid
// part; kStridedRows hands every block over with its strides, a ragged one
// as its valid part.
TEST(PallasCallTest, WriteInPlaceBlocks) {
  ASSERT_TRUE(
      RunOnDevices([]() -> absl::Status {
        // x [10, 4] in row blocks of 4 (block 2 ragged: 2 valid rows), read
        // staged. rows [10, 4] in row blocks, cols [4, 10] in column blocks.
        std::vector<float> x = RandomVector(40, 8);
        std::vector<float> rows(40, -1.0f), cols(40, -1.0f);
        PallasCallParams p;
        p.name = "write_in_place";
        p.grid = {3, 2};
        auto row_block = [](G g) { return std::vector<int64_t>{g[0], 0}; };
        auto col_block = [](G g) { return std::vector<int64_t>{0, g[0]}; };
        p.in_specs = {{{4, 4}, row_block}};
        p.out_specs = {{{4, 4}, row_block}, {{4, 4}, col_block}};
        p.out_specs[0].in_place = InPlace::kContiguous;
        p.out_specs[1].in_place = InPlace::kStridedRows;
        PipelineStats stats;
        p.stats = &stats;
        const ArrayRef ins[] = {View(x, {10, 4})};
        const ArrayRef outs[] = {View(rows, {10, 4}), View(cols, {4, 10})};
        std::vector<const float*> seen_rows, seen_cols;
        std::vector<int64_t> col_strides, col_widths;
        MESHDMA_RETURN_IF_ERROR(pallas_call(
            p,
            [&](const KernelArgs& a) -> absl::Status {
              MESHDMA_ASSIGN_OR_RETURN(auto xr, a.in<float>(0));
              MESHDMA_ASSIGN_OR_RETURN(auto rr, a.out<float>(0));
              MESHDMA_ASSIGN_OR_RETURN(auto cr, a.out<float>(1));
              const bool first = program_id(1) == 0;
              if (first) {
                seen_rows.push_back(rr.data());
                seen_cols.push_back(cr.data());
                col_strides.push_back(cr.strides()[0]);
                col_widths.push_back(cr.dim(1));
                EXPECT_EQ(a.out_valid(1, 1), cr.dim(1));
              }
              // rows = 3x (x, then + 2x); cols(r, c) = x(r, c) + 10 (then
              // + 100) over the valid part.
              for (int64_t r = 0; r < 4; ++r) {
                for (int64_t c = 0; c < 4; ++c) {
                  rr(r, c) = first ? xr(r, c) : rr(r, c) + 2 * xr(r, c);
                }
                for (int64_t c = 0; c < a.out_valid(1, 1); ++c) {
                  cr(r, c) = first ? xr(r, c) + 10 : cr(r, c) + 100;
                }
              }
              return absl::OkStatus();
            },
            ins, outs));
        // Whole row blocks are the array's own; the ragged one is staged.
        EXPECT_THAT(seen_rows,
                    ::testing::ElementsAre(rows.data(), rows.data() + 16,
                                           ::testing::_));
        EXPECT_NE(seen_rows[2], rows.data() + 32);
        EXPECT_THAT(seen_cols,
                    ::testing::ElementsAre(cols.data(), cols.data() + 4,
                                           cols.data() + 8));
        EXPECT_THAT(col_strides, ::testing::ElementsAre(10, 10, 10));
        EXPECT_THAT(col_widths, ::testing::ElementsAre(4, 4, 2));
        EXPECT_EQ(stats.output_in_place[0], 2);
        EXPECT_EQ(stats.output_copies[0], 1);
        EXPECT_EQ(stats.output_in_place[1], 3);
        EXPECT_EQ(stats.output_copies[1], 0);
        for (int r = 0; r < 10; ++r) {
          for (int c = 0; c < 4; ++c) {
            EXPECT_EQ(rows[r * 4 + c], 3 * x[r * 4 + c]) << r << c;
          }
        }
        for (int r = 0; r < 4; ++r) {
          for (int c = 0; c < 10; ++c) {
            // Column block b of cols read x's row block b (its padding rows
            // read as zero).
            const int xr = (c / 4) * 4 + r;
            const float xv = xr < 10 ? x[xr * 4 + c % 4] : 0.0f;
            EXPECT_EQ(cols[r * 10 + c], (xv + 10) + 100) << r << c;
          }
        }
        return absl::OkStatus();
      }).ok());
}

// Every block read in place: no staging buffer is allocated for the operand.
TEST(PallasCallTest, ReadInPlaceNeedsNoBuffer) {
  ASSERT_TRUE(RunOnDevices([]() -> absl::Status {
                std::vector<float> x = RandomVector(64, 7), o(64);
                auto run = [&](bool in_place) -> absl::StatusOr<int64_t> {
                  PallasCallParams p;
                  p.name = "in_place";
                  p.grid = {4};
                  auto by_i = [](G g) { return std::vector<int64_t>{g[0]}; };
                  p.in_specs = {{{16}, by_i}};
                  p.in_specs[0].in_place =
                      in_place ? InPlace::kContiguous : InPlace::kNever;
                  p.out_specs = {{{16}, by_i}};
                  PipelineStats stats;
                  p.stats = &stats;
                  const ArrayRef ins[] = {View(x, {64})};
                  const ArrayRef outs[] = {View(o, {64})};
                  MESHDMA_RETURN_IF_ERROR(pallas_call(
                      p,
                      [](const KernelArgs& a) -> absl::Status {
                        MESHDMA_ASSIGN_OR_RETURN(auto xr, a.in<float>(0));
                        MESHDMA_ASSIGN_OR_RETURN(auto orf, a.out<float>(0));
                        return orf.Store(xr.Load() * 2.0f);
                      },
                      ins, outs));
                  for (size_t i = 0; i < x.size(); ++i)
                    EXPECT_EQ(o[i], 2 * x[i]);
                  return stats.vmem_bytes;
                };
                MESHDMA_ASSIGN_OR_RETURN(const int64_t staged, run(false));
                MESHDMA_ASSIGN_OR_RETURN(const int64_t in_place, run(true));
                EXPECT_EQ(staged,
                          4 * 16 * 4);  // Two input and two output buffers.
                EXPECT_EQ(in_place, 2 * 16 * 4);  // The output's two alone.
                return absl::OkStatus();
              }).ok());
}

// An index map that returns to an earlier block re-fetches it (only when the
// index changes from the previous step).
TEST(PallasCallTest, RefetchOnlyWhenIndexChanges) {
  ASSERT_TRUE(
      RunOnDevices([]() -> absl::Status {
        std::vector<float> x = RandomVector(64, 4), o(8 * 6);
        // Block sequence 0,0,1,1,0,7 over 6 steps.
        const std::vector<int64_t> seq = {0, 0, 1, 1, 0, 7};
        PallasCallParams p;
        p.name = "refetch";
        p.grid = {6};
        p.in_specs = {
            {{8}, [&](G g) { return std::vector<int64_t>{seq[g[0]]}; }}};
        p.out_specs = {{{8}, [](G g) { return std::vector<int64_t>{g[0]}; }}};
        PipelineStats stats;
        p.stats = &stats;
        const ArrayRef ins[] = {View(x, {64})};
        const ArrayRef outs[] = {View(o, {48})};
        MESHDMA_RETURN_IF_ERROR(pallas_call(
            p,
            [](const KernelArgs& a) -> absl::Status {
              MESHDMA_ASSIGN_OR_RETURN(auto xr, a.in<float>(0));
              MESHDMA_ASSIGN_OR_RETURN(auto orf, a.out<float>(0));
              return orf.Store(xr.Load());
            },
            ins, outs));
        EXPECT_EQ(stats.input_copies[0], 4);
        EXPECT_EQ(stats.output_copies[0], 6);
        for (int s = 0; s < 6; ++s)
          for (int i = 0; i < 8; ++i)
            EXPECT_EQ(o[s * 8 + i], x[seq[s] * 8 + i]);
        return absl::OkStatus();
      }).ok());
}

// Ragged edges: 2-D blocks that divide neither dimension; inputs read zero
// padding, only the valid part is written back, valid extents are reported.
TEST(PallasCallTest, RaggedEdges) {
  ASSERT_TRUE(
      RunOnDevices([]() -> absl::Status {
        for (int64_t rows : {1, 7, 16, 23}) {
          for (int64_t cols : {5, 8, 13}) {
            std::vector<float> x = RandomVector(rows * cols, 5);
            std::vector<float> o(rows * cols + 1, 42.0f);  // +1: guard element.
            PallasCallParams p;
            p.name = "ragged";
            p.grid = {(rows + 7) / 8, (cols + 3) / 4};
            auto map = [](G g) { return std::vector<int64_t>{g[0], g[1]}; };
            p.in_specs = {{{8, 4}, map}};
            p.out_specs = {{{8, 4}, map}};
            const ArrayRef ins[] = {View(x, {rows, cols})};
            const ArrayRef outs[] = {*ArrayRef::FromPointer(
                o.data(), DType::kF32, std::vector<int64_t>{rows, cols})};
            MESHDMA_RETURN_IF_ERROR(pallas_call(
                p,
                [&](const KernelArgs& a) -> absl::Status {
                  MESHDMA_ASSIGN_OR_RETURN(auto xr, a.in<float>(0));
                  MESHDMA_ASSIGN_OR_RETURN(auto orf, a.out<float>(0));
                  const int64_t vr = a.in_valid(0, 0), vc = a.in_valid(0, 1);
                  EXPECT_EQ(vr, std::min<int64_t>(8, rows - program_id(0) * 8));
                  EXPECT_EQ(vc, std::min<int64_t>(4, cols - program_id(1) * 4));
                  Block<float> b = xr.Load();
                  // The padding reads as zero.
                  for (int64_t i = 0; i < 8; ++i) {
                    for (int64_t j = 0; j < 4; ++j) {
                      if (i >= vr || j >= vc) {
                        EXPECT_EQ(b(i, j), 0.0f);
                      }
                    }
                  }
                  return orf.Store(b * 2.0f + 1.0f);
                },
                ins, outs));
            for (int64_t i = 0; i < rows * cols; ++i)
              EXPECT_FLOAT_EQ(o[i], 2 * x[i] + 1);
            EXPECT_EQ(o[rows * cols], 42.0f);
          }
        }
        return absl::OkStatus();
      }).ok());
}

// Scratch: a VMEM accumulator persists across grid points; REGULAR and DMA
// semaphores (single and arrays) are allocated and usable; an ANY operand
// is copied by the body itself.
TEST(PallasCallTest, ScratchSemaphoresAndAny) {
  ASSERT_TRUE(
      RunOnDevices([]() -> absl::Status {
        std::vector<float> x = RandomVector(4 * 16, 6), o(16), raw(16);
        PallasCallParams p;
        p.name = "scratch";
        p.grid = {4};
        p.in_specs = {{{1, 16},
                       [](G g) {
                         return std::vector<int64_t>{g[0], 0};
                       }},
                      AnySpec()};
        p.out_specs = {{{16}, {}}, AnySpec()};
        p.scratch_shapes = {VMEM({16}, DType::kF32),
                            SemaphoreShape(SemaphoreType::kRegular),
                            SemaphoreShape(SemaphoreType::kDma, 3)};
        const ArrayRef ins[] = {View(x, {4, 16}), View(x, {4, 16})};
        const ArrayRef outs[] = {View(o, {16}), View(raw, {16})};
        MESHDMA_RETURN_IF_ERROR(pallas_call(
            p,
            [](const KernelArgs& a) -> absl::Status {
              MESHDMA_ASSIGN_OR_RETURN(auto xr, a.in<float>(0));
              MESHDMA_ASSIGN_OR_RETURN(auto acc, a.scratch<float>(0));
              MESHDMA_ASSIGN_OR_RETURN(Semaphore sem, a.semaphore(1));
              MESHDMA_ASSIGN_OR_RETURN(SemaphoreArray dma, a.semaphores(2));
              EXPECT_EQ(a.input(1).rank(), 2);  // ANY: the whole array.
              MESHDMA_RETURN_IF_ERROR(semaphore_signal(sem, 2));
              MESHDMA_RETURN_IF_ERROR(semaphore_wait(sem, 2));
              MESHDMA_RETURN_IF_ERROR(
                  acc.Store(acc.Load() + xr.Load().Reshape({16})));
              if (program_id(0) == num_programs(0) - 1) {
                MESHDMA_ASSIGN_OR_RETURN(auto orf, a.out<float>(0));
                MESHDMA_RETURN_IF_ERROR(orf.Store(acc.Load()));
                // Row 3 of the ANY input straight into the ANY output.
                MESHDMA_ASSIGN_OR_RETURN(ArrayRef row, a.input(1).At(3));
                auto copy = make_async_copy(row, a.output(1), dma[2]);
                MESHDMA_RETURN_IF_ERROR(copy.start());
                MESHDMA_RETURN_IF_ERROR(copy.wait());
              }
              return absl::OkStatus();
            },
            ins, outs));
        for (int j = 0; j < 16; ++j) {
          EXPECT_NEAR(o[j], x[j] + x[16 + j] + x[32 + j] + x[48 + j], 1e-5);
          EXPECT_EQ(raw[j], x[48 + j]);
        }
        return absl::OkStatus();
      }).ok());
}

// vmap: a per-row kernel mapped over a leading batch axis, with one shared
// (unmapped) operand, and nested.
TEST(VmapTest, MappedAndSharedOperands) {
  ASSERT_TRUE(RunOnDevices([]() -> absl::Status {
                // Base kernel: out[n] = x[n] * w[n] + program_id(0), grid (2,)
                // blocks 4.
                Kernel base;
                base.params.name = "scale";
                base.params.grid = {2};
                auto m = [](G g) { return std::vector<int64_t>{g[0]}; };
                base.params.in_specs = {{{4}, m}, {{4}, m}};
                base.params.out_specs = {{{4}, m}};
                base.body = [](const KernelArgs& a) -> absl::Status {
                  MESHDMA_ASSIGN_OR_RETURN(auto x, a.in<float>(0));
                  MESHDMA_ASSIGN_OR_RETURN(auto w, a.in<float>(1));
                  MESHDMA_ASSIGN_OR_RETURN(auto o, a.out<float>(0));
                  EXPECT_EQ(num_programs(0), 2);
                  return o.Store(x.Load() * w.Load() +
                                 static_cast<float>(program_id(0)));
                };
                std::vector<float> x = RandomVector(3 * 5 * 8, 7),
                                   w = RandomVector(8, 8);
                std::vector<float> o(3 * 5 * 8);
                Kernel once = vmap(base, {0, std::nullopt});
                Kernel twice = vmap(once, {0, std::nullopt});
                const ArrayRef ins[] = {View(x, {3, 5, 8}), View(w, {8})};
                const ArrayRef outs[] = {View(o, {3, 5, 8})};
                MESHDMA_RETURN_IF_ERROR(twice(ins, outs));
                for (int b = 0; b < 15; ++b)
                  for (int n = 0; n < 8; ++n)
                    EXPECT_FLOAT_EQ(o[b * 8 + n],
                                    x[b * 8 + n] * w[n] + (n / 4));
                // Batch on another axis: x as [8, 15] columns mapped at axis 1.
                std::vector<float> xt(8 * 15), ot(15 * 8);
                for (int b = 0; b < 15; ++b)
                  for (int n = 0; n < 8; ++n) xt[n * 15 + b] = x[b * 8 + n];
                Kernel col = vmap(base, {1, std::nullopt}, {0});
                const ArrayRef ins2[] = {View(xt, {8, 15}), View(w, {8})};
                const ArrayRef outs2[] = {View(ot, {15, 8})};
                MESHDMA_RETURN_IF_ERROR(col(ins2, outs2));
                for (size_t i = 0; i < o.size(); ++i)
                  EXPECT_FLOAT_EQ(ot[i], o[i]);
                // Batch sizes that disagree.
                std::vector<float> w2(4 * 8);
                Kernel both = vmap(base, {0, 0});
                const ArrayRef ins3[] = {View(x, {15, 8}), View(w2, {4, 8})};
                const ArrayRef outs3[] = {View(o, {15, 8})};
                absl::Status s = both(ins3, outs3);
                EXPECT_THAT(std::string(s.message()),
                            HasSubstr("vmap batch size 4 of input 1"));
                return absl::OkStatus();
              }).ok());
}

// emit_pipeline inside a kernel: a big ANY array summed in VMEM-sized blocks.
TEST(EmitPipelineTest, NestedPipelineOverAnyOperand) {
  ASSERT_TRUE(
      RunOnDevices([]() -> absl::Status {
        const int64_t rows = 37, cols = 64;
        std::vector<float> x = RandomVector(rows * cols, 9),
                           y = RandomVector(rows * cols, 10);
        std::vector<float> o(rows * cols);
        PallasCallParams p;
        p.name = "outer";
        p.grid = {2};  // The outer grid: runs the inner pipeline twice.
        p.in_specs = {AnySpec(), AnySpec()};
        p.out_specs = {AnySpec()};
        PipelineStats inner_stats;
        const ArrayRef ins[] = {View(x, {rows, cols}), View(y, {rows, cols})};
        const ArrayRef outs[] = {View(o, {rows, cols})};
        MESHDMA_RETURN_IF_ERROR(pallas_call(
            p,
            [&](const KernelArgs& a) -> absl::Status {
              const int64_t outer = program_id(0);
              EmitPipelineParams ep;
              ep.name = "inner_add";
              ep.grid = {(rows + 7) / 8};
              auto m = [](G g) { return std::vector<int64_t>{g[0], 0}; };
              ep.in_specs = {{{8, cols}, m}, {{8, cols}, m}};
              ep.out_specs = {{{8, cols}, m}};
              ep.stats = &inner_stats;
              const ArrayRef in2[] = {a.input(0), a.input(1)};
              const ArrayRef out2[] = {a.output(0)};
              MESHDMA_RETURN_IF_ERROR(emit_pipeline(
                  ep,
                  [&](const KernelArgs& b) -> absl::Status {
                    EXPECT_EQ(num_programs(0), 5);
                    MESHDMA_ASSIGN_OR_RETURN(auto xr, b.in<float>(0));
                    MESHDMA_ASSIGN_OR_RETURN(auto yr, b.in<float>(1));
                    MESHDMA_ASSIGN_OR_RETURN(auto orf, b.out<float>(0));
                    return orf.Store(xr.Load() + yr.Load());
                  },
                  in2, out2));
              EXPECT_EQ(program_id(0),
                        outer);  // Restored after the inner grid.
              return absl::OkStatus();
            },
            ins, outs));
        EXPECT_EQ(inner_stats.input_copies[0], 5);
        for (size_t i = 0; i < o.size(); ++i)
          EXPECT_FLOAT_EQ(o[i], x[i] + y[i]);
        return absl::OkStatus();
      }).ok());
}

// Every bad input is an error naming the kernel and the operand.
class BadInputTest : public ::testing::Test {
 protected:
  absl::Status Call(PallasCallParams p, KernelBody body = nullptr) {
    absl::Status result;
    // Set before the devices start: every device reads `body`.
    if (!body) body = [](const KernelArgs&) { return absl::OkStatus(); };
    absl::Status run = RunOnDevices([&]() -> absl::Status {
      std::vector<float> x(24 * 16), o(24 * 16);
      const ArrayRef ins[] = {View(x, {24, 16})};
      const ArrayRef outs[] = {View(o, {24, 16})};
      absl::Status s = pallas_call(p, body, ins, outs);
      static std::mutex mu;
      std::lock_guard<std::mutex> l(mu);
      result = s;
      return absl::OkStatus();
    });
    EXPECT_TRUE(run.ok()) << run;
    return result;
  }
  static PallasCallParams Base() {
    PallasCallParams p;
    p.name = "k";
    p.grid = {3};
    auto m = [](G g) { return std::vector<int64_t>{g[0], 0}; };
    p.in_specs = {{{8, 16}, m}};
    p.out_specs = {{{8, 16}, m}};
    p.input_names = {"x"};
    p.output_names = {"o"};
    return p;
  }
};

TEST_F(BadInputTest, Messages) {
  auto expect = [&](PallasCallParams p, std::vector<std::string> parts,
                    KernelBody body = nullptr) {
    absl::Status s = Call(std::move(p), std::move(body));
    EXPECT_FALSE(s.ok());
    for (const auto& part : parts) {
      EXPECT_THAT(std::string(s.message()), HasSubstr(part));
    }
  };
  PallasCallParams p = Base();
  p.out_shape = {{DType::kF32, {24, 8}}};
  expect(p, {"kernel 'k'", "output 0 ('o')", "f32[24,16]", "f32[24,8]"});
  p = Base();
  p.out_shape = {{DType::kBF16, {24, 16}}};
  expect(p, {"kernel 'k'", "output 0 ('o')", "bf16"});
  p = Base();
  p.in_specs[0].block_shape = {8};
  expect(p, {"kernel 'k'", "input 0 ('x')", "rank 1"});
  p = Base();
  p.in_specs[0].block_shape = {0, 16};
  expect(p, {"kernel 'k'", "input 0 ('x')", "non-positive"});
  p = Base();
  p.allow_partial_blocks = false;
  p.in_specs[0].block_shape = {7, 16};
  p.grid = {4};
  expect(p, {"kernel 'k'", "does not tile input 0 ('x')",
             "24 is not a multiple of 7"});
  p = Base();
  p.grid = {4};
  expect(p, {"kernel 'k'", "index map of input 0 ('x')", "block (3, 0)",
             "grid point (3)", "3 blocks"});
  p = Base();
  p.out_specs[0].index_map = [](G g) { return std::vector<int64_t>{g[0]}; };
  expect(p, {"kernel 'k'", "index map of output 0 ('o')",
             "returned 1 block indices"});
  p = Base();
  p.grid = {4};
  p.in_specs[0].index_map = [](G g) {
    return std::vector<int64_t>{g[0] % 3, 0};
  };
  p.out_specs[0].index_map = [](G g) {
    return std::vector<int64_t>{g[0] % 3, 0};
  };
  expect(p, {"kernel 'k'", "output 0 ('o') block (0, 0) is revisited",
             "grid point (3)"});
  // A grid whose point count overflows int64 is an error, not 0 steps.
  p = Base();
  p.grid = {int64_t{1} << 32, int64_t{1} << 32};
  {
    absl::Status s = Call(p, nullptr);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()),
                AllOf(HasSubstr("kernel 'k'"), HasSubstr("grid"),
                      HasSubstr("4294967296"), HasSubstr("int64")));
  }
  p = Base();
  p.in_specs.push_back(p.in_specs[0]);
  expect(p, {"kernel 'k'", "2 in_specs"});
  p = Base();
  p.scratch_shapes = {SemaphoreShape(SemaphoreType::kBarrier)};
  expect(p, {"kernel 'k'", "scratch 0", "BARRIER"});
  p = Base();
  p.scratch_shapes = {VMEM({-1}, DType::kF32)};
  expect(p, {"kernel 'k'", "scratch 0"});
  // A MemorySpace outside the enum is not a buffer request.
  p = Base();
  p.scratch_shapes = {VMEM({4}, DType::kF32)};
  std::get<BufferScratch>(p.scratch_shapes[0]).memory_space =
      static_cast<MemorySpace>(9);
  expect(p, {"kernel 'k'", "scratch 0", "not a valid VMEM/SMEM"});
  // An InPlace outside the enum.
  p = Base();
  p.in_specs[0].in_place = static_cast<InPlace>(7);
  expect(p, {"kernel 'k'", "input 0 ('x')", "in_place 7", "kStridedRows"});
  p = Base();
  expect(p, {"kernel 'k'", "grid point (1)", "boom"},
         [](const KernelArgs&) -> absl::Status {
           if (program_id(0) == 1) return absl::InternalError("boom");
           return absl::OkStatus();
         });
  p = Base();
  expect(p, {"kernel 'k'", "input 0", "f32", "i32"},
         [](const KernelArgs& a) -> absl::Status {
           return a.in<int32_t>(0).status();
         });
  p = Base();
  expect(p, {"kernel 'k'", "scratch 0"},
         [](const KernelArgs& a) -> absl::Status {
           return a.scratch<float>(0).status();
         });
  p = Base();
  p.scratch_shapes = {SemaphoreShape(SemaphoreType::kRegular)};
  expect(p, {"k"}, [](const KernelArgs& a) -> absl::Status {
    // Leaves a semaphore at 1: the exit contract fails.
    MESHDMA_ASSIGN_OR_RETURN(Semaphore s, a.semaphore(0));
    return program_id(0) == 2 ? semaphore_signal(s, 1) : absl::OkStatus();
  });
}

}  // namespace
}  // namespace meshdma
