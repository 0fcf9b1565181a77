// Ring attention, collective matmuls and the KV-cache transfer against
// unsharded references, on every device of the launch (threads, or
// processes under mpirun).
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/all_reduce.h"
#include "meshdma/collectives/fused/collective_matmul.h"
#include "meshdma/collectives/fused/kv_transfer.h"
#include "meshdma/collectives/fused/ring_attention.h"
#include "meshdma/dma/peer_view.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"
#include "meshdma/kernels/blas.h"
#include "meshdma/kernels/ops/attention_reference.h"
#include "meshdma/sharding/shard_map.h"
#include "overlap_test_util.h"

namespace meshdma {
namespace {

using ::meshdma::testing::MaxAbsDiff;
using ::meshdma::testing::RandomVector;
using ::meshdma::testing::TestRuntime;

// [H, S, D] rows permuted along S: out[h][r] = in[h][order[r]].
std::vector<float> PermuteRows(const std::vector<float>& in, int64_t h,
                               int64_t s, int64_t d,
                               const std::vector<int64_t>& order,
                               bool inverse) {
  std::vector<float> out(in.size());
  for (int64_t hh = 0; hh < h; ++hh) {
    for (int64_t r = 0; r < s; ++r) {
      const int64_t from = inverse ? r : order[r];
      const int64_t to = inverse ? order[r] : r;
      std::copy_n(&in[(hh * s + from) * d], d, &out[(hh * s + to) * d]);
    }
  }
  return out;
}

// The transfers the launch can run: kDma everywhere, and kPeerRead where the
// kernel's members can read one another's `inputs` (threads of one process)
// or symmetric memory (one host); kAuto picks one of the two.
bool PeerReadRuns(bool inputs) {
  Runtime& rt = TestRuntime();
  bool all = true;
  absl::Status s = rt.Run(*rt.MakeMesh1D("x"), [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
    for (int j = 0; j < n; ++j) {
      MESHDMA_ASSIGN_OR_RETURN(
          bool yes,
          inputs
              ? peer_shares_address_space(DeviceId(j), DeviceIdType::kLogical)
              : peer_view_reaches(DeviceId(j), DeviceIdType::kLogical));
      if (!yes) all = false;  // Every device writes the same answer.
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  return all;
}

struct RingCase {
  bool causal;
  SequenceLayout layout;
  int64_t kv_heads;
  OverlapMode mode;
  FusedTransfer transfer = FusedTransfer::kAuto;
};

class RingAttentionTest : public ::testing::TestWithParam<RingCase> {};

TEST_P(RingAttentionTest, MatchesFullAttention) {
  const RingCase c = GetParam();
  if (c.transfer == FusedTransfer::kPeerRead && !PeerReadRuns(true)) {
    GTEST_SKIP() << "the members are not threads of one process";
  }
  Runtime& rt = TestRuntime();
  const Mesh mesh = *rt.MakeMesh1D("x");
  const int n = mesh.size();
  const int64_t h = 4, d = 16, s = 24 * n;
  const int64_t hkv = c.kv_heads;
  std::vector<float> q = RandomVector(h * s * d, 11);
  std::vector<float> k = RandomVector(hkv * s * d, 12);
  std::vector<float> v = RandomVector(hkv * s * d, 13);
  const float scale = 1.0f / std::sqrt(float(d));
  std::vector<float> want_lse;
  std::vector<float> want = ReferenceAttention(q, k, v, 1, h, hkv, s, s, d,
                                               scale, c.causal, &want_lse);
  // Lay the sequence out for the ring (zig-zag permutes the rows first).
  std::vector<int64_t> order(s);
  for (int64_t i = 0; i < s; ++i) order[i] = i;
  if (c.layout == SequenceLayout::kZigZag) order = ZigZagOrder(s, n);
  std::vector<float> qp = PermuteRows(q, h, s, d, order, false);
  std::vector<float> kp = PermuteRows(k, hkv, s, d, order, false);
  std::vector<float> vp = PermuteRows(v, hkv, s, d, order, false);
  const PartitionSpec seq{{}, {"x"}, {}};
  auto qs = ShardedArray::FromHost(rt, mesh, seq, qp, {h, s, d});
  auto ks = ShardedArray::FromHost(rt, mesh, seq, kp, {hkv, s, d});
  auto vs = ShardedArray::FromHost(rt, mesh, seq, vp, {hkv, s, d});
  ASSERT_TRUE(qs.ok() && ks.ok() && vs.ok());
  std::vector<int64_t> products(mesh.size(), -1);
  auto f = shard_map(
      [&](std::span<const ArrayRef> in,
          std::span<const ArrayRef> out) -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
        return RingAttention(in[0], in[1], in[2], out[0],
                             {.causal = c.causal,
                              .layout = c.layout,
                              .block_q = 6,
                              .block_k = 6,
                              .mode = c.mode,
                              .transfer = c.transfer,
                              .products = &products[me]},
                             &out[1]);
      },
      mesh, {seq, seq, seq}, {seq, PartitionSpec{{}, {"x"}}});
  const ShardedArray args[] = {*qs, *ks, *vs};
  const ShapeDtype outs_shape[] = {{DType::kF32, {h, s, d}},
                                   {DType::kF32, {h, s}}};
  auto outs = f(rt, args, outs_shape);
  ASSERT_TRUE(outs.ok()) << outs.status();
  std::vector<float> got =
      PermuteRows(*(*outs)[0].ToHost<float>(), h, s, d, order, true);
  std::vector<float> got_lse =
      PermuteRows(*(*outs)[1].ToHost<float>(), h, s, 1, order, true);
  EXPECT_LT(MaxAbsDiff(got, want), 2e-5);
  EXPECT_LT(MaxAbsDiff(got_lse, want_lse), 2e-5);
  // Load balance: with zig-zag every device computes the same number of
  // block products; contiguous causal does not.
  std::vector<int64_t> local;
  for (int l : (*outs)[0].local_devices()) local.push_back(products[l]);
  if (c.causal && c.layout == SequenceLayout::kZigZag) {
    for (int64_t p : local) EXPECT_EQ(p, local[0]);
  }
  if (c.causal && c.layout == SequenceLayout::kContiguous && local.size() > 1) {
    EXPECT_LT(local.front(), local.back());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RingAttentionTest,
    ::testing::Values(
        RingCase{false, SequenceLayout::kContiguous, 4,
                 OverlapMode::kOverlapped},
        RingCase{true, SequenceLayout::kContiguous, 4,
                 OverlapMode::kOverlapped},
        RingCase{true, SequenceLayout::kZigZag, 4, OverlapMode::kOverlapped},
        RingCase{true, SequenceLayout::kZigZag, 1, OverlapMode::kOverlapped},
        RingCase{false, SequenceLayout::kZigZag, 2, OverlapMode::kSequential},
        RingCase{true, SequenceLayout::kZigZag, 4, OverlapMode::kSequential},
        RingCase{true, SequenceLayout::kZigZag, 2, OverlapMode::kOverlapped,
                 FusedTransfer::kDma},
        RingCase{false, SequenceLayout::kContiguous, 4,
                 OverlapMode::kOverlapped, FusedTransfer::kPeerRead},
        RingCase{true, SequenceLayout::kZigZag, 2, OverlapMode::kOverlapped,
                 FusedTransfer::kPeerRead},
        RingCase{true, SequenceLayout::kZigZag, 4, OverlapMode::kSequential,
                 FusedTransfer::kPeerRead}));

TEST(RingAttention, BadShapesNameTheOperand) {
  Runtime& rt = TestRuntime();
  absl::Status s = rt.Run(*rt.MakeMesh1D("x"), [&]() -> absl::Status {
    std::vector<float> q(2 * 8 * 4), k(3 * 8 * 4), o(2 * 8 * 4);
    auto qr = *ArrayRef::FromPointer(q.data(), DType::kF32,
                                     std::vector<int64_t>{2, 8, 4});
    auto kr = *ArrayRef::FromPointer(k.data(), DType::kF32,
                                     std::vector<int64_t>{3, 8, 4});
    auto orf = *ArrayRef::FromPointer(o.data(), DType::kF32,
                                      std::vector<int64_t>{2, 8, 4});
    absl::Status st = RingAttention(qr, kr, kr, orf);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(std::string(st.message()).find("'k'"), std::string::npos) << st;
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

// An OverlapMode or SequenceLayout outside its enum is an error naming the
// value, in every fused kernel, before anything moves.
TEST(FusedKernels, EnumsOutsideTheEnum) {
  Runtime& rt = TestRuntime();
  absl::Status s = rt.Run(*rt.MakeMesh1D("x"), [&]() -> absl::Status {
    std::vector<float> q(2 * 8 * 4), o(2 * 8 * 4), x(8 * 8), w(8 * 8);
    auto qr = *ArrayRef::FromPointer(q.data(), DType::kF32,
                                     std::vector<int64_t>{2, 8, 4});
    auto orf = *ArrayRef::FromPointer(o.data(), DType::kF32,
                                      std::vector<int64_t>{2, 8, 4});
    auto xr = *ArrayRef::FromPointer(x.data(), DType::kF32,
                                     std::vector<int64_t>{8, 8});
    auto wr = *ArrayRef::FromPointer(w.data(), DType::kF32,
                                     std::vector<int64_t>{8, 8});
    const auto bad_mode = static_cast<OverlapMode>(11);
    auto expect = [](const absl::Status& st, const std::string& needle) {
      EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
      EXPECT_NE(std::string(st.message()).find(needle), std::string::npos)
          << st;
    };
    expect(RingAttention(qr, qr, qr, orf, {.mode = bad_mode}),
           "options.mode (OverlapMode) 11 is not one of");
    expect(RingAttention(qr, qr, qr, orf,
                         {.layout = static_cast<SequenceLayout>(3)}),
           "options.layout (SequenceLayout) 3 is not one of");
    expect(AllGatherMatmul(xr, wr, xr, {.mode = bad_mode}),
           "kernel 'all_gather_matmul': options.mode (OverlapMode) 11");
    expect(MatmulReduceScatter(xr, wr, xr, {.mode = bad_mode}),
           "kernel 'matmul_reduce_scatter': options.mode (OverlapMode) 11");
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

struct MatmulCase {
  OverlapMode mode;
  FusedTransfer transfer;
  CollectiveMatmulSchedule schedule = CollectiveMatmulSchedule::kRing;
};

std::string MatmulCaseName(const ::testing::TestParamInfo<MatmulCase>& info) {
  const absl::string_view schedule =
      CollectiveMatmulScheduleName(info.param.schedule);
  return absl::StrCat(
      info.param.mode == OverlapMode::kOverlapped ? "Overlapped" : "Sequential",
      FusedTransferName(info.param.transfer) == "dma"    ? "Dma"
      : FusedTransferName(info.param.transfer) == "auto" ? "Auto"
                                                         : "PeerRead",
      schedule == "ring"   ? "Ring"
      : schedule == "auto" ? "AutoSchedule"
                           : "OneProduct");
}

// kOneProduct runs where every member's symmetric memory is reachable (one
// host, checked mode off); kAuto picks it there for the tests' shapes.
bool SkipOneProduct(const MatmulCase& mc) {
  return mc.schedule == CollectiveMatmulSchedule::kOneProduct &&
         !PeerReadRuns(false);
}

class CollectiveMatmulTest : public ::testing::TestWithParam<MatmulCase> {};

TEST_P(CollectiveMatmulTest, AllGatherMatmulMatchesUnsharded) {
  Runtime& rt = TestRuntime();
  const Mesh mesh = *rt.MakeMesh1D("x");
  const int n = mesh.size();
  const int64_t m = 6 * n, k = 20, c = 12;
  std::vector<float> x = RandomVector(m * k, 21), w = RandomVector(k * c, 22);
  std::vector<float> want(m * c);
  GemmNaive(false, false, m, c, k, 1.0f, x.data(), k, w.data(), c, 0.0f,
            want.data(), c);
  auto xs = ShardedArray::FromHost(rt, mesh, PartitionSpec{{"x"}}, x, {m, k});
  auto ws = ShardedArray::FromHost(rt, mesh, PartitionSpec{}, w, {k, c});
  const MatmulCase mc = GetParam();
  if (mc.transfer == FusedTransfer::kPeerRead &&
      mc.schedule == CollectiveMatmulSchedule::kRing && !PeerReadRuns(true)) {
    GTEST_SKIP() << "the members are not threads of one process";
  }
  if (SkipOneProduct(mc)) GTEST_SKIP() << "the members are not on one host";
  auto f = shard_map(
      [&](std::span<const ArrayRef> in, std::span<const ArrayRef> out) {
        return AllGatherMatmul(in[0], in[1], out[0],
                               {.mode = mc.mode,
                                .transfer = mc.transfer,
                                .schedule = mc.schedule});
      },
      mesh, {PartitionSpec{{"x"}}, PartitionSpec{}}, {PartitionSpec{}},
      {.check_replication = true});
  const ShardedArray args[] = {*xs, *ws};
  const ShapeDtype out_shape[] = {{DType::kF32, {m, c}}};
  auto outs = f(rt, args, out_shape);
  ASSERT_TRUE(outs.ok()) << outs.status();
  EXPECT_LT(MaxAbsDiff(*(*outs)[0].ToHost<float>(), want), 1e-4);
}

TEST_P(CollectiveMatmulTest, MatmulReduceScatterMatchesUnsharded) {
  Runtime& rt = TestRuntime();
  const Mesh mesh = *rt.MakeMesh1D("x");
  const int n = mesh.size();
  const int64_t m = 4 * n, k = 8 * n, c = 10;
  std::vector<float> x = RandomVector(m * k, 31), w = RandomVector(k * c, 32);
  std::vector<float> want(m * c);
  GemmNaive(false, false, m, c, k, 1.0f, x.data(), k, w.data(), c, 0.0f,
            want.data(), c);
  auto xs =
      ShardedArray::FromHost(rt, mesh, PartitionSpec{{}, {"x"}}, x, {m, k});
  auto ws = ShardedArray::FromHost(rt, mesh, PartitionSpec{{"x"}}, w, {k, c});
  const MatmulCase mc = GetParam();
  if (mc.transfer == FusedTransfer::kPeerRead && !PeerReadRuns(false)) {
    GTEST_SKIP() << "the members are not on one host (or checked mode is on)";
  }
  if (SkipOneProduct(mc)) GTEST_SKIP() << "the members are not on one host";
  auto f = shard_map(
      [&](std::span<const ArrayRef> in, std::span<const ArrayRef> out) {
        return MatmulReduceScatter(in[0], in[1], out[0],
                                   {.mode = mc.mode,
                                    .transfer = mc.transfer,
                                    .schedule = mc.schedule});
      },
      mesh, {PartitionSpec{{}, {"x"}}, PartitionSpec{{"x"}}},
      {PartitionSpec{{"x"}}});
  const ShardedArray args[] = {*xs, *ws};
  const ShapeDtype out_shape[] = {{DType::kF32, {m, c}}};
  auto outs = f(rt, args, out_shape);
  ASSERT_TRUE(outs.ok()) << outs.status();
  EXPECT_LT(MaxAbsDiff(*(*outs)[0].ToHost<float>(), want), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, CollectiveMatmulTest,
    ::testing::Values(
        MatmulCase{OverlapMode::kOverlapped, FusedTransfer::kAuto},
        MatmulCase{OverlapMode::kOverlapped, FusedTransfer::kDma},
        MatmulCase{OverlapMode::kOverlapped, FusedTransfer::kPeerRead},
        MatmulCase{OverlapMode::kSequential, FusedTransfer::kDma},
        MatmulCase{OverlapMode::kSequential, FusedTransfer::kPeerRead},
        MatmulCase{OverlapMode::kOverlapped, FusedTransfer::kAuto,
                   CollectiveMatmulSchedule::kAuto},
        MatmulCase{OverlapMode::kOverlapped, FusedTransfer::kAuto,
                   CollectiveMatmulSchedule::kOneProduct},
        MatmulCase{OverlapMode::kSequential, FusedTransfer::kPeerRead,
                   CollectiveMatmulSchedule::kOneProduct}),
    MatmulCaseName);

// All-gather matmul in the modes that do not compute the result: the
// compute-only mode multiplies local data only, the communication-only mode
// computes nothing (out keeps what it held). Both schedules, where
// kOneProduct runs.
TEST(CollectiveMatmulModes,
     ComputeOnlyIsLocalCommunicationOnlyComputesNothing) {
  Runtime& rt = TestRuntime();
  const Mesh mesh = *rt.MakeMesh1D("x");
  const int n = mesh.size();
  if (n < 2) GTEST_SKIP() << "needs a peer";
  for (CollectiveMatmulSchedule schedule :
       {CollectiveMatmulSchedule::kRing,
        CollectiveMatmulSchedule::kOneProduct}) {
    if (schedule == CollectiveMatmulSchedule::kOneProduct &&
        !PeerReadRuns(false)) {
      continue;
    }
    SCOPED_TRACE(CollectiveMatmulScheduleName(schedule));
    absl::Status s = rt.Run(mesh, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
      const int64_t mb = 4, k = 6, c = 5;
      std::vector<float> x(mb * k, 1.0f + me), w(k * c, 1.0f);
      std::vector<float> out(n * mb * c, -7.0f);
      auto view = [](std::vector<float>& v, std::vector<int64_t> shape) {
        return *ArrayRef::FromPointer(v.data(), DType::kF32, shape);
      };
      const CollectiveMatmulOptions comm{
          .mode = OverlapMode::kCommunicationOnly, .schedule = schedule};
      MESHDMA_RETURN_IF_ERROR(AllGatherMatmul(view(x, {mb, k}), view(w, {k, c}),
                                              view(out, {n * mb, c}), comm));
      for (float v : out) EXPECT_EQ(v, -7.0f);
      MESHDMA_RETURN_IF_ERROR(AllGatherMatmul(
          view(x, {mb, k}), view(w, {k, c}), view(out, {n * mb, c}),
          {.mode = OverlapMode::kComputeOnly, .schedule = schedule}));
      // The ring multiplies my own block into every rows block (k * (1 +
      // me) each); one product multiplies the gathered x, zero without the
      // gather. No row holds a peer's block (k * (1 + j), j != me).
      const float want = schedule == CollectiveMatmulSchedule::kRing
                             ? static_cast<float>(k * (1 + me))
                             : 0.0f;
      for (int64_t i = 0; i < n * mb * c; ++i) {
        EXPECT_EQ(out[i], want) << "element " << i;
      }
      return absl::OkStatus();
    });
    EXPECT_TRUE(s.ok()) << s;
  }
}

// A schedule outside the enum, one product with the DMA transfer, one
// product where a member cannot be reached, and one product, or kAuto, over
// members whose shapes differ are errors naming the kernel (and the
// member), on every device, before anything moves.
TEST(CollectiveMatmulModes, ScheduleErrorsNameTheKernel) {
  Runtime& rt = TestRuntime();
  const bool reachable = PeerReadRuns(false);
  absl::Status s = rt.Run(*rt.MakeMesh1D("x"), [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
    std::vector<float> x(2 * 8), w(8 * 8), out(2 * n * 8);
    auto xr = *ArrayRef::FromPointer(x.data(), DType::kF32,
                                     std::vector<int64_t>{2, 8});
    auto wr = *ArrayRef::FromPointer(w.data(), DType::kF32,
                                     std::vector<int64_t>{8, 8});
    auto outr = *ArrayRef::FromPointer(out.data(), DType::kF32,
                                       std::vector<int64_t>{2 * n, 8});
    absl::Status st = AllGatherMatmul(
        xr, wr, outr, {.schedule = static_cast<CollectiveMatmulSchedule>(5)});
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(std::string(st.message())
                  .find("kernel 'all_gather_matmul': options.schedule "
                        "(CollectiveMatmulSchedule) 5 is not one of"),
              std::string::npos)
        << st;
    if (n < 2) return absl::OkStatus();
    st = AllGatherMatmul(xr, wr, outr,
                         {.transfer = FusedTransfer::kDma,
                          .schedule = CollectiveMatmulSchedule::kOneProduct});
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(std::string(st.message()).find("but the transfer is dma"),
              std::string::npos)
        << st;
    if (reachable) {
      // Members whose shapes differ would allocate different buffers.
      MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
      auto x1 = *ArrayRef::FromPointer(
          x.data(), DType::kF32, std::vector<int64_t>{me == 0 ? 1 : 2, 8});
      auto out1 = *ArrayRef::FromPointer(
          out.data(), DType::kF32, std::vector<int64_t>{x1.dim(0) * n, 8});
      st = AllGatherMatmul(x1, wr, out1,
                           {.schedule = CollectiveMatmulSchedule::kOneProduct});
      EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
      EXPECT_NE(std::string(st.message())
                    .find(me == 0 ? "of member 1" : "of member 0"),
                std::string::npos)
          << st;
      // kAuto over shapes on both sides of its test (n_out >= m/n: one
      // product on member 0, the ring elsewhere) would enter different
      // kernels.
      const int64_t n_out = me == 0 ? 2 : 1;
      auto w2 = *ArrayRef::FromPointer(w.data(), DType::kF32,
                                       std::vector<int64_t>{8, n_out});
      auto out2 = *ArrayRef::FromPointer(out.data(), DType::kF32,
                                         std::vector<int64_t>{2 * n, n_out});
      st = AllGatherMatmul(xr, w2, out2,
                           {.schedule = CollectiveMatmulSchedule::kAuto});
      EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
      EXPECT_NE(
          std::string(st.message())
              .find(me == 0 ? "schedule kAuto is ring on member 1"
                            : "schedule kAuto is one_product on member 0"),
          std::string::npos)
          << st;
    } else {
      st = MatmulReduceScatter(
          outr, wr, xr, {.schedule = CollectiveMatmulSchedule::kOneProduct});
      EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
      EXPECT_NE(
          std::string(st.message()).find("kernel 'matmul_reduce_scatter' on "),
          std::string::npos)
          << st;
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

// Reading in place where a member cannot be read is an error naming the
// kernel and the member, on every device, before anything moves (checked
// mode, and processes under mpirun, whose inputs are private).
TEST(FusedTransfers, PeerReadWhereUnreachableNamesTheMember) {
  if (PeerReadRuns(true)) GTEST_SKIP() << "every member's inputs are readable";
  Runtime& rt = TestRuntime();
  absl::Status s = rt.Run(*rt.MakeMesh1D("x"), [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
    std::vector<float> x(4 * 8), w(8 * 4), out(4 * n * 4);
    auto xr = *ArrayRef::FromPointer(x.data(), DType::kF32,
                                     std::vector<int64_t>{4, 8});
    auto wr = *ArrayRef::FromPointer(w.data(), DType::kF32,
                                     std::vector<int64_t>{8, 4});
    auto outr = *ArrayRef::FromPointer(out.data(), DType::kF32,
                                       std::vector<int64_t>{4 * n, 4});
    absl::Status st =
        AllGatherMatmul(xr, wr, outr, {.transfer = FusedTransfer::kPeerRead});
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
    EXPECT_NE(std::string(st.message()).find("transfer peer_read, but member"),
              std::string::npos)
        << st;
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

// Inputs in the symmetric heap are read in place by members of other
// processes on the same host too (kPeerRead succeeds under mpirun); where
// only some members keep x there, kAuto agrees on the DMA ring instead, on
// every member. Each checked against the unsharded product.
TEST(FusedTransfers, SymmetricInputsAreReadInPlaceAcrossProcesses) {
  if (!PeerReadRuns(false)) GTEST_SKIP() << "needs members on one host";
  Runtime& rt = TestRuntime();
  const int64_t mb = 5, k = 12, c = 7;
  const std::vector<float> w = RandomVector(k * c, 42);
  struct Case {
    FusedTransfer transfer;
    OverlapMode mode;
    bool odd_members_private;
  };
  const Case cases[] = {
      {FusedTransfer::kPeerRead, OverlapMode::kOverlapped, false},
      {FusedTransfer::kPeerRead, OverlapMode::kSequential, false},
      {FusedTransfer::kAuto, OverlapMode::kOverlapped, false},
      {FusedTransfer::kAuto, OverlapMode::kOverlapped, true}};
  for (const Case& tc : cases) {
    SCOPED_TRACE(absl::StrCat(FusedTransferName(tc.transfer), " ",
                              tc.odd_members_private ? "mixed" : "symmetric"));
    absl::Status st = rt.Run(*rt.MakeMesh1D("x"), [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(const int n, axis_size("x"));
      MESHDMA_ASSIGN_OR_RETURN(const int me, logical_device_id());
      // Step 1: x rows block `me` (symmetric, or private on odd members).
      std::vector<float> private_x(mb * k);
      MESHDMA_ASSIGN_OR_RETURN(ArrayRef x, AllocateSymmetric<float>({mb, k}));
      if (tc.odd_members_private && me % 2 == 1) {
        MESHDMA_ASSIGN_OR_RETURN(
            x, ArrayRef::FromPointer(private_x.data(), DType::kF32,
                                     std::vector<int64_t>{mb, k}));
      }
      const std::vector<float> all_x = RandomVector(n * mb * k, 43);
      std::copy_n(&all_x[me * mb * k], mb * k, x.data_as<float>());
      // Step 2: the kernel, against the unsharded product.
      std::vector<float> got(n * mb * c), want(n * mb * c);
      auto wr = *ArrayRef::FromPointer(const_cast<float*>(w.data()),
                                       DType::kF32, std::vector<int64_t>{k, c});
      auto outr = *ArrayRef::FromPointer(got.data(), DType::kF32,
                                         std::vector<int64_t>{n * mb, c});
      MESHDMA_RETURN_IF_ERROR(AllGatherMatmul(
          x, wr, outr, {.mode = tc.mode, .transfer = tc.transfer}));
      GemmNaive(false, false, n * mb, c, k, 1.0f, all_x.data(), k, w.data(), c,
                0.0f, want.data(), c);
      EXPECT_LT(MaxAbsDiff(got, want), 1e-4) << "device " << me;
      return absl::OkStatus();
    });
    EXPECT_TRUE(st.ok()) << st;
  }
}

// Ring attention reads symmetric k and v in place as well: each member's
// rows of the output against full attention over the whole sequence.
TEST(FusedTransfers, RingAttentionReadsSymmetricKeysInPlace) {
  if (!PeerReadRuns(false)) GTEST_SKIP() << "needs members on one host";
  Runtime& rt = TestRuntime();
  const int64_t h = 2, d = 8, sl = 6;
  absl::Status st = rt.Run(*rt.MakeMesh1D("x"), [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(const int n, axis_size("x"));
    MESHDMA_ASSIGN_OR_RETURN(const int me, logical_device_id());
    const int64_t s = sl * n;
    const std::vector<float> q = RandomVector(h * s * d, 51);
    const std::vector<float> k = RandomVector(h * s * d, 52);
    const std::vector<float> v = RandomVector(h * s * d, 53);
    const float scale = 1.0f / std::sqrt(float(d));
    const std::vector<float> want =
        ReferenceAttention(q, k, v, 1, h, h, s, s, d, scale, false, nullptr);
    // Step 1: my rows of q (private), k and v (symmetric).
    std::vector<float> my_q(h * sl * d), out(h * sl * d);
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef kr, AllocateSymmetric<float>({h, sl, d}));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef vr, AllocateSymmetric<float>({h, sl, d}));
    for (int64_t hh = 0; hh < h; ++hh) {
      const int64_t from = (hh * s + me * sl) * d, to = hh * sl * d;
      std::copy_n(&q[from], sl * d, &my_q[to]);
      std::copy_n(&k[from], sl * d, kr.data_as<float>() + to);
      std::copy_n(&v[from], sl * d, vr.data_as<float>() + to);
    }
    const std::vector<int64_t> shape = {h, sl, d};
    auto qr = *ArrayRef::FromPointer(my_q.data(), DType::kF32, shape);
    auto outr = *ArrayRef::FromPointer(out.data(), DType::kF32, shape);
    // Step 2: the ring, reading in place, against my rows of the whole.
    MESHDMA_RETURN_IF_ERROR(RingAttention(
        qr, kr, vr, outr, {.transfer = FusedTransfer::kPeerRead}));
    std::vector<float> mine(h * sl * d);
    for (int64_t hh = 0; hh < h; ++hh) {
      std::copy_n(&want[(hh * s + me * sl) * d], sl * d, &mine[hh * sl * d]);
    }
    EXPECT_LT(MaxAbsDiff(out, mine), 2e-5) << "device " << me;
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << st;
}

// Members that read each other's inputs in place check that every member's
// input has their size: a member with more rows of x is an error on every
// device, naming the member, instead of reads past a peer's block.
TEST(FusedTransfers, PeerReadOfInputsOfAnotherSizeNamesTheMember) {
  if (!PeerReadRuns(true)) GTEST_SKIP() << "needs threads of one process";
  Runtime& rt = TestRuntime();
  if (rt.num_devices() < 2) GTEST_SKIP() << "needs a peer";
  absl::Status s = rt.Run(*rt.MakeMesh1D("x"), [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
    MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
    const int64_t rows = me == 0 ? 3 : 2;  // Device 0 disagrees.
    std::vector<float> x(rows * 8), w(8 * 4), out(rows * n * 4);
    auto xr = *ArrayRef::FromPointer(x.data(), DType::kF32,
                                     std::vector<int64_t>{rows, 8});
    auto wr = *ArrayRef::FromPointer(w.data(), DType::kF32,
                                     std::vector<int64_t>{8, 4});
    auto outr = *ArrayRef::FromPointer(out.data(), DType::kF32,
                                       std::vector<int64_t>{rows * n, 4});
    absl::Status st =
        AllGatherMatmul(xr, wr, outr, {.transfer = FusedTransfer::kPeerRead});
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(
        std::string(st.message()).find(me == 0 ? "of member 1" : "of member 0"),
        std::string::npos)
        << st;
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

// Synthetic per-layer keys and values, a function of (layer, pair, ...), so
// the reference can recompute them.
float KvValue(int layer, int pair, int kv, int64_t h, int64_t t, int64_t c) {
  const uint32_t x = static_cast<uint32_t>(
      ((((layer * 7 + pair) * 3 + kv) * 31 + h) * 4093 + t) * 131 + c);
  return static_cast<float>((x * 2654435761u) >> 8) / float(1 << 24) - 0.5f;
}

// Prefill of prompt `tag`: layer l's keys and values ([hkv, seq, d] each)
// numbered in element order.
PrefillLayerFn PromptPrefill(int tag) {
  return [tag](int l, const ArrayRef& k, const ArrayRef& v) {
    for (int kv = 0; kv < 2; ++kv) {
      const ArrayRef& out = kv == 0 ? k : v;
      float* dst = out.data_as<float>();
      for (int64_t i = 0; i < out.num_elements(); ++i)
        dst[i] = KvValue(l, tag, kv, 0, 0, i);
    }
    return absl::OkStatus();
  };
}

// Elements of layer l of prompt `tag` (PromptPrefill) that its block table
// does not find in the layer's key and value caches ([hkv, total_pages,
// ps, d] each).
int64_t PromptRowsWrong(int l, int tag, const std::vector<int32_t>& table,
                        int64_t hkv, int64_t seq, int64_t d, int64_t ps,
                        int64_t total_pages, const float* key_cache,
                        const float* value_cache) {
  int64_t wrong = 0;
  for (int kv = 0; kv < 2; ++kv) {
    const float* c = kv == 0 ? key_cache : value_cache;
    for (int64_t hh = 0; hh < hkv; ++hh)
      for (int64_t t = 0; t < seq; ++t)
        for (int64_t i = 0; i < d; ++i) {
          const int64_t at =
              ((hh * total_pages + table[t / ps]) * ps + t % ps) * d + i;
          wrong += c[at] != KvValue(l, tag, kv, 0, 0, (hh * seq + t) * d + i);
        }
  }
  return wrong;
}

// Block tables of 4 pages into a cache of 9: scattered in reverse (one DMA
// per page), one run of consecutive pages ending in the prompt's partial
// page, and a run of three then a lone partial page.
struct KvTable {
  const char* name;
  std::vector<int32_t> pages;
};
void PrintTo(const KvTable& table, std::ostream* os) { *os << table.name; }

class KvTransferTest : public ::testing::TestWithParam<KvTable> {};

TEST_P(KvTransferTest, DecodeSeesThePrefillCache) {
  Runtime& rt = TestRuntime();
  if (rt.num_devices() % 2 != 0) GTEST_SKIP() << "needs an even mesh";
  const int pairs = rt.num_devices() / 2;
  const Mesh mesh = *rt.MakeMesh({{"stage", 2}, {"x", pairs}});
  const int layers = 3;
  const int64_t hkv = 2, h = 4, d = 8, ps = 4, seq = 13, total_pages = 9;
  const int64_t pages = (seq + ps - 1) / ps;
  const std::vector<int32_t>& table = GetParam().pages;
  ASSERT_EQ(static_cast<int64_t>(table.size()), pages);
  const float scale = 1.0f / std::sqrt(float(d));
  std::vector<std::vector<float>> got(mesh.size());
  std::vector<int64_t> wrong(mesh.size(), 0), checked(mesh.size(), 0);
  absl::Status s = rt.Run(mesh, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int pair, axis_index("x"));
    MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
    KvTransferOptions o{.num_layers = layers,
                        .num_kv_heads = hkv,
                        .head_dim = d,
                        .page_size = ps,
                        .total_pages = total_pages};
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef cache, AllocateKvCache(o));
    return KvTransfer(
        seq, table, cache, o,
        [&](int l, const ArrayRef& k, const ArrayRef& v) {
          for (int kv = 0; kv < 2; ++kv) {
            float* dst = (kv == 0 ? k : v).data_as<float>();
            for (int64_t hh = 0; hh < hkv; ++hh)
              for (int64_t t = 0; t < seq; ++t)
                for (int64_t c = 0; c < d; ++c)
                  dst[(hh * seq + t) * d + c] = KvValue(l, pair, kv, hh, t, c);
          }
          return absl::OkStatus();
        },
        [&](int l, const ArrayRef& kc, const ArrayRef& vc) -> absl::Status {
          // Every prompt token's row, in the page the table names.
          for (int kv = 0; kv < 2; ++kv) {
            const float* cache = (kv == 0 ? kc : vc).data_as<float>();
            for (int64_t hh = 0; hh < hkv; ++hh)
              for (int64_t t = 0; t < seq; ++t)
                for (int64_t c = 0; c < d; ++c) {
                  const int64_t at =
                      ((hh * total_pages + table[t / ps]) * ps + t % ps) * d +
                      c;
                  wrong[me] += cache[at] != KvValue(l, pair, kv, hh, t, c);
                  ++checked[me];
                }
          }
          std::vector<float> q = RandomVector(h * d, 100 + l);
          MESHDMA_ASSIGN_OR_RETURN(
              auto o,
              DecodePagedAttention(q.data(), h, kc, vc, seq, table, scale));
          got[me].insert(got[me].end(), o.begin(), o.end());
          return absl::OkStatus();
        });
  });
  ASSERT_TRUE(s.ok()) << s;
  for (int me = 0; me < mesh.size(); ++me) {
    const auto coords = *mesh.Coords(me);
    if (coords[0] != 1 || got[me].empty()) continue;  // Local decode devices.
    const int pair = coords[1];
    EXPECT_EQ(checked[me], layers * 2 * hkv * seq * d)
        << "decode device " << me;
    EXPECT_EQ(wrong[me], 0) << "decode device " << me;
    std::vector<float> want;
    for (int l = 0; l < layers; ++l) {
      std::vector<float> q = RandomVector(h * d, 100 + l);
      std::vector<float> k(hkv * seq * d), v(hkv * seq * d);
      for (int64_t hh = 0; hh < hkv; ++hh)
        for (int64_t t = 0; t < seq; ++t)
          for (int64_t c = 0; c < d; ++c) {
            k[(hh * seq + t) * d + c] = KvValue(l, pair, 0, hh, t, c);
            v[(hh * seq + t) * d + c] = KvValue(l, pair, 1, hh, t, c);
          }
      auto o = ReferenceAttention(q, k, v, 1, h, hkv, 1, seq, d, scale, false);
      want.insert(want.end(), o.begin(), o.end());
    }
    EXPECT_LT(MaxAbsDiff(got[me], want), 1e-5) << "decode device " << me;
  }
}

// The cache belongs to the caller: a second prompt into other pages leaves
// the first prompt's pages as they were, and both are there after the
// transfers return.
TEST(KvTransferCacheTest, OutlivesTheTransfer) {
  Runtime& rt = TestRuntime();
  if (rt.num_devices() % 2 != 0) GTEST_SKIP() << "needs an even mesh";
  const Mesh mesh = *rt.MakeMesh({{"stage", 2}, {"x", rt.num_devices() / 2}});
  const int64_t hkv = 2, d = 8, ps = 4, seq = 7;
  const KvTransferOptions o{.num_layers = 2,
                            .num_kv_heads = hkv,
                            .head_dim = d,
                            .page_size = ps,
                            .total_pages = 5};
  // Two prompts of 2 pages each, in disjoint pages of one cache.
  const std::vector<int32_t> tables[2] = {{4, 1}, {0, 3}};
  std::vector<int64_t> wrong(mesh.size(), -1);
  absl::Status s = rt.Run(mesh, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int pair, axis_index("x"));
    MESHDMA_ASSIGN_OR_RETURN(int role, axis_index("stage"));
    MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef cache, AllocateKvCache(o));
    for (int prompt = 0; prompt < 2; ++prompt) {
      MESHDMA_RETURN_IF_ERROR(KvTransfer(
          seq, tables[prompt], cache, o, PromptPrefill(10 * prompt + pair),
          [](int, const ArrayRef&, const ArrayRef&) {
            return absl::OkStatus();
          }));
    }
    if (role != 1) return absl::OkStatus();
    // Every row of both prompts, read after both transfers have returned.
    const int64_t layer_elems = 2 * hkv * o.total_pages * ps * d;
    const float* c = cache.data_as<float>();
    wrong[me] = 0;
    for (int prompt = 0; prompt < 2; ++prompt)
      for (int l = 0; l < o.num_layers; ++l) {
        const float* layer = c + l * layer_elems;
        wrong[me] +=
            PromptRowsWrong(l, 10 * prompt + pair, tables[prompt], hkv, seq, d,
                            ps, o.total_pages, layer, layer + layer_elems / 2);
      }
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  for (int me = 0; me < mesh.size(); ++me) {
    const auto coords = *mesh.Coords(me);
    if (coords[0] == 1 && wrong[me] >= 0) {
      EXPECT_EQ(wrong[me], 0) << "decode device " << me;
    }
  }
}

// One axis of 2m devices pairs its halves: device i prefills for device
// i + m, each pair its own prompt, and every decode device holds its
// partner's rows (the one axis of a launch, as torch's group has it).
TEST(KvTransferCacheTest, PairsTheHalvesOfOneAxis) {
  Runtime& rt = TestRuntime();
  if (rt.num_devices() % 2 != 0) GTEST_SKIP() << "needs an even mesh";
  const Mesh mesh = *rt.MakeMesh({{"x", rt.num_devices()}});
  const int half = mesh.size() / 2;
  const int64_t hkv = 2, d = 8, ps = 4, seq = 6;
  const KvTransferOptions o{.role_axis = "x",
                            .num_layers = 2,
                            .num_kv_heads = hkv,
                            .head_dim = d,
                            .page_size = ps,
                            .total_pages = 3};
  const std::vector<int32_t> table = {2, 0};
  std::vector<int64_t> wrong(mesh.size(), -1);
  absl::Status s = rt.Run(mesh, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    const int pair = me % half;
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef cache, AllocateKvCache(o));
    MESHDMA_RETURN_IF_ERROR(
        KvTransfer(seq, table, cache, o, PromptPrefill(pair),
                   [](int, const ArrayRef&, const ArrayRef&) {
                     return absl::OkStatus();
                   }));
    if (me < half) return absl::OkStatus();
    const int64_t layer_elems = 2 * hkv * o.total_pages * ps * d;
    const float* c = cache.data_as<float>();
    wrong[me] = 0;
    for (int l = 0; l < o.num_layers; ++l) {
      const float* layer = c + l * layer_elems;
      wrong[me] +=
          PromptRowsWrong(l, pair, table, hkv, seq, d, ps, o.total_pages, layer,
                          layer + layer_elems / 2);
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  for (int me = half; me < mesh.size(); ++me) {
    // -1: a decode device of another process, which checks its own.
    if (wrong[me] >= 0) {
      EXPECT_EQ(wrong[me], 0) << "decode device " << me;
    }
  }
}

// A role axis of odd size has no halves to pair: refused on every device.
TEST(KvTransferCacheTest, RejectsARoleAxisOfOddSize) {
  Runtime& rt = TestRuntime();
  const Mesh mesh = *rt.MakeMesh({{"stage", 1}, {"x", rt.num_devices()}});
  const KvTransferOptions o{.head_dim = 8, .total_pages = 2};
  absl::Status s = rt.Run(mesh, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef cache, AllocateKvCache(o));
    return KvTransfer(
        4, std::vector<int32_t>{0}, cache, o, PromptPrefill(0),
        [](int, const ArrayRef&, const ArrayRef&) { return absl::OkStatus(); });
  });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("mesh axis 'stage' has size 1; it must be even"),
            absl::string_view::npos)
      << s;
}

// Pairs meet on their own, without a barrier across the mesh: prompts back
// to back into the same pages through two block tables in turn, one side
// late by a random sleep before each, with psums over the whole mesh and
// over each pair between some of them. Every layer decode sees must be this
// prompt's, whole, in this prompt's pages: a prefill device that ran into
// the next call early would overwrite it, and a barrier semaphore count
// left over would make a psum or a transfer hang or fail.
TEST(KvTransferCacheTest, BackToBackPromptsWithDelaysAndCollectives) {
  Runtime& rt = TestRuntime();
  if (rt.num_devices() % 2 != 0) GTEST_SKIP() << "needs an even mesh";
  const Mesh mesh = *rt.MakeMesh({{"stage", 2}, {"x", rt.num_devices() / 2}});
  const int64_t hkv = 2, d = 8, ps = 4, seq = 7;
  const KvTransferOptions o{.num_layers = 3,
                            .num_kv_heads = hkv,
                            .head_dim = d,
                            .page_size = ps,
                            .total_pages = 4};
  const std::vector<int32_t> tables[2] = {{3, 0}, {1, 2}};
  constexpr int kPrompts = 60;
  std::vector<int64_t> wrong(mesh.size(), 0), layers_seen(mesh.size(), 0);
  absl::Status s = rt.Run(mesh, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int pair, axis_index("x"));
    MESHDMA_ASSIGN_OR_RETURN(int role, axis_index("stage"));
    MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef cache, AllocateKvCache(o));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef one, AllocateSymmetric<float>({1}));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef sum, AllocateSymmetric<float>({1}));
    std::mt19937 rng(1234 + me);
    for (int prompt = 0; prompt < kPrompts; ++prompt) {
      // Prefill late on odd prompts, decode late on some even ones. A late
      // device fills scratch where the transfer's allocations will be, and
      // finds it as it left it: nothing may land there before it has
      // entered the call.
      if ((prompt % 2 == 1) == (role == 0) && rng() % 3 == 0) {
        const absl::Duration late = absl::Microseconds(rng() % 300);
        MESHDMA_RETURN_IF_ERROR(run_scoped([&]() -> absl::Status {
          MESHDMA_ASSIGN_OR_RETURN(ArrayRef scratch,
                                   AllocateSymmetric<int32_t>({256}));
          int32_t* x = scratch.data_as<int32_t>();
          std::fill(x, x + 256, -1);
          absl::SleepFor(late);
          if (std::count(x, x + 256, -1) != 256) {
            return absl::InternalError(
                absl::StrCat("device ", me, " before prompt ", prompt,
                             ": its scratch was written from outside"));
          }
          return absl::OkStatus();
        }));
      }
      const std::vector<int32_t>& table = tables[prompt % 2];
      MESHDMA_RETURN_IF_ERROR(KvTransfer(
          seq, table, cache, o, PromptPrefill(10 * prompt + pair),
          [&](int l, const ArrayRef& kc, const ArrayRef& vc) {
            ++layers_seen[me];
            wrong[me] += PromptRowsWrong(
                l, 10 * prompt + pair, table, hkv, seq, d, ps, o.total_pages,
                kc.data_as<float>(), vc.data_as<float>());
            return absl::OkStatus();
          }));
      if (prompt % 7 == 3 || prompt % 11 == 5) {
        one.data_as<float>()[0] = 1.0f;
        const std::vector<std::string> axes =
            prompt % 7 == 3 ? std::vector<std::string>{"stage", "x"}
                            : std::vector<std::string>{"stage"};
        MESHDMA_RETURN_IF_ERROR(psum(one, sum, axes));
        const float want = prompt % 7 == 3 ? float(mesh.size()) : 2.0f;
        if (sum.data_as<float>()[0] != want) {
          return absl::InternalError(
              absl::StrCat("psum after prompt ", prompt, " on device ", me,
                           " gave ", sum.data_as<float>()[0], ", not ", want));
        }
      }
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  for (int me = 0; me < mesh.size(); ++me) {
    const auto coords = *mesh.Coords(me);
    if (coords[0] != 1 || layers_seen[me] == 0) continue;  // Local decode.
    EXPECT_EQ(layers_seen[me], kPrompts * o.num_layers) << "device " << me;
    EXPECT_EQ(wrong[me], 0) << "decode device " << me;
  }
}

// The cache of the tests of bad calls: 2 layers, 2 KV heads of 8, pages of
// 4 tokens, 5 pages.
const KvTransferOptions kSmallCache{.num_layers = 2,
                                    .num_kv_heads = 2,
                                    .head_dim = 8,
                                    .page_size = 4,
                                    .total_pages = 5};

// A prefill or decode step that computes nothing.
absl::Status NoLayer(int, const ArrayRef&, const ArrayRef&) {
  return absl::OkStatus();
}

// A cache that does not match the options, or that lives outside the
// symmetric heap, is rejected on every device before anything moves.
TEST(KvTransferCacheTest, RejectsACacheThatDoesNotMatch) {
  Runtime& rt = TestRuntime();
  if (rt.num_devices() % 2 != 0) GTEST_SKIP() << "needs an even mesh";
  const Mesh mesh = *rt.MakeMesh({{"stage", 2}, {"x", rt.num_devices() / 2}});
  const KvTransferOptions& o = kSmallCache;
  const std::vector<int32_t> table = {4, 1};
  for (const bool symmetric : {true, false}) {
    SCOPED_TRACE(symmetric ? "wrong shape" : "not symmetric");
    absl::Status s = rt.Run(mesh, [&]() -> absl::Status {
      KvTransferOptions bigger = o;
      bigger.total_pages = 6;
      std::vector<float> local(2 * 2 * 2 * 5 * 4 * 8);
      MESHDMA_ASSIGN_OR_RETURN(
          ArrayRef cache,
          symmetric
              ? AllocateKvCache(bigger)
              : ArrayRef::FromPointer(local.data(), DType::kF32,
                                      std::vector<int64_t>{2, 2, 2, 5, 4, 8}));
      return KvTransfer(7, table, cache, o, NoLayer, NoLayer);
    });
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("f32[2,2,2,5,4,8]"), std::string::npos) << s;
    EXPECT_NE(s.message().find(symmetric ? "f32[2,2,2,6,4,8]"
                                         : "outside the symmetric heap"),
              std::string::npos)
        << s;
  }
}

// A prefill device and its decode device that call with prompts of
// different lengths fail at once with an error naming both, instead of
// moving pages by a block table that is not theirs or waiting for one that
// never comes: the decode device's prompt longer, then shorter.
TEST(KvTransferCacheTest, RejectsPairsThatDisagreeOnThePrompt) {
  Runtime& rt = TestRuntime();
  if (rt.num_devices() % 2 != 0) GTEST_SKIP() << "needs an even mesh";
  const Mesh mesh = *rt.MakeMesh({{"stage", 2}, {"x", rt.num_devices() / 2}});
  const KvTransferOptions& o = kSmallCache;
  const std::vector<int32_t> table = {4, 1, 0, 2};
  // Tokens (pages of 4) on the prefill and the decode device.
  for (const std::pair<int, int>& lengths :
       {std::pair{7, 13}, std::pair{13, 7}}) {
    const int prefill_seq = lengths.first, decode_seq = lengths.second;
    SCOPED_TRACE(absl::StrCat("prefill ", prefill_seq, ", decode ", decode_seq,
                              " tokens"));
    absl::Status s = rt.Run(mesh, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(int role, axis_index("stage"));
      MESHDMA_ASSIGN_OR_RETURN(ArrayRef cache, AllocateKvCache(o));
      // A first prompt both agree on, then the two lengths.
      MESHDMA_RETURN_IF_ERROR(
          KvTransfer(7, std::span(table).first(2), cache, o, NoLayer, NoLayer));
      const int seq = role == 0 ? prefill_seq : decode_seq;
      return KvTransfer(seq, std::span(table).first((seq + 3) / 4), cache, o,
                        NoLayer, NoLayer);
    });
    // The prefill device's own error, or, on a process without it, the
    // abort that carries it.
    EXPECT_TRUE(s.code() == absl::StatusCode::kFailedPrecondition ||
                s.code() == absl::StatusCode::kAborted)
        << s;
    EXPECT_NE(s.message().find(absl::StrCat(
                  "kernel 'kv_transfer': the decode device's call has prompt "
                  "pages ",
                  (decode_seq + 3) / 4, " where this prefill device's has ",
                  (prefill_seq + 3) / 4)),
              std::string::npos)
        << s;
  }
}

// The checks that need no device: each bad block table or size named.
TEST(KvTransferCacheTest, ChecksRequestsWithoutADevice) {
  const KvTransferOptions& o = kSmallCache;
  EXPECT_TRUE(
      CheckKvTransferRequest(7, std::vector<int32_t>{4, 1}, o, true).ok());
  // The prefill side has no table to check.
  EXPECT_TRUE(CheckKvTransferRequest(7, {}, o, false).ok());
  const struct {
    int64_t seq;
    std::vector<int32_t> table;
    const char* message;
  } bad[] = {
      {7, {4}, "block_table has 1 entries; 7 tokens in pages of 4 need 2"},
      {7, {4, -1}, "block_table names page -1 of a cache of"},
      {7, {4, 4}, "block_table names page 4 twice"},
      {0, {}, "seq_len 0"},
      {4 * o.total_pages + 1, {}, "pages per layer; the prompt of"},
  };
  for (const auto& b : bad) {
    absl::Status s = CheckKvTransferRequest(b.seq, b.table, o, true);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << b.message;
    EXPECT_NE(s.message().find(b.message), std::string::npos) << s;
  }
}

// Caches that landed at different heap offsets on the two roles (an extra
// allocation on the decode side first) fail at once, before a page moves
// to where the prefill device's offset would put it.
TEST(KvTransferCacheTest, RejectsCachesAtDifferentOffsets) {
  Runtime& rt = TestRuntime();
  if (rt.num_devices() % 2 != 0) GTEST_SKIP() << "needs an even mesh";
  const Mesh mesh = *rt.MakeMesh({{"stage", 2}, {"x", rt.num_devices() / 2}});
  const KvTransferOptions& o = kSmallCache;
  const std::vector<int32_t> table = {4, 1};
  absl::Status s = rt.Run(mesh, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int role, axis_index("stage"));
    if (role == 1) {
      MESHDMA_RETURN_IF_ERROR(
          AllocateSymmetric<float>(std::vector<int64_t>{1024}).status());
    }
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef cache, AllocateKvCache(o));
    return KvTransfer(7, table, cache, o, NoLayer, NoLayer);
  });
  EXPECT_TRUE(s.code() == absl::StatusCode::kFailedPrecondition ||
              s.code() == absl::StatusCode::kAborted)
      << s;
  EXPECT_NE(s.message().find("the decode device's call has cache offset (low "
                             "word) "),
            std::string::npos)
      << s;
}

const KvTable kKvTables[] = {
    {"Scattered", {8, 6, 4, 2}},
    {"OneRun", {3, 4, 5, 6}},
    {"RunThenPage", {5, 6, 7, 0}},
};
INSTANTIATE_TEST_SUITE_P(Tables, KvTransferTest, ::testing::ValuesIn(kKvTables),
                         [](const ::testing::TestParamInfo<KvTable>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace meshdma
