// --op all_reduce | all_gather | reduce_scatter | all_to_all: meshdma's
// collectives (collectives/collectives.h) on a 1-D mesh of every device,
// against the MPI library's own collective on the same processes, in the same
// run (MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block, MPI_Alltoall).
//
// nccl-tests conventions: all_reduce's size is the bytes per device and
// busbw = algbw * 2(n-1)/n; for the others size is the total bytes (the
// gathered output, the scattered input, the exchanged input) and busbw =
// algbw * (n-1)/n. `--algo` takes auto, ring, bidirectional_ring, one_shot;
// `--redop` sum, max, min, mean (all_reduce, reduce_scatter). #wrong counts the
// elements of the last timed call that differ from a closed-form reference on
// any device. MESHDMA_BENCH_CHUNK_BYTES and MESHDMA_BENCH_NUM_BUFFERS override
// CollectiveOptions::chunk_bytes and num_buffers.
#include <mpi.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "meshdma/base/status_macros.h"
#include "bench/harness.h"
#include "meshdma/collectives/collectives.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma::bench {
namespace {

// Small integers: exact in every type and in sums over the devices.
double Value(int device, int64_t i) {
  return static_cast<double>((device * 5 + i * 3 + (i >> 7)) % 11) - 5;
}

double Load(const ArrayRef& a, int64_t i) {
  switch (a.dtype()) {
    case DType::kU8:
      return a.data_as<uint8_t>()[i];
    case DType::kI32:
      return a.data_as<int32_t>()[i];
    case DType::kI64:
      return static_cast<double>(a.data_as<int64_t>()[i]);
    case DType::kF16:
      return static_cast<float>(a.data_as<Half>()[i]);
    case DType::kBF16:
      return static_cast<float>(a.data_as<BFloat16>()[i]);
    case DType::kF32:
      return a.data_as<float>()[i];
    case DType::kF64:
      return a.data_as<double>()[i];
  }
  return 0;
}

void Store(const ArrayRef& a, int64_t i, double v) {
  switch (a.dtype()) {
    case DType::kU8:
      a.data_as<uint8_t>()[i] = static_cast<uint8_t>(static_cast<int>(v) & 255);
      return;
    case DType::kI32:
      a.data_as<int32_t>()[i] = static_cast<int32_t>(v);
      return;
    case DType::kI64:
      a.data_as<int64_t>()[i] = static_cast<int64_t>(v);
      return;
    case DType::kF16:
      a.data_as<Half>()[i] = Half(static_cast<float>(v));
      return;
    case DType::kBF16:
      a.data_as<BFloat16>()[i] = BFloat16(static_cast<float>(v));
      return;
    case DType::kF32:
      a.data_as<float>()[i] = static_cast<float>(v);
      return;
    case DType::kF64:
      a.data_as<double>()[i] = v;
      return;
  }
}

MPI_Datatype MpiType(DType t) {
  switch (t) {
    case DType::kU8:
      return MPI_UINT8_T;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kF64:
      return MPI_DOUBLE;
    default:
      return MPI_DATATYPE_NULL;  // No MPI type for f16 / bf16.
  }
}

absl::StatusOr<ReduceOp> ParseRedop(const std::string& s) {
  if (s == "sum") return ReduceOp::kSum;
  if (s == "max") return ReduceOp::kMax;
  if (s == "min") return ReduceOp::kMin;
  if (s == "mean" || s == "avg") return ReduceOp::kMean;
  return absl::InvalidArgumentError(
      absl::StrCat("--redop ", s, ": expected sum, max, min or mean"));
}

absl::StatusOr<CollectiveAlgorithm> ParseAlgorithm(const std::string& s) {
  if (s.empty() || s == "auto") return CollectiveAlgorithm::kAuto;
  if (s == "ring") return CollectiveAlgorithm::kRing;
  if (s == "bidirectional_ring" || s == "bidir") {
    return CollectiveAlgorithm::kBidirectionalRing;
  }
  if (s == "one_shot") return CollectiveAlgorithm::kOneShot;
  return absl::InvalidArgumentError(absl::StrCat(
      "--algo ", s, ": expected auto, ring, bidirectional_ring or one_shot"));
}

// MPI_Op of a reduction; kMean is timed as a sum (MPI has no mean).
MPI_Op MpiOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kMin:
      return MPI_MIN;
    default:
      return MPI_SUM;
  }
}

double Reduce(ReduceOp op, int n, int64_t i, bool integer) {
  double acc = Value(0, i);
  for (int d = 1; d < n; ++d) {
    const double v = Value(d, i);
    if (op == ReduceOp::kMax) acc = std::max(acc, v);
    if (op == ReduceOp::kMin) acc = std::min(acc, v);
    if (op == ReduceOp::kSum || op == ReduceOp::kMean) acc += v;
  }
  if (op == ReduceOp::kMean) {
    acc /= n;
    if (integer) acc = std::trunc(acc);
  }
  return acc;
}

bool Close(double got, double want, DType t) {
  const double tol = (t == DType::kF16 || t == DType::kBF16) ? 1e-2 : 1e-6;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

enum class Op { kAllReduce, kAllGather, kReduceScatter, kAllToAll };

absl::Status RunCollective(BenchContext& ctx, Op op) {
  Runtime& rt = ctx.runtime();
  const BenchConfig& cfg = ctx.config();
  const int n = ctx.mesh().size();
  const DType dtype = cfg.dtype;
  const int64_t elem = static_cast<int64_t>(DTypeSize(dtype));
  const bool reduces = op == Op::kAllReduce || op == Op::kReduceScatter;
  const bool integer = dtype == DType::kI32 || dtype == DType::kI64;
  MESHDMA_ASSIGN_OR_RETURN(ReduceOp redop, ParseRedop(cfg.redop));
  MESHDMA_ASSIGN_OR_RETURN(CollectiveAlgorithm algorithm,
                           ParseAlgorithm(cfg.algorithm));
  if (reduces && dtype == DType::kU8) {
    return absl::InvalidArgumentError("reductions do not take u8 (-d)");
  }
  CollectiveOptions options;
  options.algorithm = algorithm;
  // Pipelining knobs of CollectiveOptions, for tuning sweeps.
  if (const char* v = std::getenv("MESHDMA_BENCH_CHUNK_BYTES")) {
    options.chunk_bytes = std::atoll(v);
  }
  if (const char* v = std::getenv("MESHDMA_BENCH_NUM_BUFFERS")) {
    options.num_buffers = std::atoi(v);
  }
  const char* name = op == Op::kAllReduce       ? "all_reduce"
                     : op == Op::kAllGather     ? "all_gather"
                     : op == Op::kReduceScatter ? "reduce_scatter"
                                                : "all_to_all";
  const int64_t align = op == Op::kAllReduce ? elem : elem * n;
  for (int64_t bytes : ctx.Sizes(align)) {
    // Per-device element counts of input and output.
    const int64_t total = bytes / elem;
    int64_t in_count = total, out_count = total;
    if (op == Op::kAllGather) in_count = total / n;
    if (op == Op::kReduceScatter) out_count = total / n;
    // The memory traffic is that of the larger buffer.
    const int iters = ctx.ItersFor(bytes, op == Op::kAllReduce ? 2.0 : 4.0);
    double seconds = 0;
    std::atomic<int64_t> wrong{0};
    MESHDMA_RETURN_IF_ERROR(rt.Run(ctx.mesh(), [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
      MESHDMA_ASSIGN_OR_RETURN(ArrayRef in,
                               AllocateSymmetric(dtype, {in_count}));
      MESHDMA_ASSIGN_OR_RETURN(ArrayRef out,
                               AllocateSymmetric(dtype, {out_count}));
      for (int64_t i = 0; i < in_count; ++i) Store(in, i, Value(me, i));
      auto call = [&]() -> absl::Status {
        switch (op) {
          case Op::kAllReduce:
            return all_reduce(redop, in, out, {"x"}, options);
          case Op::kAllGather:
            return all_gather(in, out, {"x"}, /*tiled=*/true, options);
          case Op::kReduceScatter:
            return reduce_scatter(redop, in, out, {"x"}, options);
          case Op::kAllToAll:
            return all_to_all(in, out, {"x"}, 0, 0, options);
        }
        return absl::OkStatus();
      };
      MESHDMA_ASSIGN_OR_RETURN(
          double t, ctx.TimeOnMesh(iters, [&](int k) -> absl::Status {
            for (int i = 0; i < k; ++i) MESHDMA_RETURN_IF_ERROR(call());
            return absl::OkStatus();
          }));
      if (me == 0) seconds = t;
      if (cfg.check) {
        int64_t bad = 0;
        const int64_t block = total / n;
        for (int64_t i = 0; i < out_count; ++i) {
          double want = 0;
          switch (op) {
            case Op::kAllReduce:
              want = Reduce(redop, n, i, integer);
              break;
            case Op::kReduceScatter:
              want = Reduce(redop, n, me * block + i, integer);
              break;
            case Op::kAllGather:
              want = Value(static_cast<int>(i / block), i % block);
              break;
            case Op::kAllToAll:
              want = Value(static_cast<int>(i / block), me * block + i % block);
              break;
          }
          if (dtype == DType::kU8) want = static_cast<int>(want) & 255;
          bad += !Close(Load(out, i), want, dtype);
        }
        wrong += bad;
      }
      return absl::OkStatus();
    }));
    Row row;
    row.op = name;
    row.transport = ctx.Transport();
    row.dtype = std::string(DTypeName(dtype));
    row.redop = reduces ? cfg.redop : "-";
    row.bytes = bytes;
    row.count = op == Op::kAllReduce ? total : total;
    row.devices = n;
    if (ctx.num_processes() > 1) {
      MPI_Bcast(&seconds, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    }
    const double factor = op == Op::kAllReduce ? 2.0 * (n - 1) / n
                                               : static_cast<double>(n - 1) / n;
    row.time_us = seconds * 1e6;
    row.algbw_GBps = bytes / seconds / 1e9;
    row.busbw_GBps = row.algbw_GBps * factor;
    row.wrong = ctx.SumOverProcesses(wrong.load());
    const int p = ctx.num_processes();
    // The MPI baseline: one rank per process, so it matches meshdma only
    // when every process holds one device.
    if (cfg.baseline && p > 1 && p == n &&
        MpiType(dtype) != MPI_DATATYPE_NULL) {
      const MPI_Datatype mt = MpiType(dtype);
      std::vector<char> sbuf(in_count * elem, 1), rbuf(out_count * elem, 0);
      const int block = static_cast<int>(total / n);
      const double t = ctx.TimeMpi(iters, [&](int k) {
        for (int i = 0; i < k; ++i) {
          switch (op) {
            case Op::kAllReduce:
              MPI_Allreduce(sbuf.data(), rbuf.data(), static_cast<int>(total),
                            mt, MpiOp(redop), MPI_COMM_WORLD);
              break;
            case Op::kAllGather:
              MPI_Allgather(sbuf.data(), block, mt, rbuf.data(), block, mt,
                            MPI_COMM_WORLD);
              break;
            case Op::kReduceScatter:
              MPI_Reduce_scatter_block(sbuf.data(), rbuf.data(), block, mt,
                                       MpiOp(redop), MPI_COMM_WORLD);
              break;
            case Op::kAllToAll:
              MPI_Alltoall(sbuf.data(), block, mt, rbuf.data(), block, mt,
                           MPI_COMM_WORLD);
              break;
          }
        }
      });
      row.baseline_time_us = t * 1e6;
      row.baseline_busbw_GBps = bytes / t / 1e9 * factor;
    }
    row.memcpy_GBps = ctx.MemcpyGBps(bytes);
    ctx.Emit(row);
  }
  return absl::OkStatus();
}

absl::Status RunAllReduce(BenchContext& ctx) {
  return RunCollective(ctx, Op::kAllReduce);
}
absl::Status RunAllGather(BenchContext& ctx) {
  return RunCollective(ctx, Op::kAllGather);
}
absl::Status RunReduceScatter(BenchContext& ctx) {
  return RunCollective(ctx, Op::kReduceScatter);
}
absl::Status RunAllToAll(BenchContext& ctx) {
  return RunCollective(ctx, Op::kAllToAll);
}

}  // namespace

MESHDMA_BENCH_OP("all_reduce", RunAllReduce);
MESHDMA_BENCH_OP("all_gather", RunAllGather);
MESHDMA_BENCH_OP("reduce_scatter", RunReduceScatter);
MESHDMA_BENCH_OP("all_to_all", RunAllToAll);

}  // namespace meshdma::bench
