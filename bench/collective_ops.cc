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

// One size of one collective: what every step below reads.
struct SizeCase {
  Op op;
  DType dtype;
  ReduceOp redop;
  CollectiveOptions options;
  int n;
  int64_t bytes;
  int64_t total;  // Elements of the size (nccl-tests' count).
  int64_t block;  // total / n.
  // Per-device element counts of input and output.
  int64_t in_count, out_count;
  int iters;
};

absl::Status CallCollective(const SizeCase& c, const ArrayRef& x,
                            const ArrayRef& y) {
  // Made once, as a caller that makes many calls would.
  static const std::vector<std::string> axes = {"x"};
  switch (c.op) {
    case Op::kAllReduce:
      return all_reduce(c.redop, x, y, axes, c.options);
    case Op::kAllGather:
      return all_gather(x, y, axes, /*tiled=*/true, c.options);
    case Op::kReduceScatter:
      return reduce_scatter(c.redop, x, y, axes, c.options);
    case Op::kAllToAll:
      return all_to_all(x, y, axes, 0, 0, c.options);
  }
  return absl::OkStatus();
}

// The operands of a call on device `me`: out of place, or in place (views of
// one buffer).
struct Operands {
  ArrayRef in, out;
};
absl::StatusOr<Operands> OperandsOf(const SizeCase& c, int me,
                                    const ArrayRef& in, const ArrayRef& out,
                                    bool in_place) {
  if (!in_place) return Operands{in, out};
  switch (c.op) {
    case Op::kAllReduce:
    case Op::kAllToAll:
      return Operands{out, out};
    case Op::kAllGather: {
      MESHDMA_ASSIGN_OR_RETURN(ArrayRef mine,
                               out.Slice(0, me * c.block, c.block));
      return Operands{mine, out};
    }
    case Op::kReduceScatter: {
      MESHDMA_ASSIGN_OR_RETURN(ArrayRef mine,
                               in.Slice(0, me * c.block, c.block));
      return Operands{in, mine};
    }
  }
  return absl::InternalError("unknown collective");
}

// The closed form of element `i` of device `me`'s output.
double Want(const SizeCase& c, int me, int64_t i) {
  const bool integer = c.dtype == DType::kI32 || c.dtype == DType::kI64;
  double want = 0;
  switch (c.op) {
    case Op::kAllReduce:
      want = Reduce(c.redop, c.n, i, integer);
      break;
    case Op::kReduceScatter:
      want = Reduce(c.redop, c.n, me * c.block + i, integer);
      break;
    case Op::kAllGather:
      want = Value(static_cast<int>(i / c.block), i % c.block);
      break;
    case Op::kAllToAll:
      want = Value(static_cast<int>(i / c.block), me * c.block + i % c.block);
      break;
  }
  return c.dtype == DType::kU8 ? static_cast<int>(want) & 255 : want;
}

// On a device: times the call out of place and in place, then the bound; in
// round 0 also -c checked calls of each (fresh inputs, the output poisoned,
// the closed form), counting mismatches in `wrong[variant]`.
absl::Status MeasureOnDevice(BenchContext& ctx, const SizeCase& c, int round,
                             std::atomic<int64_t>* wrong) {
  const BenchConfig& cfg = ctx.config();
  MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
  // --input private: the input in this device's ordinary memory, as a
  // caller's own buffer would be.
  std::vector<std::byte> private_input;
  ArrayRef in;
  if (cfg.input == "private") {
    private_input.resize(std::max<int64_t>(
        c.in_count * static_cast<int64_t>(DTypeSize(c.dtype)), 1));
    const int64_t shape[] = {c.in_count};
    MESHDMA_ASSIGN_OR_RETURN(
        in, ArrayRef::FromPointer(private_input.data(), c.dtype, shape));
  } else {
    MESHDMA_ASSIGN_OR_RETURN(in, AllocateSymmetric(c.dtype, {c.in_count}));
  }
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef out,
                           AllocateSymmetric(c.dtype, {c.out_count}));
  for (int variant = 0; variant < 2; ++variant) {
    const bool in_place = variant == 1;
    MESHDMA_ASSIGN_OR_RETURN(Operands ops,
                             OperandsOf(c, me, in, out, in_place));
    auto fill = [&] {
      for (int64_t i = 0; i < ops.in.num_elements(); ++i) {
        Store(ops.in, i, Value(me, i));
      }
    };
    fill();
    MESHDMA_RETURN_IF_ERROR(ctx.TimeOnMesh(
        in_place ? kInPlace : kOutOfPlace, c.iters, [&](int k) -> absl::Status {
          for (int i = 0; i < k; ++i) {
            MESHDMA_RETURN_IF_ERROR(CallCollective(c, ops.in, ops.out));
          }
          return absl::OkStatus();
        }));
    for (int check = 0; check < (round == 0 ? cfg.check : 0); ++check) {
      if (!in_place) {
        for (int64_t i = 0; i < c.out_count; ++i) Store(out, i, 99);
      }
      fill();
      MESHDMA_RETURN_IF_ERROR(device_barrier());
      MESHDMA_RETURN_IF_ERROR(CallCollective(c, ops.in, ops.out));
      int64_t bad = 0;
      for (int64_t i = 0; i < c.out_count; ++i) {
        bad += !Close(Load(ops.out, i), Want(c, me, i), c.dtype);
      }
      wrong[variant] += bad;
      // Nobody rewrites inputs a peer may still be reading.
      MESHDMA_RETURN_IF_ERROR(device_barrier());
    }
  }
  // The least each device must move: its input once (all_reduce), or the
  // (n-1)/n of the total that comes from its peers.
  return ctx.TimeBound(
      c.op == Op::kAllReduce ? c.bytes : c.bytes / c.n * (c.n - 1), c.iters);
}

// The MPI baseline of a size on this process's main thread: one rank per
// process (see NoBaselineReason), element counts that fit MPI's ints.
class MpiBaseline {
 public:
  MpiBaseline(const SizeCase& c, bool enabled) : c_(c), enabled_(enabled) {
    if (!enabled_) return;
    MakeMpiReduction(c.dtype, c.redop, &mpi_);
    const int64_t elem = DTypeSize(c.dtype);
    sbuf_.assign(c.in_count * elem, 1);
    rbuf_.assign(c.out_count * elem, 0);
  }
  // Seconds per call, out of place or in place; 0 when disabled.
  double Time(BenchContext& ctx, bool in_place) {
    if (!enabled_) return 0;
    return ctx.TimeMpi(c_.iters, [&](int k) {
      for (int i = 0; i < k; ++i) Call(in_place);
    });
  }

 private:
  // In place (MPI_IN_PLACE) the result buffer holds the input (all_gather:
  // this rank's block of it; reduce_scatter: the whole input, reduced in
  // place, its first block the result).
  void Call(bool in_place) {
    const int b = static_cast<int>(c_.block);
    void* send = in_place ? MPI_IN_PLACE : sbuf_.data();
    switch (c_.op) {
      case Op::kAllReduce:
        MPI_Allreduce(send, rbuf_.data(), static_cast<int>(c_.total), mpi_.type,
                      mpi_.op, MPI_COMM_WORLD);
        break;
      case Op::kAllGather:
        MPI_Allgather(send, in_place ? 0 : b, mpi_.type, rbuf_.data(), b,
                      mpi_.type, MPI_COMM_WORLD);
        break;
      case Op::kReduceScatter:
        MPI_Reduce_scatter_block(send, in_place ? sbuf_.data() : rbuf_.data(),
                                 b, mpi_.type, mpi_.op, MPI_COMM_WORLD);
        break;
      case Op::kAllToAll:
        MPI_Alltoall(send, in_place ? 0 : b, mpi_.type, rbuf_.data(), b,
                     mpi_.type, MPI_COMM_WORLD);
        break;
    }
  }

  const SizeCase& c_;
  const bool enabled_;
  MpiReduction mpi_;
  std::vector<char> sbuf_, rbuf_;
};

// The row of a size from its median times.
Row MakeRow(BenchContext& ctx, const SizeCase& c, const std::string& name,
            const std::string& redop_name,
            const BenchContext::RoundTimes& times,
            const std::atomic<int64_t>* wrong) {
  const double factor = c.op == Op::kAllReduce
                            ? 2.0 * (c.n - 1) / c.n
                            : static_cast<double>(c.n - 1) / c.n;
  const bool reduces = c.op == Op::kAllReduce || c.op == Op::kReduceScatter;
  Row row;
  row.collective = name;
  row.transport = ctx.Transport();
  row.dtype = std::string(NcclTypeName(c.dtype));
  row.redop = reduces ? redop_name : "none";
  row.bytes = c.bytes;
  row.count = c.total;
  row.devices = c.n;
  row.iters = c.iters;
  for (int variant = 0; variant < 2; ++variant) {
    const double seconds = times.seconds[variant ? kInPlace : kOutOfPlace];
    Measured& m = variant ? row.in_place : row.out_of_place;
    const int64_t w = ctx.SumOverProcesses(wrong[variant].load());
    if (seconds <= 0) continue;
    m.valid = true;
    m.time_us = seconds * 1e6;
    m.algbw_GBps = c.bytes / seconds / 1e9;
    m.busbw_GBps = m.algbw_GBps * factor;
    m.wrong = w;
  }
  if (const double t = times.seconds[kBound]; t > 0) {
    row.bound_time_us = t * 1e6;
    row.bound_busbw_GBps = c.bytes / t / 1e9 * factor;
  }
  if (const double t = times.baseline_seconds; t > 0) {
    row.baseline_time_us = t * 1e6;
    row.baseline_busbw_GBps = c.bytes / t / 1e9 * factor;
  }
  row.baseline_in_place_time_us = times.baseline_in_place_seconds * 1e6;
  row.memcpy_GBps = ctx.MemcpyGBps(c.bytes);
  return row;
}

absl::Status RunCollective(BenchContext& ctx, Op op, DType dtype,
                           const std::string& redop_name) {
  const BenchConfig& cfg = ctx.config();
  SizeCase c{op, dtype};
  c.n = ctx.mesh().size();
  const int64_t elem = static_cast<int64_t>(DTypeSize(dtype));
  MESHDMA_ASSIGN_OR_RETURN(c.redop, ParseRedop(redop_name));
  MESHDMA_ASSIGN_OR_RETURN(c.options.algorithm, ParseAlgorithm(cfg.algorithm));
  // Pipelining knobs of CollectiveOptions (checked by ParseArgs).
  c.options.chunk_bytes = cfg.chunk_bytes.value_or(c.options.chunk_bytes);
  c.options.num_buffers =
      static_cast<int>(cfg.num_buffers.value_or(c.options.num_buffers));
  c.options.lane_chunk_bytes =
      cfg.lane_chunk_bytes.value_or(c.options.lane_chunk_bytes);
  const char* name = op == Op::kAllReduce       ? "all_reduce"
                     : op == Op::kAllGather     ? "all_gather"
                     : op == Op::kReduceScatter ? "reduce_scatter"
                                                : "all_to_all";
  const bool baseline = ctx.NoBaselineReason().empty();
  for (int64_t bytes : ctx.Sizes(op == Op::kAllReduce ? elem : elem * c.n)) {
    c.bytes = bytes;
    c.total = bytes / elem;
    c.block = c.total / c.n;
    c.in_count = op == Op::kAllGather ? c.block : c.total;
    c.out_count = op == Op::kReduceScatter ? c.block : c.total;
    c.iters = ctx.ItersFor(bytes, op == Op::kAllReduce ? 2.0 : 4.0);
    std::atomic<int64_t> wrong[2] = {0, 0};
    MpiBaseline mpi(c, baseline && c.total <= std::numeric_limits<int>::max());
    // Each round: the devices, then MPI out of place and in place.
    MESHDMA_ASSIGN_OR_RETURN(
        const BenchContext::RoundTimes times,
        ctx.MeasureInRounds(
            [&](int round) {
              return ctx.runtime().Run(ctx.mesh(), [&]() {
                return MeasureOnDevice(ctx, c, round, wrong);
              });
            },
            [&] { return mpi.Time(ctx, /*in_place=*/false); },
            [&] { return mpi.Time(ctx, /*in_place=*/true); }));
    ctx.Emit(MakeRow(ctx, c, name, redop_name, times, wrong));
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
