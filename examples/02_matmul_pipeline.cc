// Tutorial 2: a pipelined matmul with pallas_call (the Pallas TPU matmul
// tutorial's kernel, on CPU devices).
//
// Every device of a 1-D mesh "x" multiplies its own x shard [M, K] by a
// shared y [K, N] and applies a fused ReLU: out = relu(x @ y). The kernel
// never sees whole arrays: pallas_call walks a 3-D grid (i, j, k) and, for
// each grid point, stages the blocks x[i, k] and y[k, j] into VMEM with
// double-buffered async copies, while the body accumulates into an f32
// scratch buffer that lives across the k sweep.
//
// Runs as threads of one process (one device per core by default) or under
// mpirun:  mpirun -np 2 build/examples/02_matmul_pipeline
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "examples/example_util.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/kernels/pallas_call.h"
#include "tools/runtime_flags.h"

namespace {

using meshdma::ArrayRef;
using meshdma::Block;
using meshdma::BlockSpec;
using meshdma::DType;
using meshdma::KernelArgs;
using meshdma::Ref;

// Step 1: the problem and the blocking. Block sizes need not divide the
// array sizes (edge blocks are zero-padded on the way in and clipped on the
// way out), but here they do: a 2 x 3 x 4 grid.
constexpr int64_t kM = 256, kN = 192, kK = 320;
constexpr int64_t kBm = 128, kBn = 64, kBk = 80;

struct DeviceReport {
  int device = -1;
  double max_error = 0;
  double seconds = 0;
  meshdma::PipelineStats stats;
};

// Step 2: the body. It runs once per grid point on the blocks pallas_call
// staged for it: x_ref [kBm, kBk], y_ref [kBk, kBn], o_ref [kBm, kBn], and
// acc_ref, the VMEM scratch accumulator.
absl::Status MatmulBody(const KernelArgs& a) {
  MESHDMA_ASSIGN_OR_RETURN(Ref<float> x_ref, a.in<float>(0));
  MESHDMA_ASSIGN_OR_RETURN(Ref<float> y_ref, a.in<float>(1));
  MESHDMA_ASSIGN_OR_RETURN(Ref<float> o_ref, a.out<float>(0));
  MESHDMA_ASSIGN_OR_RETURN(Ref<float> acc_ref, a.scratch<float>(0));
  // 2a. First k block of an output block: zero the accumulator.
  if (meshdma::program_id(2) == 0) {
    MESHDMA_RETURN_IF_ERROR(acc_ref.Store(Block<float>(acc_ref.shape())));
  }
  // 2b. acc += x_blk @ y_blk (the block product goes through the BLAS).
  MESHDMA_RETURN_IF_ERROR(
      acc_ref.Store(acc_ref.Load() + meshdma::Dot(x_ref.Load(), y_ref.Load())));
  // 2c. Last k block: the fused activation, written to the output block.
  // pallas_call copies it back to `out` when the output block changes.
  if (meshdma::program_id(2) == meshdma::num_programs(2) - 1) {
    MESHDMA_RETURN_IF_ERROR(o_ref.Store(
        acc_ref.Load().Map([](float v) { return v > 0 ? v : 0.0f; })));
  }
  return absl::OkStatus();
}

// Step 3: the call. BlockSpecs say which block each grid point (i, j, k)
// needs: x block (i, k), y block (k, j), out block (i, j). Since the out
// block stays the same while k sweeps, it is written back only once per
// (i, j); x and y blocks are copied only when their index changes.
absl::Status MatmulOnDevice(DeviceReport* report) {
  MESHDMA_ASSIGN_OR_RETURN(report->device, meshdma::axis_index("x"));
  // Each device's own data: its x shard depends on its coordinate.
  std::vector<float> x(kM * kK), y(kK * kN), out(kM * kN, -1.0f);
  for (int64_t i = 0; i < kM * kK; ++i)
    x[i] = std::sin(0.01f * i + report->device);
  for (int64_t i = 0; i < kK * kN; ++i) y[i] = std::cos(0.02f * i);
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef xr,
                           ArrayRef::FromPointer(x.data(), DType::kF32,
                                                 std::vector<int64_t>{kM, kK}));
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef yr,
                           ArrayRef::FromPointer(y.data(), DType::kF32,
                                                 std::vector<int64_t>{kK, kN}));
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef outr,
                           ArrayRef::FromPointer(out.data(), DType::kF32,
                                                 std::vector<int64_t>{kM, kN}));

  using GridIndex = std::span<const int64_t>;
  meshdma::PallasCallParams p;
  p.name = "tutorial_matmul";
  p.grid = {kM / kBm, kN / kBn, kK / kBk};
  p.in_specs = {BlockSpec{{kBm, kBk},
                          [](GridIndex g) {
                            return std::vector<int64_t>{g[0], g[2]};
                          }},
                BlockSpec{{kBk, kBn}, [](GridIndex g) {
                            return std::vector<int64_t>{g[2], g[1]};
                          }}};
  p.out_specs = {BlockSpec{{kBm, kBn}, [](GridIndex g) {
                             return std::vector<int64_t>{g[0], g[1]};
                           }}};
  p.out_shape = {{DType::kF32, {kM, kN}}};
  p.scratch_shapes = {meshdma::VMEM({kBm, kBn}, DType::kF32)};
  p.input_names = {"x", "y"};
  p.output_names = {"out"};
  p.stats = &report->stats;
  const ArrayRef inputs[] = {xr, yr};
  // Three calls (the first warms the caches); the fastest one is reported.
  // Every call copies the same blocks, so the stats describe one call.
  report->seconds = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    MESHDMA_RETURN_IF_ERROR(
        meshdma::pallas_call(p, MatmulBody, inputs, {&outr, 1}));
    report->seconds = std::min(
        report->seconds,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count());
  }

  // Step 4: check against a naive triple loop.
  for (int64_t i = 0; i < kM; ++i) {
    for (int64_t j = 0; j < kN; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < kK; ++k)
        acc += double(x[i * kK + k]) * y[k * kN + j];
      const double want = acc > 0 ? acc : 0.0;
      report->max_error =
          std::max(report->max_error, std::abs(want - out[i * kN + j]));
    }
  }
  return absl::OkStatus();
}

const meshdma::cli::Program kProgram = meshdma::examples::ExampleProgram(
    "02_matmul_pipeline",
    "Every device computes relu(x @ y) for its own x shard with a\n"
    "pallas_call that stages blocks through double-buffered async copies,\n"
    "and checks it.");

}  // namespace

int main(int argc, char** argv) {
  const meshdma::RuntimeOptions options =
      meshdma::cli::ParseRuntimeOptionsOrExit(kProgram, argc, argv);
  // Step 5: a runtime with the flags' settings (unset: devices per process
  // from the environment or the core count) and a 1-D mesh over every device.
  auto runtime = meshdma::Runtime::Create(options);
  if (!runtime.ok()) {
    std::fprintf(stderr, "%s\n",
                 std::string(runtime.status().message()).c_str());
    return 1;
  }
  auto& rt = **runtime;
  auto mesh = rt.MakeMesh1D("x");
  if (!mesh.ok()) {
    std::fprintf(stderr, "%s\n", std::string(mesh.status().message()).c_str());
    return 1;
  }
  // One report per local device, indexed by position among this process's
  // devices.
  std::vector<DeviceReport> reports(rt.num_local_devices());
  absl::Status s = rt.Run(*mesh, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int g, meshdma::global_device_id());
    int local = 0;
    for (int d : rt.launch().DevicesOfRank(rt.launch().rank())) {
      if (d == g) break;
      ++local;
    }
    return MatmulOnDevice(&reports[local]);
  });
  if (!s.ok()) {
    std::fprintf(stderr, "matmul failed: %s\n",
                 std::string(s.message()).c_str());
    return 1;
  }
  // Step 6: what happened. Per grid point (i, j, k): x block (i, k) changes
  // every step, y block (k, j) every step, out block (i, j) once per k sweep.
  bool ok = true;
  const double flops = 2.0 * kM * kN * kK;
  std::printf(
      "rank %d: relu(x[%lld,%lld] @ y[%lld,%lld]) on %d of %d devices, "
      "blocks %lldx%lldx%lld, grid (%lld, %lld, %lld)\n",
      rt.launch().rank(), (long long)kM, (long long)kK, (long long)kK,
      (long long)kN, rt.num_local_devices(), rt.num_devices(), (long long)kBm,
      (long long)kBn, (long long)kBk, (long long)(kM / kBm),
      (long long)(kN / kBn), (long long)(kK / kBk));
  for (const DeviceReport& r : reports) {
    ok = ok && r.max_error < 1e-3;
    std::printf(
        "  device %d: %lld grid steps, block copies x %lld, y %lld, out "
        "%lld, VMEM %lld KiB, %.2f GFLOP/s, max |error| %.2e %s\n",
        r.device, (long long)r.stats.grid_steps,
        (long long)r.stats.input_copies[0], (long long)r.stats.input_copies[1],
        (long long)r.stats.output_copies[0],
        (long long)(r.stats.vmem_bytes / 1024),
        r.seconds > 0 ? flops / r.seconds * 1e-9 : 0.0, r.max_error,
        r.max_error < 1e-3 ? "ok" : "WRONG");
  }
  return ok ? 0 : 1;
}
