// --op ppermute: every device pushes `size` bytes to its right neighbour and
// waits for its left neighbour's (the tutorial's right permute, repeated).
// Baseline: MPI_Sendrecv around the same ring of processes. busbw = algbw.
#include <mpi.h>

#include <atomic>
#include <cstring>

#include "meshdma/base/status_macros.h"
#include "bench/harness.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/symmetric_memory.h"

namespace meshdma::bench {
namespace {

uint8_t Pattern(int device, int64_t i) {
  return static_cast<uint8_t>((device * 73 + i * 11 + (i >> 10)) & 0xff);
}

absl::Status RunPpermute(BenchContext& ctx) {
  Runtime& rt = ctx.runtime();
  const int n = ctx.mesh().size();
  const int64_t elem = static_cast<int64_t>(DTypeSize(ctx.config().dtype));
  for (int64_t bytes : ctx.Sizes(elem)) {
    const int iters = ctx.ItersFor(bytes);
    double seconds = 0;
    std::atomic<int64_t> wrong{0};
    MESHDMA_RETURN_IF_ERROR(rt.Run(ctx.mesh(), [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
      MESHDMA_ASSIGN_OR_RETURN(auto src, AllocateSymmetric<uint8_t>({bytes}));
      MESHDMA_ASSIGN_OR_RETURN(auto dst, AllocateSymmetric<uint8_t>({bytes}));
      for (int64_t i = 0; i < bytes; ++i)
        src.data_as<uint8_t>()[i] = Pattern(me, i);
      return RunKernel({.name = "bench_ppermute"}, [&]() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(
            auto send, AllocateSemaphore(SemaphoreType::kDma, "send"));
        MESHDMA_ASSIGN_OR_RETURN(
            auto recv, AllocateSemaphore(SemaphoreType::kDma, "recv"));
        auto copy = make_async_remote_copy(src, dst, send, recv, (me + 1) % n);
        MESHDMA_ASSIGN_OR_RETURN(
            double t, ctx.TimeOnMesh(iters, [&](int k) -> absl::Status {
              for (int i = 0; i < k; ++i) {
                MESHDMA_RETURN_IF_ERROR(copy.start());
                MESHDMA_RETURN_IF_ERROR(copy.wait());
              }
              return absl::OkStatus();
            }));
        if (me == 0) seconds = t;
        if (ctx.config().check) {
          const int left = (me + n - 1) % n;
          int64_t bad = 0;
          for (int64_t i = 0; i < bytes; ++i) {
            bad += dst.data_as<uint8_t>()[i] != Pattern(left, i);
          }
          wrong += bad;
        }
        return device_barrier();
      });
    }));
    Row row;
    row.op = "ppermute";
    row.transport = ctx.Transport();
    row.dtype = std::string(DTypeName(ctx.config().dtype));
    row.redop = "-";
    row.bytes = bytes;
    row.count = bytes / elem;
    row.devices = n;
    // Device 0 (on rank 0) measured; every rank agrees on its figure.
    if (ctx.num_processes() > 1)
      MPI_Bcast(&seconds, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    row.time_us = seconds * 1e6;
    row.algbw_GBps = bytes / seconds / 1e9;
    row.busbw_GBps = row.algbw_GBps;
    row.wrong = ctx.SumOverProcesses(wrong.load());
    if (ctx.config().baseline && ctx.num_processes() > 1) {
      std::vector<char> sbuf(bytes, 1), rbuf(bytes, 0);
      const int p = ctx.num_processes(), r = ctx.rank();
      const double t = ctx.TimeMpi(iters, [&](int k) {
        for (int i = 0; i < k; ++i) {
          MPI_Sendrecv(sbuf.data(), static_cast<int>(bytes), MPI_BYTE,
                       (r + 1) % p, 0, rbuf.data(), static_cast<int>(bytes),
                       MPI_BYTE, (r + p - 1) % p, 0, MPI_COMM_WORLD,
                       MPI_STATUS_IGNORE);
        }
      });
      row.baseline_time_us = t * 1e6;
      row.baseline_busbw_GBps = bytes / t / 1e9;
    }
    row.memcpy_GBps = ctx.MemcpyGBps(bytes);
    ctx.Emit(row);
  }
  return absl::OkStatus();
}

}  // namespace

MESHDMA_BENCH_OP("ppermute", RunPpermute);

}  // namespace meshdma::bench
