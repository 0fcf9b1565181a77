// Tutorial 3: ring all-gather (the Pallas distributed tutorial's second
// kernel), written with the same API as any user kernel.
//
// Every device starts with one block of `kRows` x `kCols` floats and ends with
// all n blocks, in device order, in `output` [n, kRows, kCols]. The blocks go
// round the ring: in step k a device forwards block (me - k) mod n, which it
// owns (k = 0) or received in step k-1, straight into the same slot of its
// right neighbour's `output` (a symmetric buffer, so the copy lands where the
// data is finally needed). One DMA receive semaphore per step keeps copies
// that complete out of order from being mistaken for each other.
//
//   mpirun -np 4 build/examples/03_ring_all_gather
#include <atomic>
#include <cstdio>
#include <vector>

#include "examples/example_util.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"
#include "tools/runtime_flags.h"

namespace {

constexpr int64_t kRows = 16;
constexpr int64_t kCols = 256;

float Value(int device, int64_t i) { return device * 10000.0f + i; }

absl::Status RingAllGather(std::atomic<int64_t>* wrong) {
  MESHDMA_ASSIGN_OR_RETURN(int me, meshdma::axis_index("x"));
  MESHDMA_ASSIGN_OR_RETURN(int n, meshdma::axis_size("x"));
  MESHDMA_ASSIGN_OR_RETURN(
      auto output, meshdma::AllocateSymmetric<float>({n, kRows, kCols}));
  // My own block starts in its slot of `output`.
  MESHDMA_ASSIGN_OR_RETURN(auto mine, output.At(me));
  for (int64_t i = 0; i < kRows * kCols; ++i) {
    mine.data_as<float>()[i] = Value(me, i);
  }

  MESHDMA_RETURN_IF_ERROR(
      meshdma::RunKernel({.name = "ring_all_gather"}, [&]() -> absl::Status {
        using meshdma::SemaphoreType;
        MESHDMA_ASSIGN_OR_RETURN(
            auto send_sem,
            meshdma::AllocateSemaphore(SemaphoreType::kDma, "send"));
        MESHDMA_ASSIGN_OR_RETURN(
            auto recv_sems,
            meshdma::AllocateSemaphoreArray(SemaphoreType::kDma,
                                            std::max(1, n - 1), "recv"));
        const int right = (me + 1) % n;
        for (int k = 0; k < n - 1; ++k) {
          // Step k: forward block (me - k) to the right neighbour's slot.
          const int slot = (me - k + n) % n;
          MESHDMA_ASSIGN_OR_RETURN(auto block, output.At(slot));
          auto copy = meshdma::make_async_remote_copy(block, block, send_sem,
                                                      recv_sems[k], right);
          MESHDMA_RETURN_IF_ERROR(copy.start());
          // Wait until my block has been read, and until my left neighbour's
          // step-k block (slot me - k - 1) has landed here: the next step
          // forwards it.
          MESHDMA_RETURN_IF_ERROR(copy.wait_send());
          MESHDMA_ASSIGN_OR_RETURN(auto incoming,
                                   output.At((me - k - 1 + n) % n));
          auto arrival = meshdma::make_async_remote_copy(
              incoming, incoming, send_sem, recv_sems[k], right);
          MESHDMA_RETURN_IF_ERROR(arrival.wait_recv());
        }
        return absl::OkStatus();
      }));

  int64_t bad = 0;
  for (int d = 0; d < n; ++d) {
    const float* block = output.data_as<float>() + d * kRows * kCols;
    for (int64_t i = 0; i < kRows * kCols; ++i) bad += block[i] != Value(d, i);
  }
  *wrong += bad;
  return absl::OkStatus();
}

const meshdma::cli::Program kProgram = meshdma::examples::ExampleProgram(
    "03_ring_all_gather",
    "Ring all-gather written as a user kernel: every device ends with all\n"
    "blocks in device order, checked against the expected values.");

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
  if (!mesh.ok()) return 1;
  std::atomic<int64_t> wrong{0};
  absl::Status s =
      rt.Run(*mesh, [&]() -> absl::Status { return RingAllGather(&wrong); });
  if (!s.ok()) {
    std::fprintf(stderr, "ring all-gather failed: %s\n",
                 std::string(s.message()).c_str());
    return 1;
  }
  std::printf(
      "rank %d: ring all-gather of f32[%lld,%lld] blocks over mesh %s (%d "
      "devices, %d in this process): %s\n",
      rt.launch().rank(), static_cast<long long>(kRows),
      static_cast<long long>(kCols), mesh->ToString().c_str(), rt.num_devices(),
      rt.num_local_devices(),
      wrong == 0 ? "every device holds every block, in device order"
                 : "WRONG DATA");
  return wrong == 0 ? 0 : 1;
}
