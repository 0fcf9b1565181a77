// One test per rule of docs/semantics.md §2-5, run on every transport: alone
// (devices as threads: "local"), under mpirun (processes on one host: "shm"),
// with several devices per process, and with every process its own host
// ("mpi"), in both DMA modes.
#include <atomic>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/peer_view.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/semaphore.h"
#include "meshdma/dma/symmetric_memory.h"
#include "tests/dma/runtime_test_util.h"
#include "tests/instrumented_build.h"

namespace meshdma {
namespace {

using ::testing::HasSubstr;

class SemanticsTest : public ::testing::TestWithParam<DmaMode> {
 protected:
  void SetUp() override {
    auto rt = Runtime::Create(testing::TierOptions(GetParam()));
    ASSERT_TRUE(rt.ok()) << rt.status();
    rt_ = std::move(*rt);
    auto mesh = rt_->MakeMesh1D("x");
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    mesh_ = std::make_unique<Mesh>(*mesh);
    n_ = rt_->num_devices();
  }
  absl::Status Run(std::function<absl::Status()> fn) {
    return rt_->Run(*mesh_, std::move(fn));
  }
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<Mesh> mesh_;
  int n_ = 0;
};

// §3: a remote copy lands in the right neighbour's buffer; wait_recv on the
// receiver says the left neighbour's bytes arrived; wait_send says the source
// was read.
TEST_P(SemanticsTest, RemoteCopyRightPermute) {
  ASSERT_TRUE(
      Run([&]() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
        MESHDMA_ASSIGN_OR_RETURN(auto src, AllocateSymmetric<int32_t>({1000}));
        MESHDMA_ASSIGN_OR_RETURN(auto dst, AllocateSymmetric<int32_t>({1000}));
        for (int i = 0; i < 1000; ++i)
          src.data_as<int32_t>()[i] = me * 100000 + i;
        return RunKernel({.name = "permute"}, [&]() -> absl::Status {
          MESHDMA_ASSIGN_OR_RETURN(
              auto send, AllocateSemaphore(SemaphoreType::kDma, "send"));
          MESHDMA_ASSIGN_OR_RETURN(
              auto recv, AllocateSemaphore(SemaphoreType::kDma, "recv"));
          auto copy =
              make_async_remote_copy(src, dst, send, recv, (me + 1) % n_);
          MESHDMA_RETURN_IF_ERROR(copy.start());
          MESHDMA_RETURN_IF_ERROR(copy.wait_send());
          MESHDMA_RETURN_IF_ERROR(copy.wait_recv());
          const int left = (me + n_ - 1) % n_;
          for (int i = 0; i < 1000; ++i) {
            EXPECT_EQ(dst.data_as<int32_t>()[i], left * 100000 + i)
                << "at " << i;
          }
          return absl::OkStatus();
        });
      }).ok());
}

// §3: DMA semaphores count bytes and accumulate: four 256-byte copies are
// consumed by one wait-only descriptor of 1024 bytes, and a 1024-byte copy by
// four waits of 256.
TEST_P(SemanticsTest, ByteCountsAccumulateAcrossDmas) {
  absl::Status s = Run([&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    MESHDMA_ASSIGN_OR_RETURN(auto src, AllocateSymmetric<float>({4, 64}));
    MESHDMA_ASSIGN_OR_RETURN(auto dst, AllocateSymmetric<float>({4, 64}));
    for (int i = 0; i < 256; ++i) src.data_as<float>()[i] = me + i * 0.5f;
    return RunKernel({.name = "accumulate"}, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(auto send,
                               AllocateSemaphore(SemaphoreType::kDma, "send"));
      MESHDMA_ASSIGN_OR_RETURN(auto recv,
                               AllocateSemaphore(SemaphoreType::kDma, "recv"));
      const int right = (me + 1) % n_;
      for (int row = 0; row < 4; ++row) {
        MESHDMA_ASSIGN_OR_RETURN(auto s_row, src.Slice(0, row, 1));
        MESHDMA_ASSIGN_OR_RETURN(auto d_row, dst.Slice(0, row, 1));
        MESHDMA_RETURN_IF_ERROR(
            make_async_remote_copy(s_row, d_row, send, recv, right).start());
      }
      // One descriptor covering all four rows, never started: wait only.
      auto whole = make_async_remote_copy(src, dst, send, recv, right);
      MESHDMA_RETURN_IF_ERROR(whole.wait_send());
      MESHDMA_RETURN_IF_ERROR(whole.wait_recv());
      const int left = (me + n_ - 1) % n_;
      for (int i = 0; i < 256; ++i) {
        EXPECT_EQ(dst.data_as<float>()[i], left + i * 0.5f);
      }
      // The reverse: one big copy, four small waits. The neighbour must have
      // read its `dst` before this device overwrites it.
      MESHDMA_RETURN_IF_ERROR(device_barrier());
      MESHDMA_RETURN_IF_ERROR(whole.start());
      for (int row = 0; row < 4; ++row) {
        MESHDMA_ASSIGN_OR_RETURN(auto s_row, src.Slice(0, row, 1));
        MESHDMA_ASSIGN_OR_RETURN(auto d_row, dst.Slice(0, row, 1));
        auto part = make_async_remote_copy(s_row, d_row, send, recv, right);
        MESHDMA_RETURN_IF_ERROR(part.wait());
      }
      MESHDMA_ASSIGN_OR_RETURN(int64_t left_over, semaphore_read(recv));
      EXPECT_EQ(left_over, 0);
      return absl::OkStatus();
    });
  });
  EXPECT_TRUE(s.ok()) << s;
}

// §3: a local copy signals its one semaphore when written; strided views (a
// 2-D block of a larger array) copy element-exactly.
TEST_P(SemanticsTest, LocalStridedBlockCopy) {
  absl::Status s = Run([&]() -> absl::Status {
    std::vector<double> host(32 * 40);
    std::iota(host.begin(), host.end(), 0.0);
    MESHDMA_ASSIGN_OR_RETURN(
        auto big, ArrayRef::FromPointer(host.data(), DType::kF64,
                                        std::vector<int64_t>{32, 40}));
    MESHDMA_ASSIGN_OR_RETURN(
        auto block,
        big.Block(std::vector<int64_t>{5, 7}, std::vector<int64_t>{9, 11}));
    MESHDMA_ASSIGN_OR_RETURN(auto out, AllocateSymmetric<double>({20, 30}));
    MESHDMA_ASSIGN_OR_RETURN(
        auto out_block,
        out.Block(std::vector<int64_t>{3, 2}, std::vector<int64_t>{9, 11}));
    MESHDMA_ASSIGN_OR_RETURN(auto sem,
                             AllocateSemaphore(SemaphoreType::kDma, "local"));
    auto copy = make_async_copy(block, out_block, sem);
    MESHDMA_RETURN_IF_ERROR(copy.start());
    MESHDMA_RETURN_IF_ERROR(copy.wait());
    const double* o = out.data_as<double>();
    for (int r = 0; r < 20; ++r) {
      for (int c = 0; c < 30; ++c) {
        const bool inside = r >= 3 && r < 12 && c >= 2 && c < 13;
        const double want = inside ? host[(r - 3 + 5) * 40 + (c - 2 + 7)] : 0.0;
        EXPECT_EQ(o[r * 30 + c], want) << r << "," << c;
      }
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

// §3: a local copy may target ordinary memory outside the symmetric heap.
TEST_P(SemanticsTest, LocalCopyIntoOrdinaryMemory) {
  absl::Status s = Run([&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    MESHDMA_ASSIGN_OR_RETURN(auto src, AllocateSymmetric<int32_t>({100000}));
    for (int i = 0; i < 100000; ++i) src.data_as<int32_t>()[i] = me + 3 * i;
    std::vector<int32_t> host(100000, -1);
    MESHDMA_ASSIGN_OR_RETURN(
        auto dst, ArrayRef::FromPointer(host.data(), DType::kI32,
                                        std::vector<int64_t>{100000}));
    MESHDMA_ASSIGN_OR_RETURN(auto sem, AllocateSemaphore(SemaphoreType::kDma));
    auto copy = make_async_copy(src, dst, sem);
    MESHDMA_RETURN_IF_ERROR(copy.start());
    MESHDMA_RETURN_IF_ERROR(copy.wait());
    for (int i = 0; i < 100000; ++i) EXPECT_EQ(host[i], me + 3 * i) << i;
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

// §5: the exit contract of a kernel covers the DMAs it started, not those of
// an enclosing kernel still in flight around it (compute kernels nest inside
// communication kernels that overlap them).
TEST_P(SemanticsTest, NestedKernelIgnoresOuterDmasInFlight) {
  absl::Status s = Run([&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    MESHDMA_ASSIGN_OR_RETURN(auto src, AllocateSymmetric<float>({1 << 18}));
    MESHDMA_ASSIGN_OR_RETURN(auto dst, AllocateSymmetric<float>({1 << 18}));
    return RunKernel({.name = "outer"}, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(auto send,
                               AllocateSemaphore(SemaphoreType::kDma));
      MESHDMA_ASSIGN_OR_RETURN(auto recv,
                               AllocateSemaphore(SemaphoreType::kDma));
      auto copy = make_async_remote_copy(src, dst, send, recv, (me + 1) % n_);
      MESHDMA_RETURN_IF_ERROR(copy.start());
      MESHDMA_RETURN_IF_ERROR(
          RunKernel({.name = "inner"}, [&]() -> absl::Status {
            MESHDMA_ASSIGN_OR_RETURN(auto local,
                                     AllocateSemaphore(SemaphoreType::kDma));
            MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({64}));
            MESHDMA_ASSIGN_OR_RETURN(auto b, AllocateSymmetric<float>({64}));
            auto inner_copy = make_async_copy(a, b, local);
            MESHDMA_RETURN_IF_ERROR(inner_copy.start());
            return inner_copy.wait();
          }));
      return copy.wait();
    });
  });
  EXPECT_TRUE(s.ok()) << s;
}

// §3 on the remote path: a strided source block into a strided destination
// block of the neighbour's array (column slices: every run is short).
TEST_P(SemanticsTest, RemoteStridedColumnsCopy) {
  absl::Status s = Run([&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    MESHDMA_ASSIGN_OR_RETURN(auto src, AllocateSymmetric<int64_t>({16, 16}));
    MESHDMA_ASSIGN_OR_RETURN(auto dst, AllocateSymmetric<int64_t>({16, 16}));
    for (int i = 0; i < 256; ++i) src.data_as<int64_t>()[i] = me * 1000 + i;
    return RunKernel({.name = "columns"}, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(auto send,
                               AllocateSemaphore(SemaphoreType::kDma));
      MESHDMA_ASSIGN_OR_RETURN(auto recv,
                               AllocateSemaphore(SemaphoreType::kDma));
      MESHDMA_ASSIGN_OR_RETURN(auto s_cols,
                               src.Slice(1, 2, 3));  // columns 2..4
      MESHDMA_ASSIGN_OR_RETURN(auto d_cols,
                               dst.Slice(1, 10, 3));  // columns 10..12
      auto copy =
          make_async_remote_copy(s_cols, d_cols, send, recv, (me + 1) % n_);
      MESHDMA_RETURN_IF_ERROR(copy.start());
      MESHDMA_RETURN_IF_ERROR(copy.wait());
      const int left = (me + n_ - 1) % n_;
      for (int r = 0; r < 16; ++r) {
        for (int c = 0; c < 16; ++c) {
          const int64_t want =
              (c >= 10 && c < 13) ? left * 1000 + r * 16 + (c - 8) : 0;
          EXPECT_EQ(dst.data_as<int64_t>()[r * 16 + c], want) << r << "," << c;
        }
      }
      return absl::OkStatus();
    });
  });
  EXPECT_TRUE(s.ok()) << s;
}

// Element (r, c, k) of a 3-D int64 view.
int64_t* Element(const ArrayRef& a, int64_t r, int64_t c, int64_t k) {
  return a.data_as<int64_t>() + r * a.strides()[0] + c * a.strides()[1] +
         k * a.strides()[2];
}

// §3 on the remote path with payloads beyond one inline message (195 and
// 225 KiB): 3-D blocks strided on either side, on both, or on neither,
// against a naive loop over the block's coordinates. A block of 130 of 150
// columns cuts puts in pieces along its rows; a block of all 150 columns
// has its outer two dimensions at one stride in both views (as the heads
// and pages of a KV cache are), which puts in pieces merge and cut as one.
TEST_P(SemanticsTest, RemoteLargeStridedBlockCopy) {
  constexpr int64_t kRows = 3, kDepth = 64;
  absl::Status s = Run([&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    const int left = (me + n_ - 1) % n_;
    // Wide holds the strided views; packed arrays are exactly the block.
    MESHDMA_ASSIGN_OR_RETURN(auto wide_src,
                             AllocateSymmetric<int64_t>({4, 150, 96}));
    MESHDMA_ASSIGN_OR_RETURN(auto wide_dst,
                             AllocateSymmetric<int64_t>({5, 150, 100}));
    // The value the block's element (r, c, k) carries from device `from`.
    auto value = [](int from, int64_t r, int64_t c, int64_t k) {
      return from * 10000000 + (r * 1000 + c) * 100 + k;
    };
    for (const int64_t cols : {130, 150}) {
      const int64_t sizes[] = {kRows, cols, kDepth};
      const int64_t src_start[] = {1, 150 - cols, 8},
                    dst_start[] = {2, 150 - cols, 30};
      MESHDMA_ASSIGN_OR_RETURN(auto strided_src,
                               wide_src.Block(src_start, sizes));
      MESHDMA_ASSIGN_OR_RETURN(auto strided_dst,
                               wide_dst.Block(dst_start, sizes));
      for (int strided_mask = 0; strided_mask < 4; ++strided_mask) {
        const bool src_strided = strided_mask & 1,
                   dst_strided = strided_mask & 2;
        MESHDMA_RETURN_IF_ERROR(run_scoped([&]() -> absl::Status {
          MESHDMA_ASSIGN_OR_RETURN(auto packed_src, AllocateSymmetric<int64_t>(
                                                        {kRows, cols, kDepth}));
          MESHDMA_ASSIGN_OR_RETURN(auto packed_dst, AllocateSymmetric<int64_t>(
                                                        {kRows, cols, kDepth}));
          const ArrayRef& src = src_strided ? strided_src : packed_src;
          const ArrayRef& dst = dst_strided ? strided_dst : packed_dst;
          for (int64_t r = 0; r < kRows; ++r)
            for (int64_t c = 0; c < cols; ++c)
              for (int64_t k = 0; k < kDepth; ++k)
                *Element(src, r, c, k) = value(me, r, c, k);
          std::fill_n(wide_dst.data_as<int64_t>(), wide_dst.num_elements(), -1);
          std::fill_n(packed_dst.data_as<int64_t>(), packed_dst.num_elements(),
                      -1);
          MESHDMA_RETURN_IF_ERROR(device_barrier());
          MESHDMA_RETURN_IF_ERROR(
              RunKernel({.name = "large_blocks"}, [&]() -> absl::Status {
                MESHDMA_ASSIGN_OR_RETURN(
                    auto send, AllocateSemaphore(SemaphoreType::kDma));
                MESHDMA_ASSIGN_OR_RETURN(
                    auto recv, AllocateSemaphore(SemaphoreType::kDma));
                auto copy =
                    make_async_remote_copy(src, dst, send, recv, (me + 1) % n_);
                MESHDMA_RETURN_IF_ERROR(copy.start());
                return copy.wait();
              }));
          int64_t wrong = 0, outside = 0;
          for (int64_t r = 0; r < kRows; ++r)
            for (int64_t c = 0; c < cols; ++c)
              for (int64_t k = 0; k < kDepth; ++k)
                wrong += *Element(dst, r, c, k) != value(left, r, c, k);
          const std::string what = absl::StrCat(
              "device ", me, ", ", cols, " columns, strided source ",
              src_strided, ", strided destination ", dst_strided);
          if (dst_strided) {
            // Everything around the block is as it was.
            for (int64_t i = 0; i < wide_dst.num_elements(); ++i)
              outside += wide_dst.data_as<int64_t>()[i] == -1;
            EXPECT_EQ(outside, wide_dst.num_elements() - kRows * cols * kDepth)
                << what;
          }
          EXPECT_EQ(wrong, 0) << what;
          // The packed destination is refilled by the next round: nobody may
          // still be writing it.
          return device_barrier();
        }));
      }
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

// §4 and §2: remote signals by MESH id, LOGICAL id and partial id on a 2-D
// mesh; semaphore_wait subtracts; semaphore_read is a snapshot.
TEST_P(SemanticsTest, RemoteSignalsWithEveryIdForm) {
  if (n_ % 2 != 0) GTEST_SKIP() << "needs an even device count for a 2-D mesh";
  auto mesh2 = rt_->MakeMesh({{"a", 2}, {"b", n_ / 2}});
  ASSERT_TRUE(mesh2.ok()) << mesh2.status();
  absl::Status s = rt_->Run(*mesh2, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int a, axis_index("a"));
    MESHDMA_ASSIGN_OR_RETURN(int b, axis_index("b"));
    const int nb = n_ / 2;
    return RunKernel({.name = "signals"}, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(
          auto sem, AllocateSemaphore(SemaphoreType::kRegular, "sig"));
      // MESH id: my mirror across "a".
      MESHDMA_RETURN_IF_ERROR(
          semaphore_signal(sem, 1, DeviceId::Coords({1 - a, b})));
      // LOGICAL id: the next device in row-major order.
      MESHDMA_RETURN_IF_ERROR(semaphore_signal(
          sem, 10, DeviceId((a * nb + b + 1) % n_), DeviceIdType::kLogical));
      // Partial id: my right neighbour along "b", same "a".
      MESHDMA_RETURN_IF_ERROR(semaphore_signal(
          sem, 100, DeviceId::Partial({{{"b"}, (b + 1) % nb}})));
      // Each device receives exactly 1 + 10 + 100.
      MESHDMA_RETURN_IF_ERROR(semaphore_wait(sem, 111));
      MESHDMA_ASSIGN_OR_RETURN(int64_t now, semaphore_read(sem));
      EXPECT_EQ(now, 0);
      // A local signal and a read.
      MESHDMA_RETURN_IF_ERROR(semaphore_signal(sem, 3));
      MESHDMA_ASSIGN_OR_RETURN(now, semaphore_read(sem));
      EXPECT_EQ(now, 3);
      return semaphore_wait(sem, 3);
    });
  });
  EXPECT_TRUE(s.ok()) << s;
}

// §5: the tutorial's barrier-semaphore handshake with both ring neighbours,
// over many consecutive kernel calls without the default entry barrier.
TEST_P(SemanticsTest, BarrierSemaphoreHandshakeRepeated) {
  absl::Status s = Run([&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    for (int iter = 0; iter < 50; ++iter) {
      MESHDMA_RETURN_IF_ERROR(RunKernel(
          {.name = "handshake", .entry_barrier = false, .collective_id = 3},
          [&]() -> absl::Status {
            MESHDMA_ASSIGN_OR_RETURN(auto barrier, get_barrier_semaphore());
            EXPECT_EQ(barrier.type(), SemaphoreType::kBarrier);
            const int left = (me + n_ - 1) % n_, right = (me + 1) % n_;
            MESHDMA_RETURN_IF_ERROR(semaphore_signal(barrier, 1, left));
            MESHDMA_RETURN_IF_ERROR(semaphore_signal(barrier, 1, right));
            MESHDMA_RETURN_IF_ERROR(semaphore_wait(barrier, 2));
            return absl::OkStatus();
          }));
    }
    // Every signal was consumed: after a barrier the semaphore reads 0.
    return RunKernel(
        {.name = "check", .collective_id = 3}, [&]() -> absl::Status {
          MESHDMA_ASSIGN_OR_RETURN(auto barrier, get_barrier_semaphore());
          MESHDMA_ASSIGN_OR_RETURN(int64_t count, semaphore_read(barrier));
          EXPECT_EQ(count, 0);
          return device_barrier();
        });
  });
  EXPECT_TRUE(s.ok()) << s;
}

// §5: the default entry barrier. Every device pushes into its neighbour's
// kernel scratch right after entry; without the barrier a fast device could
// write scratch that does not exist yet. Repeated so the race would show.
TEST_P(SemanticsTest, EntryBarrierProtectsScratch) {
  absl::Status s = Run([&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    for (int iter = 0; iter < 40; ++iter) {
      MESHDMA_RETURN_IF_ERROR(
          RunKernel({.name = "scratch_push"}, [&]() -> absl::Status {
            MESHDMA_ASSIGN_OR_RETURN(auto scratch,
                                     AllocateSymmetric<int32_t>({64}));
            MESHDMA_ASSIGN_OR_RETURN(auto mine,
                                     AllocateSymmetric<int32_t>({64}));
            MESHDMA_ASSIGN_OR_RETURN(auto send,
                                     AllocateSemaphore(SemaphoreType::kDma));
            MESHDMA_ASSIGN_OR_RETURN(auto recv,
                                     AllocateSemaphore(SemaphoreType::kDma));
            for (int i = 0; i < 64; ++i)
              mine.data_as<int32_t>()[i] = iter * 1000 + me;
            auto copy = make_async_remote_copy(mine, scratch, send, recv,
                                               (me + 1) % n_);
            MESHDMA_RETURN_IF_ERROR(copy.start());
            MESHDMA_RETURN_IF_ERROR(copy.wait());
            EXPECT_EQ(scratch.data_as<int32_t>()[63],
                      iter * 1000 + (me + n_ - 1) % n_);
            // Leave only when the neighbour has read our data: it's in their
            // scratch, which dies with their kernel; a barrier at exit keeps
            // the next iteration's pushes out of this one.
            return device_barrier();
          }));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

// Runs over different meshes share the reserved barrier semaphores. A process
// holding no device of one mesh must not run ahead into the next Run and
// signal a device still inside the previous mesh's barrier.
TEST_P(SemanticsTest, AlternatingMeshesKeepBarriersApart) {
  auto sub = Mesh::Create(
      {{"x", static_cast<int>(rt_->launch().DevicesOfRank(0).size())}},
      rt_->launch().DevicesOfRank(0));
  ASSERT_TRUE(sub.ok()) << sub.status();
  for (int iter = 0; iter < 20; ++iter) {
    absl::Status s = rt_->Run(*sub, [&]() -> absl::Status {
      for (int b = 0; b < 3; ++b) {
        MESHDMA_RETURN_IF_ERROR(
            RunKernel({.name = "sub"}, [] { return device_barrier(); }));
      }
      return absl::OkStatus();
    });
    ASSERT_TRUE(s.ok()) << s;
    s = Run([&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
      return RunKernel({.name = "full"}, [&]() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(auto scratch,
                                 AllocateSymmetric<int32_t>({16}));
        MESHDMA_ASSIGN_OR_RETURN(auto mine, AllocateSymmetric<int32_t>({16}));
        MESHDMA_ASSIGN_OR_RETURN(auto send,
                                 AllocateSemaphore(SemaphoreType::kDma));
        MESHDMA_ASSIGN_OR_RETURN(auto recv,
                                 AllocateSemaphore(SemaphoreType::kDma));
        for (int i = 0; i < 16; ++i)
          mine.data_as<int32_t>()[i] = iter * 100 + me;
        auto copy =
            make_async_remote_copy(mine, scratch, send, recv, (me + 1) % n_);
        MESHDMA_RETURN_IF_ERROR(copy.start());
        MESHDMA_RETURN_IF_ERROR(copy.wait());
        EXPECT_EQ(scratch.data_as<int32_t>()[15],
                  iter * 100 + (me + n_ - 1) % n_);
        return device_barrier();
      });
    });
    ASSERT_TRUE(s.ok()) << s;
  }
}

// §7: a put moves while its issuer computes and calls nothing. Across hosts
// over a network (the `_tcp` variants) a put of 8 MiB takes MPI several
// steps (a rendezvous) that need someone on each side to progress MPI: the
// issuer's process's progress thread, when no device there polls. Even devices
// start a put to their right neighbour and then compute (sleep) before they
// wait; odd devices wait for the bytes of their left neighbour, which is
// computing, and must get them long before it wakes.
TEST_P(SemanticsTest, RemoteCopyMovesWhileItsIssuerComputes) {
  if (n_ < 2) GTEST_SKIP() << "needs two devices";
  constexpr int64_t kInts = int64_t{2} << 20;  // 8 MiB: past any eager limit.
  // Instrumented copies of 8 MiB take 300 ms and more: compute longer there.
  const absl::Duration kCompute =
      absl::Milliseconds(testing::kInstrumentedBuild ? 3000 : 600);
  auto value = [](int device, int64_t i) {
    return static_cast<int32_t>(device * 7919 + i);
  };
  absl::Status s = Run([&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    MESHDMA_ASSIGN_OR_RETURN(auto src, AllocateSymmetric<int32_t>({kInts}));
    MESHDMA_ASSIGN_OR_RETURN(auto dst, AllocateSymmetric<int32_t>({kInts}));
    for (int64_t i = 0; i < kInts; ++i)
      src.data_as<int32_t>()[i] = value(me, i);
    return RunKernel({.name = "compute_while_sending"}, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(auto send,
                               AllocateSemaphore(SemaphoreType::kDma, "send"));
      MESHDMA_ASSIGN_OR_RETURN(auto recv,
                               AllocateSemaphore(SemaphoreType::kDma, "recv"));
      auto copy = make_async_remote_copy(src, dst, send, recv, (me + 1) % n_);
      MESHDMA_RETURN_IF_ERROR(copy.start());
      if (me % 2 == 0) {
        absl::SleepFor(kCompute);  // Computing: no runtime call, no poll.
        MESHDMA_RETURN_IF_ERROR(copy.wait_recv());
      } else {
        const absl::Time t0 = absl::Now();
        MESHDMA_RETURN_IF_ERROR(copy.wait_recv());
        EXPECT_LT(absl::Now() - t0, kCompute / 2)
            << "device " << me << " got the bytes of device " << me - 1
            << " only when that device stopped computing";
      }
      MESHDMA_RETURN_IF_ERROR(copy.wait_send());
      const int left = (me + n_ - 1) % n_;
      int64_t wrong = 0;
      for (int64_t i = 0; i < kInts; ++i) {
        wrong += dst.data_as<int32_t>()[i] != value(left, i);
      }
      EXPECT_EQ(wrong, 0) << "elements wrong on device " << me;
      return absl::OkStatus();
    });
  });
  EXPECT_TRUE(s.ok()) << s;
}

// §7: start_eager() copies before it returns, in either mode, wherever this
// process makes the copy: a local copy's semaphore, and a remote copy's send
// semaphore when this device reaches the peer's memory, have moved by the
// copy's bytes before any wait (1 MiB: past async_min_bytes, so start()
// would hand it to a copy worker). Over MPI it is start().
TEST_P(SemanticsTest, StartEagerCopiesBeforeItReturns) {
  constexpr int64_t kInts = int64_t{1} << 18;  // 1 MiB.
  constexpr int64_t kBytes = kInts * 4;
  absl::Status s = Run([&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    MESHDMA_ASSIGN_OR_RETURN(auto src, AllocateSymmetric<int32_t>({kInts}));
    MESHDMA_ASSIGN_OR_RETURN(auto mid, AllocateSymmetric<int32_t>({kInts}));
    MESHDMA_ASSIGN_OR_RETURN(auto dst, AllocateSymmetric<int32_t>({kInts}));
    for (int64_t i = 0; i < kInts; ++i)
      src.data_as<int32_t>()[i] = static_cast<int32_t>(me * 1000003 + i);
    return RunKernel({.name = "start_eager"}, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(auto local,
                               AllocateSemaphore(SemaphoreType::kDma, "local"));
      MESHDMA_ASSIGN_OR_RETURN(auto send,
                               AllocateSemaphore(SemaphoreType::kDma, "send"));
      MESHDMA_ASSIGN_OR_RETURN(auto recv,
                               AllocateSemaphore(SemaphoreType::kDma, "recv"));
      auto copy = make_async_copy(src, mid, local);
      MESHDMA_RETURN_IF_ERROR(copy.start_eager());
      MESHDMA_ASSIGN_OR_RETURN(int64_t copied, semaphore_read(local));
      EXPECT_EQ(copied, kBytes) << "local copy on device " << me;
      MESHDMA_RETURN_IF_ERROR(copy.wait());
      EXPECT_EQ(std::memcmp(mid.data(), src.data(), kBytes), 0);

      const int right = (me + 1) % n_;
      auto push = make_async_remote_copy(mid, dst, send, recv, right);
      MESHDMA_RETURN_IF_ERROR(push.start_eager());
      MESHDMA_ASSIGN_OR_RETURN(bool reaches, peer_view_reaches(right));
      if (reaches) {
        MESHDMA_ASSIGN_OR_RETURN(int64_t read, semaphore_read(send));
        EXPECT_EQ(read, kBytes) << "remote copy from device " << me;
      }
      MESHDMA_RETURN_IF_ERROR(push.wait());
      const int left = (me + n_ - 1) % n_;
      int64_t wrong = 0;
      for (int64_t i = 0; i < kInts; ++i) {
        wrong += dst.data_as<int32_t>()[i] !=
                 static_cast<int32_t>(left * 1000003 + i);
      }
      EXPECT_EQ(wrong, 0) << "elements wrong on device " << me;
      return absl::OkStatus();
    });
  });
  EXPECT_TRUE(s.ok()) << s;
}

// §10: allocations start zero-filled, because a closing scope zeroes what it
// held. Scratch written here and there (single bytes at the start, middle
// and end of 4 KiB blocks, whole blocks, a ragged end, a neighbour's DMA)
// and left partly unwritten reads as zeros in every byte once reallocated,
// over the same offsets and over offsets shifted by a smaller first array.
TEST_P(SemanticsTest, ScratchOfAClosedScopeIsZeroAgain) {
  constexpr int64_t kBytes = (int64_t{1} << 20) + 4096 * 3 + 100;
  absl::Status s = Run([&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    for (int round = 0; round < 3; ++round) {
      MESHDMA_RETURN_IF_ERROR(
          RunKernel({.name = "dirty_scratch"}, [&]() -> absl::Status {
            MESHDMA_ASSIGN_OR_RETURN(auto a,
                                     AllocateSymmetric<uint8_t>({kBytes}));
            MESHDMA_ASSIGN_OR_RETURN(auto src,
                                     AllocateSymmetric<uint8_t>({5000}));
            MESHDMA_ASSIGN_OR_RETURN(auto send,
                                     AllocateSemaphore(SemaphoreType::kDma));
            MESHDMA_ASSIGN_OR_RETURN(auto recv,
                                     AllocateSemaphore(SemaphoreType::kDma));
            uint8_t* p = a.data_as<uint8_t>();
            for (int64_t i : {int64_t{0}, int64_t{4095}, int64_t{4096 * 7 + 64},
                              int64_t{4096 * 9 + 2000}, kBytes - 1}) {
              p[i] = static_cast<uint8_t>(1 + round);
            }
            std::memset(p + 4096 * 20, 0xff, 4096 * 3);  // Whole blocks.
            std::memset(p + kBytes - 150, 0x7f, 120);    // Near the end.
            std::memset(src.data_as<uint8_t>(), 1 + me, 5000);
            // A neighbour's bytes across a block boundary.
            MESHDMA_ASSIGN_OR_RETURN(
                auto dst, a.Slice(0, 4096 * 40 - 1000 + round * 8, 5000));
            auto copy =
                make_async_remote_copy(src, dst, send, recv, (me + 1) % n_);
            MESHDMA_RETURN_IF_ERROR(copy.start());
            MESHDMA_RETURN_IF_ERROR(copy.wait());
            return device_barrier();  // The neighbour's DMA has landed.
          }));
      for (int64_t shift : {int64_t{0}, int64_t{64}, int64_t{4160}}) {
        MESHDMA_RETURN_IF_ERROR(run_scoped([&]() -> absl::Status {
          if (shift > 0) {
            MESHDMA_RETURN_IF_ERROR(
                AllocateSymmetric<uint8_t>({shift}).status());
          }
          MESHDMA_ASSIGN_OR_RETURN(auto b,
                                   AllocateSymmetric<uint8_t>({kBytes + 5000}));
          int64_t nonzero = 0, first = -1;
          for (int64_t i = 0; i < kBytes + 5000; ++i) {
            if (b.data_as<uint8_t>()[i] != 0) {
              if (first < 0) first = i;
              ++nonzero;
            }
          }
          EXPECT_EQ(nonzero, 0) << "round " << round << ", shift " << shift
                                << ", first non-zero byte at " << first;
          return absl::OkStatus();
        }));
      }
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

INSTANTIATE_TEST_SUITE_P(Modes, SemanticsTest,
                         ::testing::Values(DmaMode::kAsync, DmaMode::kEager),
                         [](const auto& info) {
                           return testing::ModeName(info.param);
                         });

}  // namespace
}  // namespace meshdma
