// meshdma-bench: nccl-tests-style measurements of meshdma's operations against
// the MPI library's own on the same processes and against memcpy, in one run.
//   meshdma-bench --op ppermute -b 8 -e 256M -f 4 --csv out.csv --plot out.png
//   mpirun -np 2 meshdma-bench --op ppermute
#include <cstdio>

#include "bench/harness.h"
#include "meshdma/dma/runtime.h"

int main(int argc, char** argv) {
  auto config = meshdma::bench::ParseArgs(argc, argv);
  if (!config.ok()) {
    const bool help = config.status().code() == absl::StatusCode::kCancelled;
    std::fprintf(help ? stdout : stderr, "%s\n",
                 std::string(config.status().message()).c_str());
    return help ? 0 : 2;
  }
  meshdma::RuntimeOptions options;
  // Room for the largest message's source and destination (and scratch).
  options.heap_bytes =
      std::max<int64_t>(256ll << 20, 4 * config->max_bytes + (64 << 20));
  auto runtime = meshdma::Runtime::Create(options);
  if (!runtime.ok()) {
    std::fprintf(stderr, "meshdma-bench: %s\n",
                 std::string(runtime.status().message()).c_str());
    return 1;
  }
  meshdma::bench::BenchContext ctx(runtime->get(), *config);
  absl::Status s = meshdma::bench::Registry().at(config->op)(ctx);
  if (s.ok()) s = ctx.Finish();
  if (!s.ok()) {
    std::fprintf(stderr, "meshdma-bench: %s\n",
                 std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
