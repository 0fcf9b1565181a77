// The C ABI entries that compiled (MLIR) kernels use beyond the verbs:
// symmetric allocation, MESHDMA_HEAP_OFFSET_RESOLVE, MESH ids, the barrier
// semaphore, and the collectives. Results are checked against values
// computed here from the inputs' formula, not against the C++ collectives.
#include "meshdma/dma/c_api.h"

#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"
#include "tests/dma/runtime_test_util.h"

namespace meshdma {
namespace {

constexpr int32_t kF32 = 5;  // meshdma::DType::kF32

meshdma_view ViewOf(float* data, int64_t count, int64_t heap_offset) {
  meshdma_view v{};
  v.data = data;
  v.heap_offset = heap_offset;
  v.dtype = kF32;
  v.rank = 1;
  v.shape[0] = count;
  v.strides[0] = 1;
  return v;
}

class CApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto rt = Runtime::Create(testing::TierOptions(DmaMode::kAsync));
    ASSERT_TRUE(rt.ok()) << rt.status();
    rt_ = std::move(*rt);
    n_ = rt_->num_devices();
  }
  std::unique_ptr<Runtime> rt_;
  int n_ = 0;
};

TEST_F(CApiTest, SymmetricAllocationAndResolvedViews) {
  absl::Status s = rt_->Run(*rt_->MakeMesh1D(), [&]() -> absl::Status {
    return RunKernel({.name = "c_api_alloc"}, [&]() -> absl::Status {
      int32_t me = -1;
      EXPECT_EQ(meshdma_logical_device_id(&me), 0);
      const int64_t shape[2] = {4, 8};
      meshdma_view buf{};
      EXPECT_EQ(meshdma_allocate_symmetric(kF32, 2, shape, &buf), 0)
          << meshdma_last_error();
      EXPECT_GE(buf.heap_offset, 0);
      EXPECT_EQ(buf.rank, 2);
      EXPECT_EQ(buf.strides[0], 8);
      EXPECT_EQ(buf.strides[1], 1);
      auto* data = static_cast<float*>(buf.data);
      for (int i = 0; i < 32; ++i) EXPECT_EQ(data[i], 0.0f);  // zeroed

      // A local buffer (not in the heap) as the source, the symmetric one as
      // the target, both with heap offsets left for the runtime to resolve.
      std::vector<float> local(32);
      for (int i = 0; i < 32; ++i) local[i] = me * 100.0f + i;
      meshdma_view src = ViewOf(local.data(), 32, MESHDMA_HEAP_OFFSET_RESOLVE);
      meshdma_view dst = ViewOf(data, 32, MESHDMA_HEAP_OFFSET_RESOLVE);
      meshdma_semaphore send, recv;
      EXPECT_EQ(meshdma_allocate_semaphore(MESHDMA_SEMAPHORE_DMA, &send), 0);
      EXPECT_EQ(meshdma_allocate_semaphore(MESHDMA_SEMAPHORE_DMA, &recv), 0);
      const int right = (me + 1) % n_, left = (me + n_ - 1) % n_;
      EXPECT_EQ(meshdma_device_barrier(), 0);
      EXPECT_EQ(meshdma_async_remote_copy_start(&src, &dst, send, recv, right),
                0)
          << meshdma_last_error();
      EXPECT_EQ(meshdma_dma_wait_send(send, 128), 0);
      EXPECT_EQ(meshdma_dma_wait_recv(recv, 128), 0);
      for (int i = 0; i < 32; ++i) EXPECT_EQ(data[i], left * 100.0f + i);

      // A local buffer resolves to "not symmetric": no remote target.
      EXPECT_NE(meshdma_async_remote_copy_start(&dst, &src, send, recv, right),
                0);
      EXPECT_EQ(meshdma_allocate_symmetric(99, 1, shape, &buf),
                static_cast<int>(absl::StatusCode::kInvalidArgument));
      return absl::OkStatus();
    });
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST_F(CApiTest, MeshIdsAndBarrierSemaphore) {
  absl::Status s = rt_->Run(*rt_->MakeMesh1D(), [&]() -> absl::Status {
    absl::Status inner = RunKernel(
        {.name = "c_api_ids", .collective_id = 3}, [&]() -> absl::Status {
          int32_t me = -1, id = -1;
          EXPECT_EQ(meshdma_logical_device_id(&me), 0);
          const int32_t coords[1] = {me};
          EXPECT_EQ(meshdma_mesh_device_id(coords, 1, &id), 0);
          EXPECT_EQ(id, me);
          const int32_t off[1] = {static_cast<int32_t>(n_)};
          EXPECT_NE(meshdma_mesh_device_id(off, 1, &id), 0);
          EXPECT_THAT(meshdma_last_error(),
                      ::testing::HasSubstr("out of range"));
          const int32_t two[2] = {0, 0};
          EXPECT_NE(meshdma_mesh_device_id(two, 2, &id), 0);
          meshdma_semaphore bar;
          EXPECT_EQ(meshdma_get_barrier_semaphore(&bar), 0);
          EXPECT_EQ(bar.type, MESHDMA_SEMAPHORE_BARRIER);
          return absl::OkStatus();
        });
    EXPECT_TRUE(inner.ok()) << inner;
    return RunKernel({.name = "c_api_no_id"}, [&]() -> absl::Status {
      meshdma_semaphore bar;
      EXPECT_NE(meshdma_get_barrier_semaphore(&bar), 0);
      EXPECT_THAT(meshdma_last_error(), ::testing::HasSubstr("collective_id"));
      return absl::OkStatus();
    });
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST_F(CApiTest, Collectives) {
  absl::Status s = rt_->Run(*rt_->MakeMesh1D(), [&]() -> absl::Status {
    int32_t me = -1;
    EXPECT_EQ(meshdma_logical_device_id(&me), 0);
    const int n = n_;
    MESHDMA_ASSIGN_OR_RETURN(auto in, AllocateSymmetric<float>({8}));
    MESHDMA_ASSIGN_OR_RETURN(auto out, AllocateSymmetric<float>({8}));
    MESHDMA_ASSIGN_OR_RETURN(auto gathered, AllocateSymmetric<float>({8 * n}));
    for (int i = 0; i < 8; ++i) in.data_as<float>()[i] = me * 10.0f + i;
    meshdma_view vin = ViewOf(in.data_as<float>(), 8, in.heap_offset());
    meshdma_view vout =
        ViewOf(out.data_as<float>(), 8, MESHDMA_HEAP_OFFSET_RESOLVE);
    meshdma_view vg =
        ViewOf(gathered.data_as<float>(), 8 * n, MESHDMA_HEAP_OFFSET_RESOLVE);

    EXPECT_EQ(meshdma_all_gather(&vin, &vg, "x", 1), 0) << meshdma_last_error();
    for (int d = 0; d < n; ++d)
      for (int i = 0; i < 8; ++i)
        EXPECT_EQ(gathered.data_as<float>()[d * 8 + i], d * 10.0f + i);

    EXPECT_EQ(meshdma_ppermute_shift(&vin, &vout, "x", 1, 1), 0)
        << meshdma_last_error();
    for (int i = 0; i < 8; ++i)
      EXPECT_EQ(out.data_as<float>()[i], ((me + n - 1) % n) * 10.0f + i);

    // Explicit pairs: only 0 -> n-1; everyone else receives zeros.
    const int64_t pairs[2] = {0, n - 1};
    EXPECT_EQ(meshdma_ppermute(&vin, &vout, "x", pairs, 1), 0)
        << meshdma_last_error();
    for (int i = 0; i < 8; ++i)
      EXPECT_EQ(out.data_as<float>()[i], me == n - 1 ? i : 0.0f);

    EXPECT_EQ(meshdma_all_reduce(1, &vin, &vout, "x"), 0);  // max
    for (int i = 0; i < 8; ++i)
      EXPECT_EQ(out.data_as<float>()[i], (n - 1) * 10.0f + i);

    EXPECT_EQ(meshdma_all_reduce(7, &vin, &vout, "x"),
              static_cast<int>(absl::StatusCode::kInvalidArgument));
    // Named with the device, by the collective's own check (one place).
    EXPECT_THAT(
        meshdma_last_error(),
        ::testing::HasSubstr("reduction op (ReduceOp) 7 is not one of"));
    EXPECT_THAT(meshdma_last_error(), ::testing::HasSubstr("on device"));
    EXPECT_EQ(meshdma_reduce_scatter(-1, &vin, &vout, "x"),
              static_cast<int>(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(meshdma_last_error(),
                ::testing::HasSubstr("reduction op (ReduceOp) -1"));
    EXPECT_NE(meshdma_all_gather(&vin, &vg, "nope", 1), 0);
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace meshdma
