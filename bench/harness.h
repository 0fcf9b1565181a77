// meshdma-bench's shared harness: nccl-tests' options and output, the size
// sweep, timing on the mesh, the data check, baselines measured in the same
// run (the MPI library's own operation on the same processes, every device
// copying at once, one-thread `memcpy`), the printed table, and the JSON,
// CSV and gnuplot files.
//
// A collective registers itself with `MESHDMA_BENCH_OP(name, fn)`; `fn` runs
// once per process with the runtime up, once per (dtype, redop) of the
// command line, and calls `BenchContext::Emit` for each size it measured.
#ifndef MESHDMA_BENCH_HARNESS_H_
#define MESHDMA_BENCH_HARNESS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "meshdma/base/dtype.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/topology/mesh.h"

namespace meshdma::bench {

// How per-device times become the reported one (nccl-tests' -a).
enum class Average { kDevice0 = 0, kMean = 1, kMin = 2, kMax = 3 };

struct BenchConfig {
  std::string collective = "ppermute";        // --collective
  std::vector<int64_t> sizes;                 // From -b, -e, -f or -i.
  int64_t min_bytes = 8;                      // -b
  int64_t max_bytes = 256ll << 20;            // -e
  double factor = 2.0;                        // -f; 0 when -i steps linearly
  int64_t step_bytes = 0;                     // -i when used
  int iters = 0;                              // -n; 0: chosen per size
  int warmup = 3;                             // -w
  int repeats = 5;                            // --repeats: median of this many
  int check = 1;                              // -c: checked calls per size
  std::vector<DType> dtypes = {DType::kF32};  // -d
  std::vector<std::string> redops = {"sum"};  // -o
  int root = 0;                               // -r (echoed; no rooted ops)
  Average average = Average::kMean;           // -a
  int blocking = 0;                           // -z
  int nthreads = 1, ngpus = 1;                // -t, -g
  std::optional<int> devices_per_process;     // -t * -g when given
  double timeout_s = 0;                       // -T; 0: runtime default
  std::string json;                           // -J
  std::string csv;                            // --csv
  std::string plot;                           // --plot
  bool baseline = true;                       // --no-baseline
  std::string algorithm = "auto";             // --algo
  std::string input = "symmetric";            // --input: or "private"
  // CollectiveOptions' pipelining knobs, for tuning sweeps: --chunk-bytes,
  // --num-buffers, --lane-chunk-bytes (unset: the defaults).
  std::optional<int64_t> chunk_bytes, num_buffers, lane_chunk_bytes;
  std::vector<std::string> argv;  // The command line, echoed.
};

// Parses the command line (tools/flags.h). --help: Cancelled with the usage.
absl::StatusOr<BenchConfig> ParseArgs(int argc, char** argv);
std::string Usage();

// nccl-tests' spellings of element types and reductions.
absl::string_view NcclTypeName(DType t);  // "float", "bfloat16", ...

// One measured variant of a size: out-of-place or in-place.
struct Measured {
  bool valid = false;  // False: not supported ("N/A").
  double time_us = 0;
  double algbw_GBps = 0;
  double busbw_GBps = 0;
  int64_t wrong = 0;
};

// One line of the table and of the CSV / JSON.
struct Row {
  std::string collective;
  std::string transport;  // "direct", "shm", "mpi".
  std::string dtype;      // nccl-tests' name ("float").
  std::string redop;      // "none" for pure data movement.
  int64_t bytes = 0;      // nccl-tests "size".
  int64_t count = 0;      // Elements.
  int devices = 0;
  int iters = 0;
  Measured out_of_place, in_place;
  double baseline_time_us = 0;  // 0 when no baseline ran.
  double baseline_busbw_GBps = 0;
  // The MPI call in place (MPI_IN_PLACE); 0 when none ran.
  double baseline_in_place_time_us = 0;
  double bound_time_us = 0;  // 0 when not measured.
  double bound_busbw_GBps = 0;
  double memcpy_GBps = 0;
};

// Which of the per-device timings `RecordTime` fills.
enum TimeSlot { kOutOfPlace = 0, kInPlace = 1, kBound = 2, kNumSlots = 3 };

class BenchContext {
 public:
  BenchContext(Runtime* runtime, BenchConfig config);

  Runtime& runtime() { return *runtime_; }
  const BenchConfig& config() const { return config_; }
  const Mesh& mesh() const { return mesh_; }
  int rank() const { return runtime_->launch().rank(); }
  int num_processes() const { return runtime_->launch().num_processes(); }
  // The sweep, each size rounded down to a multiple of `align` (at least
  // `align`), duplicates dropped.
  std::vector<int64_t> Sizes(int64_t align) const;
  // Iterations for a size when -n is unset: about 40 ms at `guess_GBps`.
  int ItersFor(int64_t bytes, double guess_GBps = 5.0) const;
  // The path between device 0 and device 1 of the mesh.
  std::string Transport() const;
  // Why there is no MPI baseline for `dtype`, or "" when there is one.
  std::string NoBaselineReason() const;
  // Single-thread `memcpy` bandwidth between two cold `bytes` buffers
  // (median of repeats), measured on this process's main thread.
  double MemcpyGBps(int64_t bytes) const;

  // One size, measured in --repeats rounds. Each round runs `on_mesh(round)`
  // (a `Runtime::Run` whose TimeOnMesh and TimeBound calls time one repeat
  // each), then `baseline()` (seconds per iteration of the MPI baseline, one
  // repeat by TimeMpi; 0 for none). A slow spell of a shared machine then
  // falls on meshdma and its baselines alike, not on one side of a ratio.
  // `baseline_in_place`, when given, times the MPI call in place right after
  // `baseline`. Returns, per slot and for each baseline, the median over the
  // rounds (0 when nothing was measured).
  struct RoundTimes {
    double seconds[kNumSlots] = {};
    double baseline_seconds = 0;
    double baseline_in_place_seconds = 0;
  };
  absl::StatusOr<RoundTimes> MeasureInRounds(
      const std::function<absl::Status(int round)>& on_mesh,
      const std::function<double()>& baseline,
      const std::function<double()>& baseline_in_place = {});

  // On a device: runs `body(iters)` -w times, then once more between device
  // barriers, timed, and records this device's seconds per iteration in
  // `slot` (one repeat of MeasureInRounds).
  absl::Status TimeOnMesh(TimeSlot slot, int iters,
                          const std::function<absl::Status(int iters)>& body);
  // On a device: every device copies `bytes` at once, one way from one
  // private buffer of fresh pages into another, timed like the collective
  // (`kBound`): the memory-traffic bound.
  absl::Status TimeBound(int64_t bytes, int iters);
  // After `Runtime::Run`: the time of `slot` in seconds per iteration as -a
  // asks (agreed by every process), or 0 if nothing was recorded; clears it.
  double TakeTime(TimeSlot slot);
  // Times `body(iters)` on each process's main thread after a warm-up of
  // `-w` iterations, between MPI barriers: seconds per iteration of the
  // slowest process (one repeat of MeasureInRounds).
  double TimeMpi(int iters, const std::function<void(int iters)>& body) const;
  // Sums `v` over processes (a number counted on each).
  int64_t SumOverProcesses(int64_t v) const;

  // Prints the row (rank 0) and keeps it for the files.
  void Emit(const Row& row);
  // Prints the footer and writes the JSON, CSV and PNG if asked for.
  absl::Status Finish();
  // #wrong over every row emitted so far (the same on every process).
  int64_t wrong() const;

 private:
  void PrintHeader(const Row& first);
  // The --csv and -J files of every row so far (`avg_bw` and `wrong` as the
  // footer gives them).
  absl::Status WriteCsv() const;
  absl::Status WriteJson(double avg_bw, int64_t wrong) const;
  // Draws the first (dtype, redop) series with gnuplot into --plot.
  absl::Status Plot() const;

  Runtime* runtime_;
  BenchConfig config_;
  Mesh mesh_;
  std::vector<Row> rows_;
  bool header_printed_ = false;
  std::mutex times_mu_;
  // Per slot: (logical device, seconds) recorded by this process's devices.
  std::vector<std::pair<int, double>> times_[kNumSlots];
};

using OpFn = std::function<absl::Status(BenchContext&, DType dtype,
                                        const std::string& redop)>;
struct OpInfo {
  OpFn fn;
  bool reduces = false;  // Takes -o.
};
std::map<std::string, OpInfo>& Registry();
struct Registrar {
  Registrar(const std::string& name, OpFn fn, bool reduces) {
    Registry()[name] = {std::move(fn), reduces};
  }
};
#define MESHDMA_BENCH_OP(name, fn, reduces)                                 \
  static ::meshdma::bench::Registrar meshdma_bench_registrar_##fn(name, fn, \
                                                                  reduces)

}  // namespace meshdma::bench

#endif  // MESHDMA_BENCH_HARNESS_H_
