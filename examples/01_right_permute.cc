// Tutorial 1: right permute (the Pallas distributed tutorial's first kernel).
//
// Every device pushes its shard to its right neighbour along axis "x" with a
// remote async copy, then waits: `wait_send` says its own source may be
// reused, `wait_recv` says the left neighbour's shard has arrived here.
//
// Runs as threads of one process (one device per core by default) or under
// mpirun:  mpirun -np 2 build/examples/01_right_permute
#include <cstdio>

#include "examples/example_util.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"
#include "tools/runtime_flags.h"

namespace {

constexpr int64_t kRows = 8;
constexpr int64_t kCols = 128;

absl::Status RightPermute(int* wrong) {
  MESHDMA_ASSIGN_OR_RETURN(int me, meshdma::axis_index("x"));
  MESHDMA_ASSIGN_OR_RETURN(int n, meshdma::axis_size("x"));
  MESHDMA_ASSIGN_OR_RETURN(auto input,
                           meshdma::AllocateSymmetric<float>({kRows, kCols}));
  MESHDMA_ASSIGN_OR_RETURN(auto output,
                           meshdma::AllocateSymmetric<float>({kRows, kCols}));
  float* in = input.data_as<float>();
  for (int64_t i = 0; i < kRows * kCols; ++i) in[i] = me * 1000.0f + i;

  // The kernel: its entry barrier makes sure the neighbour exists before we
  // push into its `output`.
  MESHDMA_RETURN_IF_ERROR(
      meshdma::RunKernel({.name = "right_permute"}, [&]() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(
            auto send_sem,
            meshdma::AllocateSemaphore(meshdma::SemaphoreType::kDma, "send"));
        MESHDMA_ASSIGN_OR_RETURN(
            auto recv_sem,
            meshdma::AllocateSemaphore(meshdma::SemaphoreType::kDma, "recv"));
        const int right = (me + 1) % n;
        auto copy = meshdma::make_async_remote_copy(input, output, send_sem,
                                                    recv_sem, right);
        MESHDMA_RETURN_IF_ERROR(copy.start());
        return copy.wait();
      }));

  const int left = (me + n - 1) % n;
  const float* out = output.data_as<float>();
  for (int64_t i = 0; i < kRows * kCols; ++i) {
    if (out[i] != left * 1000.0f + i) ++*wrong;
  }
  return absl::OkStatus();
}

const meshdma::cli::Program kProgram = meshdma::examples::ExampleProgram(
    "01_right_permute",
    "Every device pushes an f32[8,128] shard to its right neighbour along\n"
    "mesh axis \"x\" with a remote async copy and checks the shard it\n"
    "received.");

}  // namespace

int main(int argc, char** argv) {
  const meshdma::RuntimeOptions options =
      meshdma::cli::ParseRuntimeOptionsOrExit(kProgram, argc, argv);
  auto runtime = meshdma::Runtime::Create(options);
  if (!runtime.ok()) {
    std::fprintf(stderr, "%s\n",
                 std::string(runtime.status().message()).c_str());
    return 1;
  }
  auto& rt = **runtime;
  auto mesh = rt.MakeMesh1D("x");
  if (!mesh.ok()) {
    std::fprintf(stderr, "%s\n", std::string(mesh.status().message()).c_str());
    return 1;
  }
  std::vector<int> wrong(rt.num_local_devices(), 0);
  absl::Status s = rt.Run(*mesh, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int g, meshdma::global_device_id());
    int local = 0;
    for (int d : rt.launch().DevicesOfRank(rt.launch().rank())) {
      if (d == g) break;
      ++local;
    }
    return RightPermute(&wrong[local]);
  });
  if (!s.ok()) {
    std::fprintf(stderr, "right permute failed: %s\n",
                 std::string(s.message()).c_str());
    return 1;
  }
  int total_wrong = 0;
  for (int w : wrong) total_wrong += w;
  std::printf(
      "rank %d: right permute of f32[%lld,%lld] over mesh %s (%d devices, %d "
      "in this process, %d process(es), DMA mode %s): %s\n",
      rt.launch().rank(), static_cast<long long>(kRows),
      static_cast<long long>(kCols), mesh->ToString().c_str(), rt.num_devices(),
      rt.num_local_devices(), rt.launch().num_processes(),
      rt.dma_mode() == meshdma::DmaMode::kAsync ? "async" : "eager",
      total_wrong == 0 ? "every device received its left neighbour's shard"
                       : "WRONG DATA");
  return total_wrong == 0 ? 0 : 1;
}
