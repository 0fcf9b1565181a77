// meshdma-bench: nccl-tests-style measurements of meshdma's collectives
// against the MPI library's own on the same processes, the bound of every
// device copying at once, and memcpy, in one run.
//   meshdma-bench --collective all_reduce -b 8 -e 256M -f 4 -d bfloat16
//   mpirun -np 2 meshdma-bench --collective ppermute -J out.json --plot out.png
// Exit status: 0; 1 when a run fails, a file cannot be written or data is
// wrong; 2 for a bad command line.
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "bench/harness.h"
#include "meshdma/dma/runtime.h"
#include "tools/flags.h"

int main(int argc, char** argv) {
  using meshdma::bench::BenchConfig;
  const bool report = meshdma::cli::LauncherRank() == 0;
  absl::StatusOr<BenchConfig> config = meshdma::bench::ParseArgs(argc, argv);
  if (!config.ok()) {
    const bool help = config.status().code() == absl::StatusCode::kCancelled;
    if (report) {
      std::fprintf(help ? stdout : stderr, "%s%s%s",
                   help ? "" : "meshdma-bench: ",
                   std::string(config.status().message()).c_str(),
                   help ? "" : "\nTry 'meshdma-bench --help' for the flags.\n");
    }
    return help ? 0 : 2;
  }
  meshdma::RuntimeOptions options;
  // Room for the largest message's source and destination (and scratch).
  options.heap_bytes =
      std::max<int64_t>(256ll << 20, 4 * config->max_bytes + (64 << 20));
  options.launch.devices_per_process = config->devices_per_process;
  if (std::isinf(config->timeout_s)) {
    options.wait_timeout = absl::InfiniteDuration();
  } else if (config->timeout_s > 0) {
    options.wait_timeout = absl::Seconds(config->timeout_s);
  }
  auto runtime = meshdma::Runtime::Create(options);
  if (!runtime.ok()) {
    std::fprintf(stderr, "meshdma-bench: %s\n",
                 std::string(runtime.status().message()).c_str());
    return 1;
  }
  meshdma::bench::BenchContext ctx(runtime->get(), *config);
  const meshdma::bench::OpInfo& op =
      meshdma::bench::Registry().at(config->collective);
  absl::Status s = absl::OkStatus();
  for (meshdma::DType dtype : config->dtypes) {
    if (op.reduces && dtype == meshdma::DType::kU8) {
      // -d all: meshdma's reductions take no uint8.
      if (ctx.rank() == 0) {
        std::printf("# uint8 skipped: meshdma's reductions do not take it\n");
      }
      continue;
    }
    for (const std::string& redop :
         op.reduces ? config->redops : std::vector<std::string>{"none"}) {
      if (s.ok()) s = op.fn(ctx, dtype, redop);
    }
  }
  if (s.ok()) s = ctx.Finish();
  if (s.ok()) s = (*runtime)->Shutdown();
  if (!s.ok()) {
    std::fprintf(stderr, "meshdma-bench: %s\n",
                 std::string(s.message()).c_str());
    return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return ctx.wrong() == 0 ? 0 : 1;
}
