// --collective all_reduce | all_gather | reduce_scatter | all_to_all:
// meshdma's collectives (collectives/collectives.h) on a 1-D mesh of every
// device, against the MPI library's own collective on the same processes, in
// the same run (MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block,
// MPI_Alltoall), out of place and in place (MPI_IN_PLACE, which ip_vs_mpi
// compares with meshdma's in-place call).
//
// nccl-tests conventions: all_reduce's size is the bytes per device and
// busbw = algbw * 2(n-1)/n; for the others size is the total bytes (the
// gathered output, the scattered input, the exchanged input) and busbw =
// algbw * (n-1)/n. In place: all_reduce with `output` as its input,
// all_gather with its input in this device's block of the output,
// reduce_scatter with its output in this device's segment of the input,
// all_to_all with `output` as its input (MPI_IN_PLACE's form). `--algo`
// takes auto, ring, bidirectional_ring, one_shot, hierarchical, direct; `-o`
// sum, max, min, avg (all_reduce, reduce_scatter). #wrong counts the elements
// of the -c checked calls (each on freshly written inputs) that differ from a
// closed-form reference on any device. --chunk-bytes, --num-buffers and
// --lane-chunk-bytes override CollectiveOptions::chunk_bytes, num_buffers and
// lane_chunk_bytes.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/harness.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/collectives.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma::bench {
namespace {

// Small integers: exact in every type and in sums over the devices.
double Value(int device, int64_t i) {
  return static_cast<double>((device * 5 + i * 3 + (i >> 7)) % 11) - 5;
}

double Load(const ArrayRef& a, int64_t i) {
  return base_internal::LoadAsDouble(a.dtype(), a.data(), i);
}

void Store(const ArrayRef& a, int64_t i, double v) {
  base_internal::StoreFromDouble(a.dtype(), a.data(), i, v);
}

// MPI has no 16-bit floating-point type: half and bfloat16 travel as a
// derived 2-byte datatype, reduced by user-defined ops that compute in float.
template <typename T, ReduceOp kOp>
void ReduceInFloat(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = static_cast<float>(a[i]), y = static_cast<float>(b[i]);
    b[i] = T(kOp == ReduceOp::kMax   ? std::max(x, y)
             : kOp == ReduceOp::kMin ? std::min(x, y)
                                     : x + y);
  }
}

struct MpiReduction {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op op = MPI_OP_NULL;
  bool derived = false;  // `type` and `op` are ours to free.
  ~MpiReduction() {
    if (!derived) return;
    if (op != MPI_OP_NULL) MPI_Op_free(&op);
    MPI_Type_free(&type);
  }
};

template <typename T>
MPI_User_function* FloatOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax:
      return &ReduceInFloat<T, ReduceOp::kMax>;
    case ReduceOp::kMin:
      return &ReduceInFloat<T, ReduceOp::kMin>;
    default:
      return &ReduceInFloat<T, ReduceOp::kSum>;
  }
}

// The MPI datatype and reduction of `dtype` / `op`; kMean is timed as a sum
// (MPI has no mean).
void MakeMpiReduction(DType dtype, ReduceOp op, MpiReduction* r) {
  switch (dtype) {
    case DType::kU8:
      r->type = MPI_UINT8_T;
      break;
    case DType::kI32:
      r->type = MPI_INT32_T;
      break;
    case DType::kI64:
      r->type = MPI_INT64_T;
      break;
    case DType::kF32:
      r->type = MPI_FLOAT;
      break;
    case DType::kF64:
      r->type = MPI_DOUBLE;
      break;
    case DType::kF16:
    case DType::kBF16:
      r->derived = true;
      MPI_Type_contiguous(2, MPI_BYTE, &r->type);
      MPI_Type_commit(&r->type);
      MPI_Op_create(
          dtype == DType::kF16 ? FloatOp<Half>(op) : FloatOp<BFloat16>(op),
          /*commute=*/1, &r->op);
      return;
  }
  r->op = op == ReduceOp::kMax   ? MPI_MAX
          : op == ReduceOp::kMin ? MPI_MIN
                                 : MPI_SUM;
}

absl::StatusOr<ReduceOp> ParseRedop(const std::string& s) {
  if (s == "sum" || s == "none") return ReduceOp::kSum;
  if (s == "max") return ReduceOp::kMax;
  if (s == "min") return ReduceOp::kMin;
  if (s == "avg") return ReduceOp::kMean;
  return absl::InvalidArgumentError(
      absl::StrCat("flag -o (--op): bad value '", s, "'"));
}

absl::StatusOr<CollectiveAlgorithm> ParseAlgorithm(const std::string& s) {
  if (s.empty() || s == "auto") return CollectiveAlgorithm::kAuto;
  if (s == "ring") return CollectiveAlgorithm::kRing;
  if (s == "bidirectional_ring" || s == "bidir") {
    return CollectiveAlgorithm::kBidirectionalRing;
  }
  if (s == "one_shot") return CollectiveAlgorithm::kOneShot;
  if (s == "hierarchical") return CollectiveAlgorithm::kHierarchical;
  if (s == "direct") return CollectiveAlgorithm::kDirect;
  return absl::InvalidArgumentError(
      absl::StrCat("flag --algo: bad value '", s,
                   "': expected auto, ring, bidirectional_ring, one_shot, "
                   "hierarchical or direct"));
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

absl::Status RunCollective(BenchContext& ctx, Op op, DType dtype,
                           const std::string& redop_name) {
  Runtime& rt = ctx.runtime();
  const BenchConfig& cfg = ctx.config();
  const int n = ctx.mesh().size();
  const int64_t elem = static_cast<int64_t>(DTypeSize(dtype));
  const bool reduces = op == Op::kAllReduce || op == Op::kReduceScatter;
  const bool integer = dtype == DType::kI32 || dtype == DType::kI64;
  MESHDMA_ASSIGN_OR_RETURN(ReduceOp redop, ParseRedop(redop_name));
  MESHDMA_ASSIGN_OR_RETURN(CollectiveAlgorithm algorithm,
                           ParseAlgorithm(cfg.algorithm));
  CollectiveOptions options;
  options.algorithm = algorithm;
  // Pipelining knobs of CollectiveOptions (checked by ParseArgs).
  options.chunk_bytes = cfg.chunk_bytes.value_or(options.chunk_bytes);
  options.num_buffers =
      static_cast<int>(cfg.num_buffers.value_or(options.num_buffers));
  options.lane_chunk_bytes =
      cfg.lane_chunk_bytes.value_or(options.lane_chunk_bytes);
  const char* name = op == Op::kAllReduce       ? "all_reduce"
                     : op == Op::kAllGather     ? "all_gather"
                     : op == Op::kReduceScatter ? "reduce_scatter"
                                                : "all_to_all";
  const double factor =
      op == Op::kAllReduce ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
  const int64_t align = op == Op::kAllReduce ? elem : elem * n;
  const bool baseline = ctx.NoBaselineReason().empty();
  for (int64_t bytes : ctx.Sizes(align)) {
    // Per-device element counts of input and output.
    const int64_t total = bytes / elem;
    const int64_t block = total / n;
    int64_t in_count = total, out_count = total;
    if (op == Op::kAllGather) in_count = block;
    if (op == Op::kReduceScatter) out_count = block;
    // The least each device must move: its input once (all_reduce), or the
    // (n-1)/n of the total that comes from its peers.
    const int64_t bound_bytes =
        op == Op::kAllReduce ? bytes : bytes / n * (n - 1);
    const int iters = ctx.ItersFor(bytes, op == Op::kAllReduce ? 2.0 : 4.0);
    std::atomic<int64_t> wrong[2] = {0, 0};
    // Round `round` of the measurement; the first also checks the data.
    auto on_mesh = [&](int round) {
      return rt.Run(ctx.mesh(), [&]() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
        // --input private: the input in this device's ordinary memory, as a
        // caller's own buffer would be.
        std::vector<std::byte> private_input;
        ArrayRef in;
        if (cfg.input == "private") {
          private_input.resize(std::max<int64_t>(in_count * elem, 1));
          const int64_t shape[] = {in_count};
          MESHDMA_ASSIGN_OR_RETURN(
              in, ArrayRef::FromPointer(private_input.data(), dtype, shape));
        } else {
          MESHDMA_ASSIGN_OR_RETURN(in, AllocateSymmetric(dtype, {in_count}));
        }
        MESHDMA_ASSIGN_OR_RETURN(ArrayRef out,
                                 AllocateSymmetric(dtype, {out_count}));
        // Made once, as a caller that makes many calls would.
        const std::vector<std::string> axes = {"x"};
        auto call = [&](const ArrayRef& x, const ArrayRef& y) -> absl::Status {
          switch (op) {
            case Op::kAllReduce:
              return all_reduce(redop, x, y, axes, options);
            case Op::kAllGather:
              return all_gather(x, y, axes, /*tiled=*/true, options);
            case Op::kReduceScatter:
              return reduce_scatter(redop, x, y, axes, options);
            case Op::kAllToAll:
              return all_to_all(x, y, axes, 0, 0, options);
          }
          return absl::OkStatus();
        };
        // The operands of a call: out of place, or in place (views of one
        // buffer).
        struct Operands {
          ArrayRef in, out;
        };
        auto operands = [&](bool in_place) -> absl::StatusOr<Operands> {
          if (!in_place) return Operands{in, out};
          switch (op) {
            case Op::kAllReduce:
              return Operands{out, out};
            case Op::kAllGather: {
              MESHDMA_ASSIGN_OR_RETURN(ArrayRef mine,
                                       out.Slice(0, me * block, block));
              return Operands{mine, out};
            }
            case Op::kReduceScatter: {
              MESHDMA_ASSIGN_OR_RETURN(ArrayRef mine,
                                       in.Slice(0, me * block, block));
              return Operands{in, mine};
            }
            case Op::kAllToAll:
              return Operands{out, out};
          }
          return absl::InternalError("unknown collective");
        };
        for (int variant = 0; variant < 2; ++variant) {
          const bool in_place = variant == 1;
          MESHDMA_ASSIGN_OR_RETURN(Operands ops, operands(in_place));
          auto fill = [&] {
            for (int64_t i = 0; i < ops.in.num_elements(); ++i) {
              Store(ops.in, i, Value(me, i));
            }
          };
          fill();
          MESHDMA_RETURN_IF_ERROR(
              ctx.TimeOnMesh(in_place ? kInPlace : kOutOfPlace, iters,
                             [&](int k) -> absl::Status {
                               for (int i = 0; i < k; ++i) {
                                 MESHDMA_RETURN_IF_ERROR(call(ops.in, ops.out));
                               }
                               return absl::OkStatus();
                             }));
          // Checked calls: fresh inputs, the output poisoned, a closed form.
          for (int c = 0; c < (round == 0 ? cfg.check : 0); ++c) {
            if (!in_place) {
              for (int64_t i = 0; i < out_count; ++i) Store(out, i, 99);
            }
            fill();
            MESHDMA_RETURN_IF_ERROR(device_barrier());
            MESHDMA_RETURN_IF_ERROR(call(ops.in, ops.out));
            int64_t bad = 0;
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
                  want = Value(static_cast<int>(i / block),
                               me * block + i % block);
                  break;
              }
              if (dtype == DType::kU8) want = static_cast<int>(want) & 255;
              bad += !Close(Load(ops.out, i), want, dtype);
            }
            wrong[variant] += bad;
            // Nobody rewrites inputs a peer may still be reading.
            MESHDMA_RETURN_IF_ERROR(device_barrier());
          }
        }
        return ctx.TimeBound(bound_bytes, iters);
      });
    };
    // The MPI baseline: one rank per process (see NoBaselineReason).
    // MPI counts are ints.
    const bool mpi_baseline =
        baseline && total <= std::numeric_limits<int>::max();
    MpiReduction mpi;
    std::vector<char> sbuf, rbuf;
    if (mpi_baseline) {
      MakeMpiReduction(dtype, redop, &mpi);
      sbuf.assign(in_count * elem, 1);
      rbuf.assign(out_count * elem, 0);
    }
    const int b = static_cast<int>(block);
    auto mpi_call = [&] {
      switch (op) {
        case Op::kAllReduce:
          MPI_Allreduce(sbuf.data(), rbuf.data(), static_cast<int>(total),
                        mpi.type, mpi.op, MPI_COMM_WORLD);
          break;
        case Op::kAllGather:
          MPI_Allgather(sbuf.data(), b, mpi.type, rbuf.data(), b, mpi.type,
                        MPI_COMM_WORLD);
          break;
        case Op::kReduceScatter:
          MPI_Reduce_scatter_block(sbuf.data(), rbuf.data(), b, mpi.type,
                                   mpi.op, MPI_COMM_WORLD);
          break;
        case Op::kAllToAll:
          MPI_Alltoall(sbuf.data(), b, mpi.type, rbuf.data(), b, mpi.type,
                       MPI_COMM_WORLD);
          break;
      }
    };
    // In place (MPI_IN_PLACE): the result buffer holds the input (all_gather:
    // this rank's block of it; reduce_scatter: the whole input, reduced in
    // place, its first block the result).
    auto mpi_call_in_place = [&] {
      switch (op) {
        case Op::kAllReduce:
          MPI_Allreduce(MPI_IN_PLACE, rbuf.data(), static_cast<int>(total),
                        mpi.type, mpi.op, MPI_COMM_WORLD);
          break;
        case Op::kAllGather:
          MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rbuf.data(), b,
                        mpi.type, MPI_COMM_WORLD);
          break;
        case Op::kReduceScatter:
          MPI_Reduce_scatter_block(MPI_IN_PLACE, sbuf.data(), b, mpi.type,
                                   mpi.op, MPI_COMM_WORLD);
          break;
        case Op::kAllToAll:
          MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rbuf.data(), b,
                       mpi.type, MPI_COMM_WORLD);
          break;
      }
    };
    auto time_mpi = [&](const std::function<void()>& call) {
      return [&, call]() -> double {
        if (!mpi_baseline) return 0;
        return ctx.TimeMpi(iters, [&](int k) {
          for (int i = 0; i < k; ++i) call();
        });
      };
    };
    MESHDMA_ASSIGN_OR_RETURN(const BenchContext::RoundTimes times,
                             ctx.MeasureInRounds(on_mesh, time_mpi(mpi_call),
                                                 time_mpi(mpi_call_in_place)));
    Row row;
    row.collective = name;
    row.transport = ctx.Transport();
    row.dtype = std::string(NcclTypeName(dtype));
    row.redop = reduces ? redop_name : "none";
    row.bytes = bytes;
    row.count = total;
    row.devices = n;
    row.iters = iters;
    for (int variant = 0; variant < 2; ++variant) {
      const double seconds = times.seconds[variant ? kInPlace : kOutOfPlace];
      Measured& m = variant ? row.in_place : row.out_of_place;
      const int64_t w = ctx.SumOverProcesses(wrong[variant].load());
      if (seconds <= 0) continue;
      m.valid = true;
      m.time_us = seconds * 1e6;
      m.algbw_GBps = bytes / seconds / 1e9;
      m.busbw_GBps = m.algbw_GBps * factor;
      m.wrong = w;
    }
    const double bound_s = times.seconds[kBound];
    if (bound_s > 0) {
      row.bound_time_us = bound_s * 1e6;
      row.bound_busbw_GBps = bytes / bound_s / 1e9 * factor;
    }
    if (const double t = times.baseline_seconds; t > 0) {
      row.baseline_time_us = t * 1e6;
      row.baseline_busbw_GBps = bytes / t / 1e9 * factor;
    }
    row.baseline_in_place_time_us = times.baseline_in_place_seconds * 1e6;
    row.memcpy_GBps = ctx.MemcpyGBps(bytes);
    ctx.Emit(row);
  }
  return absl::OkStatus();
}

absl::Status RunAllReduce(BenchContext& ctx, DType t, const std::string& op) {
  return RunCollective(ctx, Op::kAllReduce, t, op);
}
absl::Status RunAllGather(BenchContext& ctx, DType t, const std::string& op) {
  return RunCollective(ctx, Op::kAllGather, t, op);
}
absl::Status RunReduceScatter(BenchContext& ctx, DType t,
                              const std::string& op) {
  return RunCollective(ctx, Op::kReduceScatter, t, op);
}
absl::Status RunAllToAll(BenchContext& ctx, DType t, const std::string& op) {
  return RunCollective(ctx, Op::kAllToAll, t, op);
}

}  // namespace

MESHDMA_BENCH_OP("all_reduce", RunAllReduce, /*reduces=*/true);
MESHDMA_BENCH_OP("all_gather", RunAllGather, /*reduces=*/false);
MESHDMA_BENCH_OP("reduce_scatter", RunReduceScatter, /*reduces=*/true);
MESHDMA_BENCH_OP("all_to_all", RunAllToAll, /*reduces=*/false);

}  // namespace meshdma::bench
