// Tutorial 7: collective matmuls (communication hidden behind block
// products).
//
// Tensor-parallel layers multiply activations that are sharded one way by
// weights sharded another, so a collective sits next to every matmul. Done
// naively the devices first communicate, then compute. Decomposed into ring
// steps, the product of the block in hand overlaps the DMA of the next:
//
//   all-gather matmul:     out[m, n] = all_gather_rows(x)[m, k] @ w[k, n]
//     x rows sharded over "x"; at step s a device multiplies the x block
//     that started s devices to its left while forwarding it to the right.
//
//   matmul reduce-scatter: out = reduce_scatter_rows(x[m, k/n] @ w[k/n, n])
//     the contraction dimension sharded; a partial sum per rows block
//     travels the ring, each device adds its partial product and forwards
//     it; the partial product of the next step is computed while the sum
//     travels.
//
// Both are checked against the unsharded matmul, then timed compute-only,
// communication-only, overlapped and sequential.
//
// Who moves the blocks: where the devices can read each other's memory
// (threads of one process; on one host, x and the reduce-scatter's sums in
// the symmetric heap, where the timed runs keep x) the consumer's product
// reads them in place and nothing is copied;
// MESHDMA_FUSED_TRANSFER=dma runs the DMA ring instead, for comparison. With
// 2 devices, communication is about compute at --n 4 for all-gather matmul
// and at --m 4096 --k 32 --n 512 for matmul reduce-scatter.
//
//   build/examples/07_collective_matmul
//   mpirun -np 2 build/examples/07_collective_matmul --m 2048 --k 2048 --n 2048
//   MESHDMA_DEVICES_PER_PROCESS=2 build/examples/07_collective_matmul
//     --m 2048 --k 2048 --n 4 --iters 9
// Flags: --m M, --k K, --n N (global sizes), --iters N, --no-check.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "examples/example_util.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/fused/collective_matmul.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"
#include "meshdma/kernels/blas.h"
#include "meshdma/sharding/shard_map.h"
#include "tools/runtime_flags.h"

ABSL_FLAG(int64_t, m, 0, "global rows of x; 0: 64 per device");
ABSL_FLAG(int64_t, k, 256, "global contraction size");
ABSL_FLAG(int64_t, n, 256, "global columns of w");
ABSL_FLAG(int, iters, 3, "timed iterations per mode");
ABSL_FLAG(bool, check, true, "check against the unsharded matmul");

namespace {

using meshdma::examples::Median;
using meshdma::examples::Random;

using meshdma::ArrayRef;
using meshdma::OverlapMode;
using meshdma::PartitionSpec;
using meshdma::ShardedArray;

struct Flags {
  int64_t m = 0, k = 256, n = 256;  // m = 0: 64 rows per device.
  int iters = 3;
  bool check = true;
};

const meshdma::cli::Program kProgram = meshdma::examples::ExampleProgram(
    "07_collective_matmul",
    "All-gather matmul and matmul reduce-scatter with the ring's DMAs\n"
    "hidden behind block products; checked against the unsharded matmul\n"
    "and timed compute-only, communication-only, overlapped and\n"
    "sequential.",
    {{"m", 0, 1 << 20},
     {"k", 1, 1 << 20},
     {"n", 1, 1 << 20},
     {"iters", 1, 10000}});

Flags ReadFlags() {
  Flags f;
  f.m = absl::GetFlag(FLAGS_m);
  f.k = absl::GetFlag(FLAGS_k);
  f.n = absl::GetFlag(FLAGS_n);
  f.iters = absl::GetFlag(FLAGS_iters);
  f.check = absl::GetFlag(FLAGS_check);
  return f;
}

using Kernel = absl::Status (*)(const ArrayRef&, const ArrayRef&,
                                const ArrayRef&,
                                const meshdma::CollectiveMatmulOptions&);

// Runs `kernel` once per mode and repetition, timing each device between
// device barriers; returns the median of the slowest device per mode, in the
// order compute-only, communication-only, overlapped, sequential.
absl::StatusOr<std::vector<double>> Time(
    meshdma::Runtime& rt, const meshdma::Mesh& mesh, Kernel kernel,
    std::span<const ShardedArray> args, std::vector<PartitionSpec> in_specs,
    PartitionSpec out_spec, const meshdma::ShapeDtype& out_shape, int iters) {
  const OverlapMode modes[] = {
      OverlapMode::kComputeOnly, OverlapMode::kCommunicationOnly,
      OverlapMode::kOverlapped, OverlapMode::kSequential};
  std::vector<std::vector<double>> times(4);
  for (int it = 0; it < iters + 1; ++it) {
    for (int m = 0; m < 4; ++m) {
      std::vector<double> per_device(mesh.size(), 0.0);
      auto timed = meshdma::shard_map(
          [&, m](std::span<const ArrayRef> in,
                 std::span<const ArrayRef> out) -> absl::Status {
            MESHDMA_ASSIGN_OR_RETURN(int me, meshdma::logical_device_id());
            // x in the symmetric heap, where a model would keep its
            // activations: devices of other processes on this host read
            // it in place too.
            MESHDMA_ASSIGN_OR_RETURN(
                ArrayRef x,
                meshdma::AllocateSymmetric(in[0].dtype(), in[0].shape()));
            std::memcpy(x.data(), in[0].data(), in[0].size_bytes());
            MESHDMA_RETURN_IF_ERROR(meshdma::device_barrier());
            const auto t0 = std::chrono::steady_clock::now();
            MESHDMA_RETURN_IF_ERROR(
                kernel(x, in[1], out[0], {.mode = modes[m]}));
            MESHDMA_RETURN_IF_ERROR(meshdma::device_barrier());
            per_device[me] = std::chrono::duration<double, std::milli>(
                                 std::chrono::steady_clock::now() - t0)
                                 .count();
            return absl::OkStatus();
          },
          mesh, in_specs, {out_spec});
      MESHDMA_RETURN_IF_ERROR(
          timed(rt, args, std::span<const meshdma::ShapeDtype>(&out_shape, 1))
              .status());
      if (it > 0) {
        times[m].push_back(
            *std::max_element(per_device.begin(), per_device.end()));
      }
    }
  }
  std::vector<double> medians;
  for (auto& t : times) medians.push_back(Median(t));
  return medians;
}

absl::Status Main(const Flags& flags, const meshdma::RuntimeOptions& options) {
  MESHDMA_ASSIGN_OR_RETURN(auto runtime, meshdma::Runtime::Create(options));
  meshdma::Runtime& rt = *runtime;
  MESHDMA_ASSIGN_OR_RETURN(meshdma::Mesh mesh, rt.MakeMesh1D("x"));
  const int nd = mesh.size();
  const bool root = rt.launch().rank() == 0;
  const int64_t m = flags.m > 0 ? flags.m : 64 * nd, k = flags.k, n = flags.n;
  if (m % nd != 0 || k % nd != 0) {
    return absl::InvalidArgumentError("--m and --k must divide by the devices");
  }
  // x, w and their product, before anything is allocated.
  using meshdma::cli::Factor;
  const Factor m_rows =
      flags.m > 0 ? Factor{"m", m} : Factor{nullptr, m, "rows"};
  const Factor bytes{nullptr, 4, "bytes per float"};
  if (absl::Status fits = meshdma::examples::CheckArraySizes(
          kProgram, {{{m_rows, {"k", k}, bytes}, "x"},
                     {{{"k", k}, {"n", n}, bytes}, "w"},
                     {{m_rows, {"n", n}, bytes}, "the product"}});
      !fits.ok()) {
    return fits;
  }
  // Step 1: the unsharded operands (same seeds everywhere) and the
  // reference product.
  std::vector<float> x = Random(m * k, 1), w = Random(k * n, 2);
  std::vector<float> want;
  if (flags.check) {
    want.resize(m * n);
    meshdma::Gemm(false, false, m, n, k, 1.0f, x.data(), k, w.data(), n, 0.0f,
                  want.data(), n);
  }
  const meshdma::ShapeDtype out_shape{meshdma::DType::kF32, {m, n}};
  const PartitionSpec rows{{"x"}}, cols{{}, {"x"}}, replicated{};
  bool all_ok = true;

  // Step 2: all-gather matmul: x rows sharded, w replicated; every device
  // ends with the whole product (out spec P(): replicated).
  {
    MESHDMA_ASSIGN_OR_RETURN(ShardedArray xs,
                             ShardedArray::FromHost(rt, mesh, rows, x, {m, k}));
    MESHDMA_ASSIGN_OR_RETURN(
        ShardedArray ws,
        ShardedArray::FromHost(rt, mesh, replicated, w, {k, n}));
    const ShardedArray args[] = {xs, ws};
    auto f = meshdma::shard_map(
        [](std::span<const ArrayRef> in, std::span<const ArrayRef> out) {
          return meshdma::AllGatherMatmul(in[0], in[1], out[0]);
        },
        mesh, {rows, replicated}, {replicated}, {.name = "all_gather_matmul"});
    MESHDMA_ASSIGN_OR_RETURN(
        auto outs,
        f(rt, args, std::span<const meshdma::ShapeDtype>(&out_shape, 1)));
    MESHDMA_ASSIGN_OR_RETURN(auto got, outs[0].ToHost<float>());
    double err = 0;
    for (size_t i = 0; i < want.size(); ++i)
      err = std::max(err, double(std::abs(got[i] - want[i])));
    MESHDMA_ASSIGN_OR_RETURN(
        auto t, Time(rt, mesh, &meshdma::AllGatherMatmul, args,
                     {rows, replicated}, replicated, out_shape, flags.iters));
    const bool ok = !flags.check || err < 1e-3;
    all_ok &= ok;
    if (root) {
      std::printf(
          "all-gather matmul: %d devices (%d processes), x f32[%lld,%lld] "
          "rows sharded, w f32[%lld,%lld]\n",
          nd, rt.launch().num_processes(), (long long)m, (long long)k,
          (long long)k, (long long)n);
      if (flags.check)
        std::printf("  vs unsharded matmul: max |err| = %.2e %s\n", err,
                    ok ? "(ok)" : "WRONG");
      std::printf(
          "  compute-only %.3f ms, communication-only %.3f ms, overlapped "
          "%.3f ms, sequential %.3f ms\n"
          "  overlapped / max(compute, communication) = %.2f\n",
          t[0], t[1], t[2], t[3], t[2] / std::max(t[0], t[1]));
    }
  }

  // Step 3: matmul reduce-scatter: x columns and w rows sharded (the
  // contraction), out rows sharded.
  {
    MESHDMA_ASSIGN_OR_RETURN(ShardedArray xs,
                             ShardedArray::FromHost(rt, mesh, cols, x, {m, k}));
    MESHDMA_ASSIGN_OR_RETURN(ShardedArray ws,
                             ShardedArray::FromHost(rt, mesh, rows, w, {k, n}));
    const ShardedArray args[] = {xs, ws};
    auto f = meshdma::shard_map(
        [](std::span<const ArrayRef> in, std::span<const ArrayRef> out) {
          return meshdma::MatmulReduceScatter(in[0], in[1], out[0]);
        },
        mesh, {cols, rows}, {rows}, {.name = "matmul_reduce_scatter"});
    MESHDMA_ASSIGN_OR_RETURN(
        auto outs,
        f(rt, args, std::span<const meshdma::ShapeDtype>(&out_shape, 1)));
    MESHDMA_ASSIGN_OR_RETURN(auto got, outs[0].ToHost<float>());
    double err = 0;
    for (size_t i = 0; i < want.size(); ++i)
      err = std::max(err, double(std::abs(got[i] - want[i])));
    MESHDMA_ASSIGN_OR_RETURN(auto t,
                             Time(rt, mesh, &meshdma::MatmulReduceScatter, args,
                                  {cols, rows}, rows, out_shape, flags.iters));
    const bool ok = !flags.check || err < 1e-3;
    all_ok &= ok;
    if (root) {
      std::printf(
          "matmul reduce-scatter: x f32[%lld,%lld] columns sharded, w "
          "f32[%lld,%lld] rows sharded\n",
          (long long)m, (long long)k, (long long)k, (long long)n);
      if (flags.check)
        std::printf("  vs unsharded matmul: max |err| = %.2e %s\n", err,
                    ok ? "(ok)" : "WRONG");
      std::printf(
          "  compute-only %.3f ms, communication-only %.3f ms, overlapped "
          "%.3f ms, sequential %.3f ms\n"
          "  overlapped / max(compute, communication) = %.2f\n",
          t[0], t[1], t[2], t[3], t[2] / std::max(t[0], t[1]));
    }
  }
  if (!all_ok) return absl::InternalError("collective matmul result is wrong");
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  const meshdma::RuntimeOptions options =
      meshdma::cli::ParseRuntimeOptionsOrExit(kProgram, argc, argv);
  return meshdma::examples::Finish("07_collective_matmul",
                                   Main(ReadFlags(), options));
}
