// --collective ppermute: every device pushes `size` bytes to its right
// neighbour and waits for its left neighbour's (the tutorial's right
// permute, repeated): one remote DMA and its waits per call, inside one
// kernel. --collective ppermute_call: the same shift as calls of the
// collective `ppermute` (collectives.h), each a call of its own (its
// channel for small sizes, a kernel above). --collective ppermute_pallas:
// the same shift as back-to-back `pallas_call`s, each with its DMA
// semaphores as scratch, so each starts with the entry barrier (the safe
// default); --collective ppermute_pallas_handshake: the same calls with the
// named opt-out `entry_barrier = false` and the handshake such a kernel must
// then do itself (each device signals its left neighbour's barrier semaphore
// and waits for its right one's, so that its DMA cannot land in the right
// neighbour's previous call): the difference is the entry barrier's cost
// per call. Baseline: MPI_Sendrecv around
// the same ring of processes. busbw = algbw; the bound is every device
// copying `size` bytes at once. There is no in-place form (a device would
// overwrite the bytes its neighbour is still reading).
#include <mpi.h>

#include <atomic>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "bench/harness.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/ppermute.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/semaphore.h"
#include "meshdma/dma/symmetric_memory.h"
#include "meshdma/kernels/pallas_call.h"

namespace meshdma::bench {
namespace {

uint8_t Pattern(int device, int64_t i) {
  return static_cast<uint8_t>((device * 73 + i * 11 + (i >> 10)) & 0xff);
}

// How each shift is made.
enum class Form { kDma, kCollective, kPallas, kPallasHandshake };

const char* FormName(Form form) {
  switch (form) {
    case Form::kDma:
      return "ppermute";
    case Form::kCollective:
      return "ppermute_call";
    case Form::kPallas:
      return "ppermute_pallas";
    case Form::kPallasHandshake:
      return "ppermute_pallas_handshake";
  }
  return "?";
}

// One shift of `src` into the right neighbour's `dst` as a `pallas_call` of
// its own: with the default entry barrier (the call communicates), or with
// the opt-out and its own handshake.
absl::Status PallasShift(const ArrayRef& src, const ArrayRef& dst, int left,
                         int right, bool handshake) {
  PallasCallParams params{
      .name = "bench_ppermute_pallas",
      .scratch_shapes = {SemaphoreShape(SemaphoreType::kDma, 2)},
      .entry_barrier =
          handshake ? std::optional<bool>(false) : std::optional<bool>(),
      .collective_id =
          handshake ? std::optional<int>(0) : std::optional<int>()};
  return pallas_call(
      params,
      [&](const KernelArgs& args) -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(SemaphoreArray sems, args.semaphores(0));
        if (handshake) {
          // "I am in this call": my left neighbour may send to me.
          MESHDMA_ASSIGN_OR_RETURN(Semaphore barrier, get_barrier_semaphore());
          MESHDMA_RETURN_IF_ERROR(semaphore_signal(
              barrier, 1, DeviceId(int64_t{left}), DeviceIdType::kLogical));
          MESHDMA_RETURN_IF_ERROR(semaphore_wait(barrier, 1));
        }
        auto copy = make_async_remote_copy(src, dst, sems[0], sems[1], right);
        MESHDMA_RETURN_IF_ERROR(copy.start());
        return copy.wait();
      },
      {}, {});
}

absl::Status RunPpermute(BenchContext& ctx, DType dtype, Form form) {
  const bool collective = form == Form::kCollective;
  Runtime& rt = ctx.runtime();
  const int n = ctx.mesh().size();
  const int64_t elem = static_cast<int64_t>(DTypeSize(dtype));
  const bool baseline = ctx.NoBaselineReason().empty();
  for (int64_t bytes : ctx.Sizes(elem)) {
    const int iters = ctx.ItersFor(bytes);
    std::atomic<int64_t> wrong{0};
    // Round `round` of the measurement; the first also checks the data.
    auto on_mesh = [&](int round) {
      return rt.Run(ctx.mesh(), [&]() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
        MESHDMA_ASSIGN_OR_RETURN(auto src, AllocateSymmetric<uint8_t>({bytes}));
        MESHDMA_ASSIGN_OR_RETURN(auto dst, AllocateSymmetric<uint8_t>({bytes}));
        uint8_t* s = src.data_as<uint8_t>();
        uint8_t* d = dst.data_as<uint8_t>();
        for (int64_t i = 0; i < bytes; ++i) s[i] = Pattern(me, i);
        // Times `once`, then makes the checked calls: the destination
        // poisoned, then compared with the left neighbour's pattern (a barrier
        // on either side: a raw DMA waits for nobody's reads).
        auto time_and_check =
            [&](absl::FunctionRef<absl::Status()> once) -> absl::Status {
          MESHDMA_RETURN_IF_ERROR(
              ctx.TimeOnMesh(kOutOfPlace, iters, [&](int k) -> absl::Status {
                for (int i = 0; i < k; ++i) MESHDMA_RETURN_IF_ERROR(once());
                return absl::OkStatus();
              }));
          const int left = (me + n - 1) % n;
          for (int c = 0; c < (round == 0 ? ctx.config().check : 0); ++c) {
            std::memset(d, 0x5a ^ Pattern(left, 0), bytes);
            MESHDMA_RETURN_IF_ERROR(device_barrier());
            MESHDMA_RETURN_IF_ERROR(once());
            int64_t bad = 0;
            for (int64_t i = 0; i < bytes; ++i) bad += d[i] != Pattern(left, i);
            wrong += bad;
            MESHDMA_RETURN_IF_ERROR(device_barrier());
          }
          return absl::OkStatus();
        };
        if (form == Form::kPallas || form == Form::kPallasHandshake) {
          MESHDMA_RETURN_IF_ERROR(time_and_check([&] {
            return PallasShift(src, dst, (me + n - 1) % n, (me + 1) % n,
                               form == Form::kPallasHandshake);
          }));
        } else if (collective) {
          // Made once, as a caller that makes many calls would.
          const std::vector<std::string> axes = {"x"};
          std::vector<std::pair<int, int>> shift;
          for (int i = 0; i < n; ++i) shift.push_back({i, (i + 1) % n});
          MESHDMA_RETURN_IF_ERROR(
              time_and_check([&] { return ppermute(src, dst, axes, shift); }));
        } else {
          MESHDMA_RETURN_IF_ERROR(
              RunKernel({.name = "bench_ppermute"}, [&]() -> absl::Status {
                MESHDMA_ASSIGN_OR_RETURN(
                    auto send, AllocateSemaphore(SemaphoreType::kDma, "send"));
                MESHDMA_ASSIGN_OR_RETURN(
                    auto recv, AllocateSemaphore(SemaphoreType::kDma, "recv"));
                auto copy =
                    make_async_remote_copy(src, dst, send, recv, (me + 1) % n);
                return time_and_check([&]() -> absl::Status {
                  MESHDMA_RETURN_IF_ERROR(copy.start());
                  return copy.wait();
                });
              }));
        }
        return ctx.TimeBound(bytes, iters);
      });
    };
    // The baseline: MPI_Sendrecv around the same ring (MPI counts are ints).
    std::vector<char> sbuf, rbuf;
    const bool mpi = baseline && bytes <= std::numeric_limits<int>::max();
    if (mpi) {
      sbuf.assign(bytes, 1);
      rbuf.assign(bytes, 0);
    }
    const int p = ctx.num_processes(), r = ctx.rank();
    MESHDMA_ASSIGN_OR_RETURN(
        const BenchContext::RoundTimes times,
        ctx.MeasureInRounds(on_mesh, [&]() -> double {
          if (!mpi) return 0;
          return ctx.TimeMpi(iters, [&](int k) {
            for (int i = 0; i < k; ++i) {
              MPI_Sendrecv(sbuf.data(), static_cast<int>(bytes), MPI_BYTE,
                           (r + 1) % p, 0, rbuf.data(), static_cast<int>(bytes),
                           MPI_BYTE, (r + p - 1) % p, 0, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE);
            }
          });
        }));
    Row row;
    row.collective = FormName(form);
    row.transport = ctx.Transport();
    row.dtype = std::string(NcclTypeName(dtype));
    row.redop = "none";
    row.bytes = bytes;
    row.count = bytes / elem;
    row.devices = n;
    row.iters = iters;
    const double seconds = times.seconds[kOutOfPlace];
    row.out_of_place.valid = seconds > 0;
    row.out_of_place.time_us = seconds * 1e6;
    row.out_of_place.algbw_GBps = bytes / seconds / 1e9;
    row.out_of_place.busbw_GBps = row.out_of_place.algbw_GBps;
    row.out_of_place.wrong = ctx.SumOverProcesses(wrong.load());
    const double bound_s = times.seconds[kBound];
    if (bound_s > 0) {
      row.bound_time_us = bound_s * 1e6;
      row.bound_busbw_GBps = bytes / bound_s / 1e9;
    }
    if (const double t = times.baseline_seconds; t > 0) {
      row.baseline_time_us = t * 1e6;
      row.baseline_busbw_GBps = bytes / t / 1e9;
    }
    row.memcpy_GBps = ctx.MemcpyGBps(bytes);
    ctx.Emit(row);
  }
  return absl::OkStatus();
}

absl::Status RunPpermuteDma(BenchContext& ctx, DType dtype,
                            const std::string&) {
  return RunPpermute(ctx, dtype, Form::kDma);
}

absl::Status RunPpermuteCalls(BenchContext& ctx, DType dtype,
                              const std::string&) {
  return RunPpermute(ctx, dtype, Form::kCollective);
}

absl::Status RunPpermutePallas(BenchContext& ctx, DType dtype,
                               const std::string&) {
  return RunPpermute(ctx, dtype, Form::kPallas);
}

absl::Status RunPpermutePallasHandshake(BenchContext& ctx, DType dtype,
                                        const std::string&) {
  return RunPpermute(ctx, dtype, Form::kPallasHandshake);
}

}  // namespace

MESHDMA_BENCH_OP("ppermute", RunPpermuteDma, /*reduces=*/false);
MESHDMA_BENCH_OP("ppermute_call", RunPpermuteCalls, /*reduces=*/false);
MESHDMA_BENCH_OP("ppermute_pallas", RunPpermutePallas, /*reduces=*/false);
MESHDMA_BENCH_OP("ppermute_pallas_handshake", RunPpermutePallasHandshake,
                 /*reduces=*/false);

}  // namespace meshdma::bench
