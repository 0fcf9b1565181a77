// pallas_call kernels SPMD across processes: every device of the launch (one
// or more per process, under mpirun one per core by default) runs matmul,
// flash attention forward and backward, and paged attention on its own data
// and checks them against the naive references; the matmul results then
// travel one step around the ring by remote DMA and each device checks its
// left neighbour's result.
#include <cmath>
#include <cstdlib>
#include <memory>

#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"
#include "meshdma/kernels/ops/attention_reference.h"
#include "meshdma/kernels/ops/flash_attention.h"
#include "meshdma/kernels/ops/flash_attention_backward.h"
#include "meshdma/kernels/ops/matmul.h"
#include "meshdma/kernels/ops/paged_attention.h"
#include "tests/kernels/kernel_test_util.h"

namespace meshdma {
namespace {

using ::meshdma::testing::MaxAbsDiff;
using ::meshdma::testing::RandomVector;
using ::meshdma::testing::View;

// One runtime for the suite, with the launch's defaults: devices per process
// from the environment or cores / processes (so one device per process is a
// tested case). It is shut down before the test main finalises MPI.
class MpiKernelsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    RuntimeOptions o;
    o.pin_threads = false;
    auto r = Runtime::Create(o);
    ASSERT_TRUE(r.ok()) << r.status();
    runtime_ = std::move(*r);
  }
  static void TearDownTestSuite() {
    if (runtime_ != nullptr) {
      EXPECT_TRUE(runtime_->Shutdown().ok());
    }
    runtime_.reset();
  }
  static absl::Status RunEverywhere(std::function<absl::Status()> fn) {
    if (runtime_ == nullptr) return absl::FailedPreconditionError("no runtime");
    MESHDMA_ASSIGN_OR_RETURN(Mesh mesh, runtime_->MakeMesh1D("x"));
    return runtime_->Run(mesh, std::move(fn));
  }
  static std::unique_ptr<Runtime> runtime_;
};
std::unique_ptr<Runtime> MpiKernelsTest::runtime_;

constexpr int64_t kM = 40, kN = 24, kK = 56;

std::vector<float> NaiveReluMatmul(const std::vector<float>& x,
                                   const std::vector<float>& y) {
  std::vector<float> o(kM * kN);
  for (int64_t i = 0; i < kM; ++i)
    for (int64_t j = 0; j < kN; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < kK; ++p)
        acc += double(x[i * kK + p]) * y[p * kN + j];
      o[i * kN + j] = acc > 0 ? static_cast<float>(acc) : 0.0f;
    }
  return o;
}

TEST_F(MpiKernelsTest, MatmulOnEveryDeviceThenRing) {
  absl::Status s = RunEverywhere([]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
    const int left = (me + n - 1) % n, right = (me + 1) % n;
    auto x = RandomVector(kM * kK, 100 + me), y = RandomVector(kK * kN, 7);
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef out, AllocateSymmetric<float>({kM, kN}));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef recv, AllocateSymmetric<float>({kM, kN}));
    MatmulOptions opts;
    opts.block_m = 16;
    opts.block_n = 16;
    opts.block_k = 16;
    opts.activation = Activation::kRelu;
    MESHDMA_RETURN_IF_ERROR(
        Matmul(View(x, {kM, kK}), View(y, {kK, kN}), out, opts));
    std::vector<float> got(out.data_as<float>(),
                           out.data_as<float>() + kM * kN);
    EXPECT_LT(MaxAbsDiff(got, NaiveReluMatmul(x, y)), 1e-4) << "device " << me;
    // Push the result to the right neighbour; check what came from the left.
    MESHDMA_RETURN_IF_ERROR(
        RunKernel({.name = "ring_matmul_results"}, [&]() -> absl::Status {
          MESHDMA_ASSIGN_OR_RETURN(
              Semaphore send, AllocateSemaphore(SemaphoreType::kDma, "send"));
          MESHDMA_ASSIGN_OR_RETURN(
              Semaphore rcv, AllocateSemaphore(SemaphoreType::kDma, "recv"));
          auto copy = make_async_remote_copy(out, recv, send, rcv, right);
          MESHDMA_RETURN_IF_ERROR(copy.start());
          return copy.wait();
        }));
    std::vector<float> from_left(recv.data_as<float>(),
                                 recv.data_as<float>() + kM * kN);
    EXPECT_LT(MaxAbsDiff(from_left,
                         NaiveReluMatmul(RandomVector(kM * kK, 100 + left), y)),
              1e-4)
        << "device " << me << " from " << left;
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
}

TEST_F(MpiKernelsTest, AttentionOnEveryDevice) {
  absl::Status s = RunEverywhere([]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    const uint32_t seed = 1000 * (me + 1);
    // Flash attention forward and backward, GQA, causal, ragged blocks.
    const int64_t b = 1, h = 4, hkv = 2, sq = 37, skv = 37, d = 16;
    auto q = RandomVector(b * h * sq * d, seed),
         k = RandomVector(b * hkv * skv * d, seed + 1),
         v = RandomVector(b * hkv * skv * d, seed + 2),
         dout = RandomVector(b * h * sq * d, seed + 3);
    std::vector<float> o(q.size()), lse(b * h * sq), dq(q.size()), dk(k.size()),
        dv(v.size());
    FlashAttentionOptions fo;
    fo.block_q = 16;
    fo.block_k = 8;
    fo.causal = true;
    const ArrayRef lse_ref = View(lse, {b, h, sq});
    const std::vector<int64_t> qs = {b, h, sq, d}, ks = {b, hkv, skv, d};
    MESHDMA_RETURN_IF_ERROR(FlashAttention(
        View(q, qs), View(k, ks), View(v, ks), View(o, qs), fo, &lse_ref));
    const float scale = 1.0f / std::sqrt(float(d));
    EXPECT_LT(MaxAbsDiff(o, ReferenceAttention(q, k, v, b, h, hkv, sq, skv, d,
                                               scale, true)),
              2e-5)
        << "device " << me;
    MESHDMA_RETURN_IF_ERROR(FlashAttentionBackward(
        View(q, qs), View(k, ks), View(v, ks), View(o, qs), View(dout, qs),
        lse_ref, View(dq, qs), View(dk, ks), View(dv, ks), fo));
    std::vector<float> rq, rk, rv;
    ReferenceAttentionBackward(q, k, v, dout, b, h, hkv, sq, skv, d, scale,
                               true, &rq, &rk, &rv);
    EXPECT_LT(MaxAbsDiff(dq, rq), 1e-4) << "device " << me;
    EXPECT_LT(MaxAbsDiff(dk, rk), 1e-4) << "device " << me;
    EXPECT_LT(MaxAbsDiff(dv, rv), 1e-4) << "device " << me;
    // Paged attention: 3 sequences over 12 pages of 8 tokens.
    const int64_t seqs = 3, pps = 4, pages = 12, ps = 8;
    std::vector<int32_t> lens = {32, 9, static_cast<int32_t>(1 + me % 31)};
    std::vector<int32_t> tables(seqs * pps);
    for (int64_t i = 0; i < seqs * pps; ++i) tables[i] = (i * 5 + me) % pages;
    auto pq = RandomVector(seqs * h * d, seed + 4),
         kc = RandomVector(hkv * pages * ps * d, seed + 5),
         vc = RandomVector(hkv * pages * ps * d, seed + 6);
    std::vector<float> po(pq.size());
    PagedAttentionOptions po_opts;
    po_opts.pages_per_compute_block = 3;
    MESHDMA_RETURN_IF_ERROR(PagedAttention(
        View(pq, {seqs, h, d}), View(kc, {hkv, pages, ps, d}),
        View(vc, {hkv, pages, ps, d}), View(lens, {seqs}),
        View(tables, {seqs, pps}), View(po, {seqs, h, d}), po_opts));
    EXPECT_LT(MaxAbsDiff(
                  po, ReferencePagedAttention(pq, kc, vc, lens, tables, seqs, h,
                                              hkv, pages, ps, pps, d, scale)),
              2e-5)
        << "device " << me;
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace meshdma
