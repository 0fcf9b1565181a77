#include "bench/harness.h"

#include <fcntl.h>
#include <mpi.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/flags/flag.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "meshdma/base/env.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/options.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/topology/launch.h"
#include "tools/flags.h"
#include "tools/json.h"

using meshdma::cli::ByteSize;

// nccl-tests' options, with their letters and meanings.
ABSL_FLAG(ByteSize, minbytes, ByteSize{8}, "smallest size (K/M/G suffixes)");
ABSL_FLAG(ByteSize, maxbytes, ByteSize{256 << 20}, "largest size");
ABSL_FLAG(ByteSize, stepbytes, ByteSize{1 << 20},
          "increment between sizes when no -f is given");
ABSL_FLAG(double, stepfactor, 2.0, "multiplication factor between sizes");
ABSL_FLAG(int, iters, 0,
          "timed iterations per repeat; 0: chosen per size for about 40 ms "
          "(printed in the iters column)");
ABSL_FLAG(int, warmup_iters, 3, "warm-up iterations before each measurement");
ABSL_FLAG(int, check, 1,
          "calls per size whose output is checked against a closed-form "
          "reference (#wrong); 0: no check");
ABSL_FLAG(std::string, op, "sum",
          "reduction: sum, max, min, avg, or all (all_reduce, reduce_scatter; "
          "nccl-tests' prod is not offered)");
ABSL_FLAG(std::string, datatype, "float",
          "element type: uint8, int32, int64, half, bfloat16, float, double "
          "(also u8 i32 i64 f16 bf16 f32 f64), or all");
ABSL_FLAG(int, root, 0, "root rank of rooted collectives (none here: echoed)");
ABSL_FLAG(int, average, 1,
          "time reported across devices: 0 device 0's, 1 mean, 2 min, 3 max");
ABSL_FLAG(int, blocking, 0,
          "0 or 1; meshdma's collectives return when complete, so both "
          "measure the same (echoed)");
ABSL_FLAG(int, nthreads, 1, "with -g: devices per process = -t x -g");
ABSL_FLAG(int, ngpus, 1,
          "with -t: devices per process = -t x -g (unset: "
          "MESHDMA_DEVICES_PER_PROCESS, else the cores divided among the "
          "processes)");
ABSL_FLAG(double, timeout, 0,
          "seconds a wait may block before failing; 0: MESHDMA_WAIT_TIMEOUT_S, "
          "else 120");
ABSL_FLAG(std::string, output_file, "", "also write the results as JSON here");
// meshdma's own.
ABSL_FLAG(std::string, collective, "ppermute",
          "what to measure: ppermute (one remote DMA per call, in one "
          "kernel), ppermute_call (the ppermute collective), all_reduce, "
          "all_gather, reduce_scatter, all_to_all");
ABSL_FLAG(int, repeats, 5,
          "rounds per size, each timing meshdma then its baselines; the "
          "median is reported");
ABSL_FLAG(std::string, algo, "auto",
          "collective algorithm: auto, ring, bidirectional_ring, one_shot, "
          "hierarchical, direct");
ABSL_FLAG(std::string, csv, "", "also write the results as CSV here");
ABSL_FLAG(std::string, plot, "",
          "draw busbw and latency against size into this PNG (gnuplot)");
ABSL_FLAG(bool, no_baseline, false, "skip the MPI baseline");
ABSL_FLAG(ByteSize, chunk_bytes, ByteSize{0},
          "CollectiveOptions::chunk_bytes, 1 byte to 1G (0: the default)");
ABSL_FLAG(int, num_buffers, 0,
          "CollectiveOptions::num_buffers, 1..64 (0: the default)");
ABSL_FLAG(ByteSize, lane_chunk_bytes, ByteSize{0},
          "CollectiveOptions::lane_chunk_bytes, 1 byte to 1G (0: the "
          "default)");
ABSL_FLAG(std::string, input, "symmetric",
          "where the input lives: symmetric (the symmetric heap) or private "
          "(ordinary memory, as a caller's own buffer); in place, all_reduce "
          "and all_gather read their symmetric output");

namespace meshdma::bench {
namespace {

// The most sizes one sweep may take and the largest size: beyond them a
// typo (-f 1.0000001, -e 1T) would run for days or exhaust memory.
constexpr int kMaxSizes = 1000;
constexpr int64_t kMaxBytes = int64_t{64} << 30;

const cli::Program& Program() {
  static const cli::Program* program = new cli::Program{
      .name = "meshdma-bench",
      .synopsis =
          "[--collective NAME] [-b MIN] [-e MAX] [-f FACTOR] "
          "[-d TYPE] [-o OP] ...",
      .summary =
          "Measures one of meshdma's collectives over a sweep of sizes, "
          "with nccl-tests'\noptions and output, against the MPI library's "
          "own collective on the same\nprocesses, the bound of every device "
          "copying at once, and one-thread memcpy,\nall in the same run. "
          "Devices are threads; run under mpirun for processes.",
      .aliases = {{'b', "minbytes"},
                  {'e', "maxbytes"},
                  {'i', "stepbytes"},
                  {'f', "stepfactor"},
                  {'n', "iters"},
                  {'w', "warmup_iters"},
                  {'c', "check"},
                  {'o', "op"},
                  {'d', "datatype"},
                  {'r', "root"},
                  {'a', "average"},
                  {'z', "blocking"},
                  {'t', "nthreads"},
                  {'g', "ngpus"},
                  {'T', "timeout"},
                  {'J', "output_file"}},
      .footer =
          "Sizes take K/M/G suffixes (powers of 1024). busbw follows "
          "nccl-tests:\nall_reduce x 2(n-1)/n; all_gather, reduce_scatter, "
          "all_to_all x (n-1)/n with\nsize the total; ppermute x 1. Exit "
          "status: 0, 1 if a run failed or data was\nwrong, 2 for a bad "
          "command line.\n",
      // As MESHDMA_WAIT_TIMEOUT_S: up to 1e9 s, or inf for none.
      .ranges = {{"timeout", 0, 1'000'000'000, /*infinite=*/true}},
      .choices = {{"algo",
                   {"auto", "ring", "bidirectional_ring", "bidir", "one_shot",
                    "hierarchical", "direct"}},
                  {"input", {"symmetric", "private"}}}};
  return *program;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

absl::Status FlagError(absl::string_view flag, absl::string_view value,
                       absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "flag ", flag, ": bad value '", absl::CEscape(value), "': ", why));
}

struct TypeName {
  DType type;
  const char* nccl;
  const char* ours;
};
constexpr TypeName kTypes[] = {
    {DType::kU8, "uint8", "u8"},        {DType::kI32, "int32", "i32"},
    {DType::kI64, "int64", "i64"},      {DType::kF16, "half", "f16"},
    {DType::kBF16, "bfloat16", "bf16"}, {DType::kF32, "float", "f32"},
    {DType::kF64, "double", "f64"},
};

absl::StatusOr<std::vector<DType>> ParseDTypes(const std::string& s) {
  if (s == "all") {
    std::vector<DType> all;
    for (const TypeName& t : kTypes) all.push_back(t.type);
    return all;
  }
  for (const TypeName& t : kTypes) {
    if (s == t.nccl || s == t.ours) return std::vector<DType>{t.type};
  }
  // nccl-tests' other spellings.
  if (s == "int" || s == "int32_t") return std::vector<DType>{DType::kI32};
  if (s == "float32") return std::vector<DType>{DType::kF32};
  if (s == "float16" || s == "fp16") return std::vector<DType>{DType::kF16};
  if (s == "float64") return std::vector<DType>{DType::kF64};
  if (s == "bf16") return std::vector<DType>{DType::kBF16};
  if (s == "char" || s == "int8" || s == "uint32" || s == "uint64" ||
      s == "fp8_e4m3" || s == "fp8_e5m2") {
    return FlagError("-d (--datatype)", s,
                     "meshdma has no such element type (it has uint8 int32 "
                     "int64 half bfloat16 float double)");
  }
  return FlagError("-d (--datatype)", s,
                   "expected uint8, int32, int64, half, bfloat16, float, "
                   "double or all");
}

absl::StatusOr<std::vector<std::string>> ParseRedops(const std::string& s) {
  if (s == "all") return std::vector<std::string>{"sum", "max", "min", "avg"};
  if (s == "sum" || s == "max" || s == "min" || s == "avg") {
    return std::vector<std::string>{s};
  }
  if (s == "mean") return std::vector<std::string>{"avg"};
  if (s == "prod" || s == "premulsum") {
    return FlagError("-o (--op)", s,
                     "meshdma's reductions are sum, max, min and avg");
  }
  if (Registry().count(s) != 0) {
    return FlagError("-o (--op)", s,
                     "-o is the reduction, as in nccl-tests; choose the "
                     "collective with --collective");
  }
  return FlagError("-o (--op)", s, "expected sum, max, min, avg or all");
}

// The sweep from -b to -e: multiplied by -f, or stepped by -i.
absl::StatusOr<std::vector<int64_t>> Sweep(const BenchConfig& c) {
  std::vector<int64_t> sizes;
  int64_t s = c.min_bytes;
  while (s <= c.max_bytes) {
    sizes.push_back(s);
    if (static_cast<int>(sizes.size()) > kMaxSizes) {
      return c.factor > 0
                 ? FlagError("-f (--stepfactor)",
                             absl::StrFormat("%.10g", c.factor),
                             absl::StrCat("from -b ", c.min_bytes, " to -e ",
                                          c.max_bytes, " that is more than ",
                                          kMaxSizes, " sizes"))
                 : FlagError("-i (--stepbytes)", absl::StrCat(c.step_bytes),
                             absl::StrCat("from -b ", c.min_bytes, " to -e ",
                                          c.max_bytes, " that is more than ",
                                          kMaxSizes, " sizes"));
    }
    if (s == c.max_bytes) break;
    int64_t next = 0;
    if (c.factor > 0) {
      const double d = std::ceil(static_cast<double>(s) * c.factor);
      next = d > static_cast<double>(c.max_bytes) ? c.max_bytes + 1
                                                  : static_cast<int64_t>(d);
      // Each size grows by at least one byte, so the sweep ends.
      next = std::max(next, s + 1);
    } else {
      next = s + c.step_bytes;
    }
    if (next > c.max_bytes) break;
    s = next;
  }
  return sizes;
}

bool Launched() { return LaunchedByMpi(); }

using cli::JsonString;

// A JSON number, or null for a value not measured.
std::string JsonNumber(double v, bool valid = true) {
  return valid && std::isfinite(v) ? absl::StrFormat("%.6g", v) : "null";
}

}  // namespace

absl::string_view NcclTypeName(DType t) {
  for (const TypeName& n : kTypes) {
    if (n.type == t) return n.nccl;
  }
  return "?";
}

std::string Usage() { return cli::Usage(Program()); }

// Flag errors go to users as they are: no "-> file:line" trail (which
// MESHDMA_RETURN_IF_ERROR would add).
#define CLI_RETURN_IF_ERROR(expr)             \
  do {                                        \
    if (absl::Status s_ = (expr); !s_.ok()) { \
      return s_;                              \
    }                                         \
  } while (0)
#define CLI_CONCAT_INNER(a, b) a##b
#define CLI_CONCAT(a, b) CLI_CONCAT_INNER(a, b)
#define CLI_ASSIGN_OR_RETURN(lhs, expr) \
  CLI_ASSIGN_OR_RETURN_IMPL(CLI_CONCAT(cli_or_, __LINE__), lhs, expr)
#define CLI_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = *std::move(tmp)

// -b, -e, -f, -i: the size sweep.
absl::Status ParseSizes(BenchConfig& c) {
  c.min_bytes = absl::GetFlag(FLAGS_minbytes).bytes;
  c.max_bytes = absl::GetFlag(FLAGS_maxbytes).bytes;
  if (c.min_bytes < 1) {
    return FlagError("-b (--minbytes)", absl::StrCat(c.min_bytes),
                     "need at least 1 byte");
  }
  if (c.max_bytes > kMaxBytes) {
    return FlagError("-e (--maxbytes)", cli::FormatBytes(c.max_bytes),
                     absl::StrCat("larger than ", cli::FormatBytes(kMaxBytes),
                                  ", the most meshdma-bench sweeps"));
  }
  if (c.min_bytes > c.max_bytes) {
    return FlagError(
        "-b (--minbytes)", cli::FormatBytes(c.min_bytes),
        absl::StrCat("larger than -e ", cli::FormatBytes(c.max_bytes)));
  }
  c.factor = absl::GetFlag(FLAGS_stepfactor);
  c.step_bytes = absl::GetFlag(FLAGS_stepbytes).bytes;
  if (cli::Given("stepbytes") && !cli::Given("stepfactor")) {
    if (c.step_bytes < 1) {
      return FlagError("-i (--stepbytes)", absl::StrCat(c.step_bytes),
                       "need at least 1 byte");
    }
    c.factor = 0;
  } else if (!std::isfinite(c.factor) || c.factor <= 1.0) {
    return FlagError("-f (--stepfactor)", absl::StrFormat("%.10g", c.factor),
                     "need a finite factor > 1");
  }
  CLI_ASSIGN_OR_RETURN(c.sizes, Sweep(c));
  return absl::OkStatus();
}

// -n, -w, -c, --repeats, -r, -a, -z, -t, -g: counts, each in its range.
absl::Status ParseCounts(BenchConfig& c) {
  auto ranged = [](const char* flag, int v, int lo, int hi) -> absl::Status {
    if (v < lo || v > hi) {
      return FlagError(flag, absl::StrCat(v),
                       absl::StrCat("expected ", lo, "..", hi));
    }
    return absl::OkStatus();
  };
  c.iters = absl::GetFlag(FLAGS_iters);
  c.warmup = absl::GetFlag(FLAGS_warmup_iters);
  c.check = absl::GetFlag(FLAGS_check);
  c.repeats = absl::GetFlag(FLAGS_repeats);
  c.root = absl::GetFlag(FLAGS_root);
  const int average = absl::GetFlag(FLAGS_average);
  c.blocking = absl::GetFlag(FLAGS_blocking);
  c.nthreads = absl::GetFlag(FLAGS_nthreads);
  c.ngpus = absl::GetFlag(FLAGS_ngpus);
  CLI_RETURN_IF_ERROR(ranged("-n (--iters)", c.iters, 0, 10'000'000));
  CLI_RETURN_IF_ERROR(ranged("-w (--warmup_iters)", c.warmup, 0, 10'000'000));
  CLI_RETURN_IF_ERROR(ranged("-c (--check)", c.check, 0, 1000));
  CLI_RETURN_IF_ERROR(ranged("--repeats", c.repeats, 1, 1000));
  CLI_RETURN_IF_ERROR(ranged("-r (--root)", c.root, 0, 1 << 20));
  CLI_RETURN_IF_ERROR(ranged("-a (--average)", average, 0, 3));
  CLI_RETURN_IF_ERROR(ranged("-z (--blocking)", c.blocking, 0, 1));
  CLI_RETURN_IF_ERROR(ranged("-t (--nthreads)", c.nthreads, 1, 1024));
  CLI_RETURN_IF_ERROR(ranged("-g (--ngpus)", c.ngpus, 1, 1024));
  c.average = static_cast<Average>(average);
  if (cli::Given("nthreads") || cli::Given("ngpus")) {
    if (c.nthreads * c.ngpus > 1024) {
      return FlagError("-g (--ngpus)", absl::StrCat(c.ngpus),
                       absl::StrCat("-t x -g = ", c.nthreads * c.ngpus,
                                    " devices per process, more than 1024"));
    }
    c.devices_per_process = c.nthreads * c.ngpus;
  }
  return absl::OkStatus();
}

// The collectives' pipelining knobs (--chunk-bytes, --num-buffers,
// --lane-chunk-bytes).
absl::Status ParseKnobs(BenchConfig& c) {
  // The collectives' pipelining knobs, each in its range; 0 or unset: the
  // library's default.
  constexpr int64_t kMaxChunkBytes = int64_t{1} << 30;
  auto knob = [](const char* flag, int64_t v, int64_t hi,
                 bool bytes) -> absl::StatusOr<std::optional<int64_t>> {
    if (v == 0) return std::nullopt;
    if (v < 1 || v > hi) {
      auto text = [&](int64_t x) {
        return bytes ? cli::FormatBytes(x) : absl::StrCat(x);
      };
      return FlagError(
          flag, text(v),
          absl::StrCat("expected 1..", text(hi), " (0: the default)"));
    }
    return v;
  };
  CLI_ASSIGN_OR_RETURN(
      c.chunk_bytes,
      knob("--chunk-bytes", absl::GetFlag(FLAGS_chunk_bytes).bytes,
           kMaxChunkBytes, /*bytes=*/true));
  CLI_ASSIGN_OR_RETURN(
      c.num_buffers, knob("--num-buffers", absl::GetFlag(FLAGS_num_buffers), 64,
                          /*bytes=*/false));
  CLI_ASSIGN_OR_RETURN(
      c.lane_chunk_bytes,
      knob("--lane-chunk-bytes", absl::GetFlag(FLAGS_lane_chunk_bytes).bytes,
           kMaxChunkBytes, /*bytes=*/true));
  return absl::OkStatus();
}

absl::StatusOr<BenchConfig> ParseArgs(int argc, char** argv) {
  CLI_ASSIGN_OR_RETURN(std::vector<std::string> positional,
                       cli::Parse(Program(), argc, argv));
  if (!positional.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unexpected argument '", absl::CEscape(positional.front()), "'"));
  }
  BenchConfig c;
  for (int i = 0; i < argc; ++i) c.argv.push_back(argv[i]);
  c.collective = absl::GetFlag(FLAGS_collective);
  if (Registry().count(c.collective) == 0) {
    std::vector<std::string> names;
    for (const auto& [name, op] : Registry()) names.push_back(name);
    return FlagError("--collective", c.collective,
                     absl::StrCat("expected ", absl::StrJoin(names, ", ")));
  }
  CLI_RETURN_IF_ERROR(ParseSizes(c));
  CLI_RETURN_IF_ERROR(ParseCounts(c));
  c.timeout_s = absl::GetFlag(FLAGS_timeout);  // Range checked by Parse.
  CLI_RETURN_IF_ERROR(ParseKnobs(c));
  CLI_ASSIGN_OR_RETURN(c.dtypes, ParseDTypes(absl::GetFlag(FLAGS_datatype)));
  CLI_ASSIGN_OR_RETURN(c.redops, ParseRedops(absl::GetFlag(FLAGS_op)));
  if (Registry().at(c.collective).reduces && c.dtypes.size() == 1 &&
      c.dtypes[0] == DType::kU8) {
    return FlagError("-d (--datatype)", absl::GetFlag(FLAGS_datatype),
                     absl::StrCat(c.collective,
                                  " reduces, and meshdma's "
                                  "reductions do not take uint8"));
  }
  c.algorithm = absl::GetFlag(FLAGS_algo);
  c.json = absl::GetFlag(FLAGS_output_file);
  c.csv = absl::GetFlag(FLAGS_csv);
  c.plot = absl::GetFlag(FLAGS_plot);
  c.baseline = !absl::GetFlag(FLAGS_no_baseline);
  c.input = absl::GetFlag(FLAGS_input);
  if (cli::Given("output_file") && c.json.empty()) {
    return FlagError("-J (--output_file)", "", "need a file name");
  }
  if (cli::Given("csv") && c.csv.empty()) {
    return FlagError("--csv", "", "need a file name");
  }
  if (cli::Given("plot") && c.plot.empty()) {
    return FlagError("--plot", "", "need a file name");
  }
  return c;
}

#undef CLI_ASSIGN_OR_RETURN_IMPL
#undef CLI_ASSIGN_OR_RETURN
#undef CLI_CONCAT
#undef CLI_CONCAT_INNER
#undef CLI_RETURN_IF_ERROR

std::map<std::string, OpInfo>& Registry() {
  static auto* registry = new std::map<std::string, OpInfo>();
  return *registry;
}

BenchContext::BenchContext(Runtime* runtime, BenchConfig config)
    : runtime_(runtime),
      config_(std::move(config)),
      mesh_(*runtime->MakeMesh1D("x")) {}

std::vector<int64_t> BenchContext::Sizes(int64_t align) const {
  std::vector<int64_t> sizes;
  for (int64_t s : config_.sizes) {
    const int64_t b = std::max(align, s / align * align);
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
  if (mesh_.size() < 2) return "direct";
  const Launch& l = runtime_->launch();
  const GlobalDevice& a = l.devices()[mesh_.devices()[0]];
  const GlobalDevice& b = l.devices()[mesh_.devices()[1]];
  if (a.rank == b.rank) return "direct";
  return l.SameHost(a.rank, b.rank) ? "shm" : runtime_->remote_transport();
}

std::string BenchContext::NoBaselineReason() const {
  if (!config_.baseline) return "--no-baseline";
  if (!Launched() || num_processes() < 2) {
    return "one process (run under mpirun with one device per process)";
  }
  if (num_processes() != mesh_.size()) {
    return absl::StrCat(mesh_.size(), " devices in ", num_processes(),
                        " processes: MPI's collective runs on one rank per "
                        "process, so it is comparable only with one device "
                        "per process (-t 1 -g 1)");
  }
  return "";
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

absl::StatusOr<BenchContext::RoundTimes> BenchContext::MeasureInRounds(
    const std::function<absl::Status(int round)>& on_mesh,
    const std::function<double()>& baseline,
    const std::function<double()>& baseline_in_place) {
  std::vector<double> slots[kNumSlots], base, base_in_place;
  for (int round = 0; round < config_.repeats; ++round) {
    MESHDMA_RETURN_IF_ERROR(on_mesh(round));
    for (int s = 0; s < kNumSlots; ++s) {
      const double t = TakeTime(static_cast<TimeSlot>(s));
      if (t > 0) slots[s].push_back(t);
    }
    const double b = baseline();
    if (b > 0) base.push_back(b);
    const double p = baseline_in_place ? baseline_in_place() : 0;
    if (p > 0) base_in_place.push_back(p);
  }
  RoundTimes times;
  for (int s = 0; s < kNumSlots; ++s) times.seconds[s] = Median(slots[s]);
  times.baseline_seconds = Median(base);
  times.baseline_in_place_seconds = Median(base_in_place);
  return times;
}

absl::Status BenchContext::TimeOnMesh(
    TimeSlot slot, int iters,
    const std::function<absl::Status(int iters)>& body) {
  MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
  if (config_.warmup > 0) {
    MESHDMA_RETURN_IF_ERROR(device_barrier());
    MESHDMA_RETURN_IF_ERROR(body(config_.warmup));
  }
  MESHDMA_RETURN_IF_ERROR(device_barrier());
  const absl::Time t0 = absl::Now();
  MESHDMA_RETURN_IF_ERROR(body(iters));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - t0) / iters;
  // Nobody starts the next measurement while a peer still runs this one.
  MESHDMA_RETURN_IF_ERROR(device_barrier());
  std::lock_guard<std::mutex> lock(times_mu_);
  times_[slot].push_back({me, seconds});
  return absl::OkStatus();
}

namespace {

// Fresh pages of this process, for the bound's buffers.
class PageBuffer {
 public:
  PageBuffer(int64_t bytes, char fill)
      : bytes_(std::max<int64_t>(bytes, 1)),
        data_(mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)) {
    if (data_ == MAP_FAILED) data_ = nullptr;
    if (data_ != nullptr) std::memset(data_, fill, bytes_);
  }
  ~PageBuffer() {
    if (data_ != nullptr) munmap(data_, bytes_);
  }
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  char* data() const { return static_cast<char*>(data_); }

 private:
  int64_t bytes_;
  void* data_;
};

}  // namespace

absl::Status BenchContext::TimeBound(int64_t bytes, int iters) {
  // One way, as a collective's copies go, between buffers that start on a
  // page. Copied back and forth, 2 MiB ran at 50-57 GB/s between buffers at
  // the same offset in their pages and at 62-71 GB/s at other offsets, so
  // the bound moved with where the allocator put them; one way, at 52-54
  // GB/s either way.
  PageBuffer a(bytes, 1), b(bytes, 2);
  if (a.data() == nullptr || b.data() == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the bound's buffers of ", bytes, " bytes: mmap failed"));
  }
  return TimeOnMesh(kBound, iters, [&](int k) {
    for (int i = 0; i < k; ++i) std::memcpy(b.data(), a.data(), bytes);
    return absl::OkStatus();
  });
}

double BenchContext::TakeTime(TimeSlot slot) {
  std::vector<std::pair<int, double>> mine;
  {
    std::lock_guard<std::mutex> lock(times_mu_);
    mine.swap(times_[slot]);
  }
  // sum, min, max, device 0's, count: combined over processes.
  double v[5] = {0, 1e300, 0, 0, 0};
  for (const auto& [device, t] : mine) {
    v[0] += t;
    v[1] = std::min(v[1], t);
    v[2] = std::max(v[2], t);
    if (device == 0) v[3] = t;
    v[4] += 1;
  }
  if (Launched() && num_processes() > 1) {
    double sum[2] = {v[0], v[3]}, count = v[4];
    MPI_Allreduce(MPI_IN_PLACE, sum, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &v[1], 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &v[2], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &count, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    v[0] = sum[0];
    v[3] = sum[1];
    v[4] = count;
  }
  if (v[4] == 0) return 0;
  switch (config_.average) {
    case Average::kDevice0:
      return v[3];
    case Average::kMean:
      return v[0] / v[4];
    case Average::kMin:
      return v[1];
    case Average::kMax:
      return v[2];
  }
  return 0;
}

double BenchContext::TimeMpi(int iters,
                             const std::function<void(int iters)>& body) const {
  if (!Launched()) return 0;
  if (config_.warmup > 0) body(config_.warmup);
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  body(iters);
  double t = (MPI_Wtime() - t0) / iters, worst = 0;
  MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

int64_t BenchContext::SumOverProcesses(int64_t v) const {
  if (!Launched()) return v;
  int64_t sum = 0;
  MPI_Allreduce(&v, &sum, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return sum;
}

void BenchContext::PrintHeader(const Row& first) {
  const BenchConfig& c = config_;
  const Launch& launch = runtime_->launch();
  std::printf("# meshdma-bench %s\n",
              absl::StrJoin(c.argv.begin() + 1, c.argv.end(), " ").c_str());
  std::printf(
      "# collective %s  nThread %d nGpus %d  devices %d in %d process(es)  "
      "minBytes %lld maxBytes %lld step: %s  warmup iters: %d iters: %s  "
      "repeats: %d (rounds of meshdma then its baselines; median)  validation: "
      "%d  average: %d  blocking: %d  "
      "root: %d\n",
      c.collective.c_str(), c.nthreads, c.ngpus, mesh_.size(), num_processes(),
      static_cast<long long>(c.min_bytes), static_cast<long long>(c.max_bytes),
      c.factor > 0 ? absl::StrCat(c.factor, "(factor)").c_str()
                   : absl::StrCat(c.step_bytes, "(bytes)").c_str(),
      c.warmup,
      c.iters > 0 ? absl::StrCat(c.iters).c_str()
                  : "auto (about 40 ms per repeat; see the iters column)",
      c.repeats, c.check, static_cast<int>(c.average), c.blocking, c.root);
  std::printf("# algorithm %s  DMA mode %s  path %s  input %s\n",
              c.algorithm.c_str(),
              runtime_->dma_mode() == DmaMode::kAsync ? "async" : "eager",
              first.transport.c_str(), c.input.c_str());
  // The rule table by which every collective chooses its path.
  std::printf("# collective paths (thresholds, then rules in order):\n");
  for (absl::string_view line :
       absl::StrSplit(CollectivePathRules(), '\n', absl::SkipEmpty())) {
    std::printf("#   %.*s\n", static_cast<int>(line.size()), line.data());
  }
  std::printf("#\n# Using devices\n");
  for (int g : mesh_.devices()) {
    const GlobalDevice& d = launch.devices()[g];
    std::printf("#  device %3d  rank %3d  host %s  core %d\n", g, d.rank,
                launch.processes()[d.rank].hostname.c_str(), d.core);
  }
  const std::string why = NoBaselineReason();
  std::printf("#\n# mpi: %s\n",
              why.empty()
                  ? "the MPI library's own collective on the same processes "
                    "(half and bfloat16: a derived 2-byte datatype, with a "
                    "user-defined MPI_Op reducing in float)"
                  : absl::StrCat("none: ", why).c_str());
  std::printf(
      "# bound: every device copying at once, with memcpy, the bytes the "
      "collective must move per device; of_bound = busbw / bound busbw "
      "(ip_of_bound: the in-place busbw's)\n"
      "# ip_vs_mpi: the MPI call in place (MPI_IN_PLACE) against meshdma's "
      "in place (time over time)\n"
      "# memcpy: one thread of rank 0 copying alone\n#\n");
  std::printf("# %46s %-32s %s\n", "", "out-of-place", "in-place");
  std::printf(
      "# %10s %12s %8s %6s %6s %8s %7s %7s %6s %8s %7s %7s %6s %6s %9s %7s "
      "%6s %7s %8s %7s %11s %9s\n",
      "size", "count", "type", "redop", "root", "time", "algbw", "busbw",
      "#wrong", "time", "algbw", "busbw", "#wrong", "iters", "mpi_time",
      "mpi_bw", "vs_mpi", "bound", "of_bound", "memcpy", "ip_of_bound",
      "ip_vs_mpi");
  std::printf(
      "# %10s %12s %8s %6s %6s %8s %7s %7s %6s %8s %7s %7s %6s %6s %9s %7s "
      "%6s %7s %8s %7s %11s %9s\n",
      "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
      "(GB/s)", "(GB/s)", "", "", "(us)", "(GB/s)", "", "(GB/s)", "", "(GB/s)",
      "", "");
}

void BenchContext::Emit(const Row& row) {
  rows_.push_back(row);
  if (rank() != 0) return;
  if (!header_printed_) {
    header_printed_ = true;
    PrintHeader(row);
  }
  auto f2 = [](double v, bool valid) {
    return valid ? absl::StrFormat("%.2f", v) : std::string("N/A");
  };
  auto wrong = [](const Measured& m) {
    return m.valid ? absl::StrCat(m.wrong) : std::string("N/A");
  };
  const bool base = row.baseline_time_us > 0;
  const bool bound = row.bound_time_us > 0;
  const Measured& o = row.out_of_place;
  const Measured& i = row.in_place;
  std::printf(
      "  %10lld %12lld %8s %6s %6d %8s %7s %7s %6s %8s %7s %7s %6s %6d %9s "
      "%7s %6s %7s %8s %7.2f %11s %9s\n",
      static_cast<long long>(row.bytes), static_cast<long long>(row.count),
      row.dtype.c_str(), row.redop.c_str(), -1, f2(o.time_us, o.valid).c_str(),
      f2(o.algbw_GBps, o.valid).c_str(), f2(o.busbw_GBps, o.valid).c_str(),
      wrong(o).c_str(), f2(i.time_us, i.valid).c_str(),
      f2(i.algbw_GBps, i.valid).c_str(), f2(i.busbw_GBps, i.valid).c_str(),
      wrong(i).c_str(), row.iters, f2(row.baseline_time_us, base).c_str(),
      f2(row.baseline_busbw_GBps, base).c_str(),
      f2(o.busbw_GBps / row.baseline_busbw_GBps, base).c_str(),
      f2(row.bound_busbw_GBps, bound).c_str(),
      f2(o.busbw_GBps / row.bound_busbw_GBps, bound).c_str(), row.memcpy_GBps,
      f2(i.busbw_GBps / row.bound_busbw_GBps, bound && i.valid).c_str(),
      f2(row.baseline_in_place_time_us / i.time_us,
         row.baseline_in_place_time_us > 0 && i.valid)
          .c_str());
  std::fflush(stdout);
}

namespace {

// Runs `argv` without a shell and waits: 0 when it exited with 0.
int Spawn(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // gnuplot's chatter goes nowhere; its exit status says whether it worked.
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int rc =
      posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The gnuplot program. It holds no name from the command line: the data
// file, the output file and the title arrive as ARG1..ARG3 (`gnuplot -c`),
// which gnuplot treats as strings, never as commands. The x tics are
// generated from sizes (digits and a unit letter).
std::string PlotScript(const std::vector<int64_t>& sizes, bool baseline,
                       bool bound, bool in_place) {
  std::vector<std::string> tics;
  const int step = std::max<int>(1, (sizes.size() + 9) / 10);
  for (size_t i = 0; i < sizes.size(); i += step) {
    tics.push_back(
        absl::StrCat("\"", cli::FormatBytes(sizes[i]), "\" ", sizes[i]));
  }
  std::string s = absl::StrCat(
      "set terminal pngcairo size 1100,520 noenhanced\n"
      "set output ARG2\n"
      "set multiplot layout 1,2 title ARG3 noenhanced\n"
      "set logscale xy\n"
      "set xtics (",
      absl::StrJoin(tics, ", "),
      ") rotate by -45\n"
      "set format y \"%g\"\n"
      "set grid\n"
      "set key left\n"
      "set xlabel \"size (bytes)\"\n");
  auto series = [&](int col, const char* title, const char* style) {
    return absl::StrCat("ARG1 using 1:($", col, " > 0 ? $", col,
                        " : NaN) with ", style, " title \"", title, "\"");
  };
  std::vector<std::string> bw = {series(3, "meshdma", "linespoints lw 2")};
  if (in_place) bw.push_back(series(5, "meshdma in-place", "linespoints"));
  if (baseline) bw.push_back(series(7, "MPI", "linespoints"));
  if (bound)
    bw.push_back(series(9, "bound (all devices copying)", "lines dt 2"));
  bw.push_back(series(10, "memcpy (one thread)", "lines dt 3"));
  std::vector<std::string> lat = {series(2, "meshdma", "linespoints lw 2")};
  if (in_place) lat.push_back(series(4, "meshdma in-place", "linespoints"));
  if (baseline) lat.push_back(series(6, "MPI", "linespoints"));
  if (bound)
    lat.push_back(series(8, "bound (all devices copying)", "lines dt 2"));
  absl::StrAppend(&s, "set key bottom right\n",
                  "set ylabel \"busbw (GB/s)\"\nset title \"bus bandwidth\"\n",
                  "plot ", absl::StrJoin(bw, ", "), "\n", "set key top left\n",
                  "set ylabel \"time (us)\"\nset title \"latency\"\n", "plot ",
                  absl::StrJoin(lat, ", "), "\n", "unset multiplot\n");
  return s;
}

std::string TempPath(const std::string& dir, const char* suffix) {
  std::string path = absl::StrCat(dir, "/meshdma-bench-XXXXXX", suffix);
  const int fd = mkstemps(path.data(), static_cast<int>(strlen(suffix)));
  if (fd < 0) return "";
  close(fd);
  return path;
}

}  // namespace

int64_t BenchContext::wrong() const {
  int64_t wrong = 0;
  for (const Row& r : rows_) {
    wrong += (r.out_of_place.valid ? r.out_of_place.wrong : 0) +
             (r.in_place.valid ? r.in_place.wrong : 0);
  }
  return wrong;
}

absl::Status BenchContext::Finish() {
  if (rank() != 0) return absl::OkStatus();
  int64_t wrong = 0;
  double bw_sum = 0;
  int bw_count = 0;
  for (const Row& r : rows_) {
    for (const Measured* m : {&r.out_of_place, &r.in_place}) {
      if (!m->valid) continue;
      wrong += m->wrong;
      bw_sum += m->busbw_GBps;
      ++bw_count;
    }
  }
  const double avg_bw = bw_count > 0 ? bw_sum / bw_count : 0;
  std::printf("# Out of bounds values : %lld %s\n",
              static_cast<long long>(wrong), wrong == 0 ? "OK" : "FAILED");
  std::printf("# Avg bus bandwidth    : %g \n#\n", avg_bw);
  std::fflush(stdout);
  if (!config_.csv.empty()) MESHDMA_RETURN_IF_ERROR(WriteCsv());
  if (!config_.json.empty()) MESHDMA_RETURN_IF_ERROR(WriteJson(avg_bw, wrong));
  if (!config_.plot.empty() && !rows_.empty()) {
    return Plot();
  }
  return absl::OkStatus();
}

absl::Status BenchContext::WriteCsv() const {
  std::ofstream f(config_.csv);
  f << "collective,transport,type,redop,size,count,devices,iters,"
       "time_us,algbw_GBps,busbw_GBps,wrong,"
       "ip_time_us,ip_algbw_GBps,ip_busbw_GBps,ip_wrong,"
       "mpi_time_us,mpi_busbw_GBps,bound_time_us,bound_busbw_GBps,"
       "memcpy_GBps,ip_mpi_time_us\n";
  auto num = [](double v, bool valid) {
    return valid ? absl::StrFormat("%.6g", v) : std::string("");
  };
  for (const Row& r : rows_) {
    const Measured& o = r.out_of_place;
    const Measured& i = r.in_place;
    f << absl::StrJoin({r.collective,
                        r.transport,
                        r.dtype,
                        r.redop,
                        absl::StrCat(r.bytes),
                        absl::StrCat(r.count),
                        absl::StrCat(r.devices),
                        absl::StrCat(r.iters),
                        num(o.time_us, o.valid),
                        num(o.algbw_GBps, o.valid),
                        num(o.busbw_GBps, o.valid),
                        o.valid ? absl::StrCat(o.wrong) : "",
                        num(i.time_us, i.valid),
                        num(i.algbw_GBps, i.valid),
                        num(i.busbw_GBps, i.valid),
                        i.valid ? absl::StrCat(i.wrong) : "",
                        num(r.baseline_time_us, r.baseline_time_us > 0),
                        num(r.baseline_busbw_GBps, r.baseline_time_us > 0),
                        num(r.bound_time_us, r.bound_time_us > 0),
                        num(r.bound_busbw_GBps, r.bound_time_us > 0),
                        num(r.memcpy_GBps, true),
                        num(r.baseline_in_place_time_us,
                            r.baseline_in_place_time_us > 0)},
                       ",")
      << "\n";
  }
  f.close();
  if (!f) {
    return absl::PermissionDeniedError(
        absl::StrCat("--csv: cannot write '", config_.csv, "'"));
  }
  return absl::OkStatus();
}

absl::Status BenchContext::WriteJson(double avg_bw, int64_t wrong) const {
  std::vector<std::string> args;
  for (const std::string& a : config_.argv) args.push_back(JsonString(a));
  std::vector<std::string> results;
  auto measured = [](const Measured& m) {
    if (!m.valid) return std::string("null");
    return absl::StrFormat(
        R"({"time_us":%s,"algbw_GBps":%s,"busbw_GBps":%s,"wrong":%d})",
        JsonNumber(m.time_us), JsonNumber(m.algbw_GBps),
        JsonNumber(m.busbw_GBps), m.wrong);
  };
  for (const Row& r : rows_) {
    const bool base = r.baseline_time_us > 0, bound = r.bound_time_us > 0;
    results.push_back(absl::StrFormat(
        R"({"collective":%s,"transport":%s,"type":%s,"redop":%s,"root":-1,)"
        R"("size":%d,"count":%d,"devices":%d,"iters":%d,)"
        R"("out_of_place":%s,"in_place":%s,)"
        R"("mpi":%s,"mpi_in_place":%s,"bound":%s,"memcpy_GBps":%s})",
        JsonString(r.collective), JsonString(r.transport), JsonString(r.dtype),
        JsonString(r.redop), r.bytes, r.count, r.devices, r.iters,
        measured(r.out_of_place), measured(r.in_place),
        base ? absl::StrFormat(R"({"time_us":%s,"busbw_GBps":%s})",
                               JsonNumber(r.baseline_time_us),
                               JsonNumber(r.baseline_busbw_GBps))
             : "null",
        r.baseline_in_place_time_us > 0
            ? absl::StrFormat(R"({"time_us":%s})",
                              JsonNumber(r.baseline_in_place_time_us))
            : "null",
        bound ? absl::StrFormat(R"({"time_us":%s,"busbw_GBps":%s})",
                                JsonNumber(r.bound_time_us),
                                JsonNumber(r.bound_busbw_GBps))
              : "null",
        JsonNumber(r.memcpy_GBps)));
  }
  const std::string why = NoBaselineReason();
  std::ofstream f(config_.json);
  f << absl::StrFormat(
      "{\"tool\":\"meshdma-bench\",\"command_line\":[%s],\n"
      "\"parameters\":{\"collective\":%s,\"minbytes\":%d,\"maxbytes\":%d,"
      "\"stepfactor\":%s,\"stepbytes\":%d,\"iters\":%d,\"warmup_iters\":%d,"
      "\"repeats\":%d,\"check\":%d,\"average\":%d,\"blocking\":%d,"
      "\"root\":%d,\"algorithm\":%s,\"devices\":%d,\"processes\":%d,"
      "\"dma_mode\":%s},\n"
      "\"mpi_baseline\":%s,\n\"results\":[\n%s\n],\n"
      "\"avg_busbw_GBps\":%s,\"out_of_bounds\":%d}\n",
      absl::StrJoin(args, ","), JsonString(config_.collective),
      config_.min_bytes, config_.max_bytes, JsonNumber(config_.factor),
      config_.step_bytes, config_.iters, config_.warmup, config_.repeats,
      config_.check, static_cast<int>(config_.average), config_.blocking,
      config_.root, JsonString(config_.algorithm), mesh_.size(),
      num_processes(),
      JsonString(runtime_->dma_mode() == DmaMode::kAsync ? "async" : "eager"),
      why.empty() ? "true" : JsonString(absl::StrCat("none: ", why)),
      absl::StrJoin(results, ",\n"), JsonNumber(avg_bw), wrong);
  f.close();
  if (!f) {
    return absl::PermissionDeniedError(
        absl::StrCat("-J (--output_file): cannot write '", config_.json, "'"));
  }
  return absl::OkStatus();
}

absl::Status BenchContext::Plot() const {
  // The first (dtype, redop) series only: one line per size.
  std::vector<const Row*> rows;
  for (const Row& r : rows_) {
    if (r.dtype == rows_.front().dtype && r.redop == rows_.front().redop) {
      rows.push_back(&r);
    }
  }
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  const std::string data = TempPath(dir, ".dat");
  const std::string script = TempPath(dir, ".gp");
  const std::string png = TempPath(dir, ".png");
  if (data.empty() || script.empty() || png.empty()) {
    return absl::InternalError(
        absl::StrCat("--plot: cannot create temporary files in ", dir));
  }
  std::vector<int64_t> sizes;
  bool base = false, bound = false, in_place = false;
  {
    std::ofstream f(data);
    f << "# size time busbw ip_time ip_busbw mpi_time mpi_busbw bound_time "
         "bound_busbw memcpy\n";
    for (const Row* r : rows) {
      sizes.push_back(r->bytes);
      base |= r->baseline_time_us > 0;
      bound |= r->bound_time_us > 0;
      in_place |= r->in_place.valid;
      f << absl::StrFormat("%d %g %g %g %g %g %g %g %g %g\n", r->bytes,
                           r->out_of_place.time_us, r->out_of_place.busbw_GBps,
                           r->in_place.valid ? r->in_place.time_us : 0,
                           r->in_place.valid ? r->in_place.busbw_GBps : 0,
                           r->baseline_time_us, r->baseline_busbw_GBps,
                           r->bound_time_us, r->bound_busbw_GBps,
                           r->memcpy_GBps);
    }
    std::ofstream(script) << PlotScript(sizes, base, bound, in_place);
  }
  const Row& first = *rows.front();
  const std::string title = absl::StrCat(
      "meshdma-bench --collective ", config_.collective, ": ", first.devices,
      " devices, ", num_processes(), " process(es), ", first.transport, ", ",
      first.dtype, first.redop == "none" ? "" : absl::StrCat(" ", first.redop));
  const int rc = Spawn({"gnuplot", "-c", script, data, png, title});
  absl::Status status = absl::OkStatus();
  if (rc != 0) {
    status = absl::InternalError(
        rc < 0 ? "--plot: cannot run gnuplot (is it installed?)"
               : absl::StrCat("--plot: gnuplot failed (exit ", rc, ")"));
  } else {
    // Copied rather than renamed: the temporary may sit on another file
    // system, and the plot gets the usual permissions (umask).
    std::ifstream from(png, std::ios::binary);
    std::ofstream to(config_.plot, std::ios::binary | std::ios::trunc);
    to << from.rdbuf();
    to.close();
    if (!from || !to) {
      status = absl::PermissionDeniedError(
          absl::StrCat("--plot: cannot write '", config_.plot, "'"));
    }
  }
  std::remove(data.c_str());
  std::remove(script.c_str());
  std::remove(png.c_str());
  return status;
}

}  // namespace meshdma::bench
