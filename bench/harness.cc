#include "bench/harness.h"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/topology/launch.h"

namespace meshdma::bench {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

absl::StatusOr<int64_t> ParseSize(const std::string& s) {
  // "8", "4K", "1M", "256M", "1G".
  int64_t mult = 1;
  std::string num = s;
  if (!s.empty()) {
    switch (s.back()) {
      case 'K':
      case 'k':
        mult = 1 << 10;
        num.pop_back();
        break;
      case 'M':
      case 'm':
        mult = 1 << 20;
        num.pop_back();
        break;
      case 'G':
      case 'g':
        mult = 1 << 30;
        num.pop_back();
        break;
    }
  }
  int64_t v = 0;
  if (!absl::SimpleAtoi(num, &v) || v <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("bad size '", s, "'"));
  }
  return v * mult;
}

absl::StatusOr<DType> ParseDType(const std::string& s) {
  for (DType t : {DType::kU8, DType::kI32, DType::kI64, DType::kF16,
                  DType::kBF16, DType::kF32, DType::kF64}) {
    if (s == std::string(DTypeName(t))) return t;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", s, "' (u8 i32 i64 f16 bf16 f32 f64)"));
}

bool Launched() { return LaunchedByMpi(); }

}  // namespace

std::string Usage() {
  std::string ops;
  for (const auto& [name, fn] : Registry()) absl::StrAppend(&ops, " ", name);
  return absl::StrCat(
      "usage: meshdma-bench [--op NAME] [-b MIN] [-e MAX] [-f FACTOR] [-n "
      "ITERS]\n"
      "                     [-w WARMUP] [-r REPEATS] [-d DTYPE] [-o|--redop "
      "OP]\n"
      "                     [--algo NAME] [--csv FILE] [--plot FILE.png]\n"
      "                     [-c 0|1] [--no-baseline]\n"
      "  ops:",
      ops,
      "\n"
      "  sizes take K/M/G suffixes; defaults -b 8 -e 256M -f 2 -d f32\n"
      "  Devices: MESHDMA_DEVICES_PER_PROCESS; run under mpirun for "
      "processes.\n");
}

absl::StatusOr<BenchConfig> ParseArgs(int argc, char** argv) {
  BenchConfig c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> absl::StatusOr<std::string> {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(absl::StrCat(a, " needs a value"));
      }
      return std::string(argv[++i]);
    };
    if (a == "--op") {
      MESHDMA_ASSIGN_OR_RETURN(c.op, next());
    } else if (a == "-b") {
      MESHDMA_ASSIGN_OR_RETURN(std::string v, next());
      MESHDMA_ASSIGN_OR_RETURN(c.min_bytes, ParseSize(v));
    } else if (a == "-e") {
      MESHDMA_ASSIGN_OR_RETURN(std::string v, next());
      MESHDMA_ASSIGN_OR_RETURN(c.max_bytes, ParseSize(v));
    } else if (a == "-f") {
      MESHDMA_ASSIGN_OR_RETURN(std::string v, next());
      if (!absl::SimpleAtod(v, &c.factor) || c.factor <= 1.0) {
        return absl::InvalidArgumentError(absl::StrCat("-f ", v, ": need > 1"));
      }
    } else if (a == "-n" || a == "-w" || a == "-r" || a == "-c") {
      MESHDMA_ASSIGN_OR_RETURN(std::string v, next());
      int x = 0;
      if (!absl::SimpleAtoi(v, &x) || x < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(a, " ", v, ": need >= 0"));
      }
      if (a == "-n") c.iters = x;
      if (a == "-w") c.warmup = x;
      if (a == "-r") c.repeats = std::max(1, x);
      if (a == "-c") c.check = x != 0;
    } else if (a == "-d") {
      MESHDMA_ASSIGN_OR_RETURN(std::string v, next());
      MESHDMA_ASSIGN_OR_RETURN(c.dtype, ParseDType(v));
    } else if (a == "-o" || a == "--redop") {
      MESHDMA_ASSIGN_OR_RETURN(c.redop, next());
    } else if (a == "--algo") {
      MESHDMA_ASSIGN_OR_RETURN(c.algorithm, next());
    } else if (a == "--csv") {
      MESHDMA_ASSIGN_OR_RETURN(c.csv, next());
    } else if (a == "--plot") {
      MESHDMA_ASSIGN_OR_RETURN(c.plot, next());
    } else if (a == "--no-baseline") {
      c.baseline = false;
    } else if (a == "-h" || a == "--help") {
      return absl::CancelledError(Usage());
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown option '", a, "'\n", Usage()));
    }
  }
  if (c.min_bytes > c.max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("-b ", c.min_bytes, " is larger than -e ", c.max_bytes));
  }
  if (Registry().count(c.op) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown --op '", c.op, "'\n", Usage()));
  }
  return c;
}

std::map<std::string, OpFn>& Registry() {
  static auto* registry = new std::map<std::string, OpFn>();
  return *registry;
}

BenchContext::BenchContext(Runtime* runtime, BenchConfig config)
    : runtime_(runtime),
      config_(std::move(config)),
      mesh_(*runtime->MakeMesh1D("x")) {}

std::vector<int64_t> BenchContext::Sizes(int64_t align) const {
  std::vector<int64_t> sizes;
  for (double s = static_cast<double>(config_.min_bytes);
       s <= static_cast<double>(config_.max_bytes) * 1.0001;
       s *= config_.factor) {
    int64_t b = static_cast<int64_t>(std::llround(s));
    b = std::max(align, b / align * align);
    if (sizes.empty() || sizes.back() != b) sizes.push_back(b);
  }
  return sizes;
}

int BenchContext::ItersFor(int64_t bytes, double guess_GBps) const {
  if (config_.iters > 0) return config_.iters;
  const double per_iter_s = 2e-6 + bytes / (guess_GBps * 1e9);
  return static_cast<int>(std::clamp(0.04 / per_iter_s, 2.0, 2000.0));
}

std::string BenchContext::Transport() const {
  if (mesh_.size() < 2) return "local";
  const Launch& l = runtime_->launch();
  const GlobalDevice& a = l.devices()[mesh_.devices()[0]];
  const GlobalDevice& b = l.devices()[mesh_.devices()[1]];
  if (a.rank == b.rank) return "local";
  return a.host_index == b.host_index ? "shm" : "mpi";
}

double BenchContext::MemcpyGBps(int64_t bytes) const {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  const int iters = ItersFor(bytes, 8.0);
  std::vector<double> times;
  for (int r = 0; r < config_.repeats + 1; ++r) {
    const absl::Time t0 = absl::Now();
    for (int i = 0; i < iters; ++i) {
      std::memcpy(i % 2 ? a.data() : b.data(), i % 2 ? b.data() : a.data(),
                  bytes);
    }
    if (r > 0) times.push_back(absl::ToDoubleSeconds(absl::Now() - t0) / iters);
  }
  return bytes / Median(times) / 1e9;
}

absl::StatusOr<double> BenchContext::TimeOnMesh(
    int iters, const std::function<absl::Status(int iters)>& body) {
  MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
  std::vector<double> times;
  if (config_.warmup > 0) {
    MESHDMA_RETURN_IF_ERROR(device_barrier());
    MESHDMA_RETURN_IF_ERROR(body(config_.warmup));
  }
  for (int r = 0; r < config_.repeats; ++r) {
    MESHDMA_RETURN_IF_ERROR(device_barrier());
    const absl::Time t0 = absl::Now();
    MESHDMA_RETURN_IF_ERROR(body(iters));
    // The last device to finish ends the interval for everyone.
    MESHDMA_RETURN_IF_ERROR(device_barrier());
    times.push_back(absl::ToDoubleSeconds(absl::Now() - t0) / iters);
  }
  (void)me;
  return Median(times);
}

double BenchContext::TimeMpi(int iters,
                             const std::function<void(int iters)>& body) const {
  if (!Launched()) return 0;
  std::vector<double> times;
  if (config_.warmup > 0) body(config_.warmup);
  for (int r = 0; r < config_.repeats; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    body(iters);
    double t = (MPI_Wtime() - t0) / iters, worst = 0;
    MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    times.push_back(worst);
  }
  return Median(times);
}

int64_t BenchContext::SumOverProcesses(int64_t v) const {
  if (!Launched()) return v;
  int64_t sum = 0;
  MPI_Allreduce(&v, &sum, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return sum;
}

void BenchContext::Emit(const Row& row) {
  rows_.push_back(row);
  if (rank() != 0) return;
  if (!header_printed_) {
    header_printed_ = true;
    std::printf(
        "# meshdma-bench --op %s: %d devices, %d process(es), transport %s, "
        "DMA mode %s\n",
        config_.op.c_str(), row.devices, num_processes(), row.transport.c_str(),
        runtime_->dma_mode() == DmaMode::kAsync ? "async" : "eager");
    std::printf("#%11s %11s %6s %6s %10s %8s %8s %7s %10s %9s %6s %8s\n",
                "size", "count", "type", "redop", "time", "algbw", "busbw",
                "#wrong", "mpi_time", "mpi_busbw", "ratio", "memcpy");
    std::printf("#%11s %11s %6s %6s %10s %8s %8s %7s %10s %9s %6s %8s\n", "(B)",
                "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
                "(GB/s)", "", "(GB/s)");
  }
  const bool has_base = row.baseline_time_us > 0;
  std::printf(
      " %11lld %11lld %6s %6s %10.2f %8.2f %8.2f %7lld %10s %9s %6s %8.2f\n",
      static_cast<long long>(row.bytes), static_cast<long long>(row.count),
      row.dtype.c_str(), row.redop.c_str(), row.time_us, row.algbw_GBps,
      row.busbw_GBps, static_cast<long long>(row.wrong),
      has_base ? absl::StrFormat("%.2f", row.baseline_time_us).c_str() : "-",
      has_base ? absl::StrFormat("%.2f", row.baseline_busbw_GBps).c_str() : "-",
      has_base
          ? absl::StrFormat("%.2f", row.busbw_GBps / row.baseline_busbw_GBps)
                .c_str()
          : "-",
      row.memcpy_GBps);
  std::fflush(stdout);
}

absl::Status BenchContext::Finish() {
  if (rank() != 0) return absl::OkStatus();
  int64_t wrong = 0;
  for (const Row& r : rows_) wrong += r.wrong;
  std::printf("# Out of bounds values : %lld %s\n",
              static_cast<long long>(wrong), wrong == 0 ? "OK" : "FAILED");
  if (!config_.csv.empty()) {
    std::ofstream f(config_.csv);
    if (!f)
      return absl::InternalError(absl::StrCat("cannot write ", config_.csv));
    f << "op,transport,dtype,redop,bytes,count,devices,time_us,algbw_GBps,"
         "busbw_GBps,"
         "baseline_time_us,baseline_busbw_GBps,memcpy_GBps,wrong\n";
    for (const Row& r : rows_) {
      f << absl::StrFormat(
          "%s,%s,%s,%s,%d,%d,%d,%.3f,%.4f,%.4f,%.3f,%.4f,%.4f,%d\n", r.op,
          r.transport, r.dtype, r.redop, r.bytes, r.count, r.devices, r.time_us,
          r.algbw_GBps, r.busbw_GBps, r.baseline_time_us, r.baseline_busbw_GBps,
          r.memcpy_GBps, r.wrong);
    }
  }
  if (!config_.plot.empty() && !rows_.empty()) {
    const std::string data = config_.plot + ".dat";
    {
      std::ofstream f(data);
      for (const Row& r : rows_) {
        f << r.bytes << " " << r.busbw_GBps << " " << r.baseline_busbw_GBps
          << " " << r.memcpy_GBps << "\n";
      }
    }
    const bool base = rows_.front().baseline_time_us > 0;
    std::string script = absl::StrCat(
        "set terminal pngcairo size 900,560 noenhanced; set output '",
        config_.plot, "';",
        "set logscale x 2; set xlabel 'size (bytes)'; set ylabel 'busbw "
        "(GB/s)';",
        "set grid; set key top left;", "set title 'meshdma-bench --op ",
        config_.op, " (", rows_.front().devices, " devices, ",
        rows_.front().transport, ", ", rows_.front().dtype, ")';", "plot '",
        data, "' using 1:2 with linespoints title 'meshdma'",
        base ? absl::StrCat(", '", data,
                            "' using 1:3 with linespoints title 'MPI'")
             : "",
        ", '", data, "' using 1:4 with lines dashtype 2 title 'memcpy'");
    FILE* p = popen("gnuplot 2>&1", "w");
    if (p == nullptr) return absl::InternalError("cannot run gnuplot");
    std::fputs(script.c_str(), p);
    if (pclose(p) != 0) {
      return absl::InternalError(
          absl::StrCat("gnuplot failed to write ", config_.plot));
    }
    std::remove(data.c_str());
  }
  return absl::OkStatus();
}

}  // namespace meshdma::bench
