// meshdma-bench's shared harness: options in the nccl-tests style, the size
// sweep, timing on the mesh, baselines measured in the same run (the MPI
// library's own operation on the same processes, and `memcpy`), the printed
// table, the CSV file and the gnuplot PNG.
//
// An operation registers itself with `MESHDMA_BENCH_OP(name, fn)`; `fn` runs
// once per process with the runtime up and calls `BenchContext::Emit` for each
// size it measured.
#ifndef MESHDMA_BENCH_HARNESS_H_
#define MESHDMA_BENCH_HARNESS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "meshdma/base/dtype.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/topology/mesh.h"

namespace meshdma::bench {

struct BenchConfig {
  std::string op = "ppermute";
  int64_t min_bytes = 8;            // -b
  int64_t max_bytes = 256ll << 20;  // -e
  double factor = 2.0;              // -f
  int iters = 0;                    // -n; 0: chosen per size (~0.2 s each)
  int warmup = 3;                   // -w
  int repeats = 5;                  // -r: the median of this many timings
  DType dtype = DType::kF32;        // -d
  std::string redop = "sum";        // -o / --redop
  std::string csv;                  // --csv FILE
  std::string plot;                 // --plot FILE.png
  bool check = true;                // -c 0 turns the data check off
  bool baseline = true;             // --no-baseline skips MPI
  std::string algorithm;            // --algo, op-specific
};

absl::StatusOr<BenchConfig> ParseArgs(int argc, char** argv);
std::string Usage();

// One line of the table and of the CSV.
struct Row {
  std::string op;
  std::string transport;  // "local", "shm", "mpi" or "mixed".
  std::string dtype;
  std::string redop;  // "-" for pure data movement.
  int64_t bytes = 0;  // nccl-tests "size".
  int64_t count = 0;  // Elements.
  int devices = 0;
  double time_us = 0;
  double algbw_GBps = 0;
  double busbw_GBps = 0;
  double baseline_time_us = 0;  // 0 when no baseline ran.
  double baseline_busbw_GBps = 0;
  double memcpy_GBps = 0;
  int64_t wrong = 0;
};

class BenchContext {
 public:
  BenchContext(Runtime* runtime, BenchConfig config);

  Runtime& runtime() { return *runtime_; }
  const BenchConfig& config() const { return config_; }
  const Mesh& mesh() const { return mesh_; }
  int rank() const { return runtime_->launch().rank(); }
  int num_processes() const { return runtime_->launch().num_processes(); }
  // Sizes from -b to -e by factor -f, each rounded to a multiple of `align`.
  std::vector<int64_t> Sizes(int64_t align) const;
  // Iterations for a size when -n is unset: about 0.2 s at `guess_GBps`.
  int ItersFor(int64_t bytes, double guess_GBps = 5.0) const;
  // The transport between device 0 and device 1 of the mesh.
  std::string Transport() const;
  // Single-thread `memcpy` bandwidth between two cold `bytes` buffers
  // (median of repeats), measured on this process's main thread.
  double MemcpyGBps(int64_t bytes) const;
  // Runs `body(iters)` on every device `repeats` times between device
  // barriers and returns the median seconds per iteration (as seen by the
  // slowest device, agreed across processes).
  absl::StatusOr<double> TimeOnMesh(
      int iters, const std::function<absl::Status(int iters)>& body);
  // Times `body(iters)` on each process's main thread between MPI barriers:
  // the median seconds per iteration, max over processes.
  double TimeMpi(int iters, const std::function<void(int iters)>& body) const;
  // Sums `v` over processes (a number counted on each).
  int64_t SumOverProcesses(int64_t v) const;

  // Prints the row (rank 0) and keeps it for the CSV and the plot.
  void Emit(const Row& row);
  // Writes the CSV and the PNG if asked for.
  absl::Status Finish();

 private:
  Runtime* runtime_;
  BenchConfig config_;
  Mesh mesh_;
  std::vector<Row> rows_;
  bool header_printed_ = false;
};

using OpFn = std::function<absl::Status(BenchContext&)>;
std::map<std::string, OpFn>& Registry();
struct Registrar {
  Registrar(const std::string& name, OpFn fn) {
    Registry()[name] = std::move(fn);
  }
};
#define MESHDMA_BENCH_OP(name, fn) \
  static ::meshdma::bench::Registrar meshdma_bench_registrar_##fn(name, fn)

}  // namespace meshdma::bench

#endif  // MESHDMA_BENCH_HARNESS_H_
