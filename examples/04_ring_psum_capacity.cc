// Tutorial 4: ring all-reduce (psum) with double-buffered receive slots and a
// REGULAR "capacity" semaphore (the Pallas distributed tutorial's third
// kernel), written with the same API as any user kernel.
//
// Each device's input goes once round the ring: in step k a device forwards
// what it received in step k-1 (its own input in step 0) to its right
// neighbour and adds what arrives from its left into its accumulator. Two
// receive slots alternate, so a step's transfer overlaps the previous step's
// addition. A sender may only write a slot that the receiver has finished
// with; the receiver says so by signalling the sender's capacity semaphore
// after it has added the slot and forwarded it. The sender waits for that
// signal before reusing a slot (steps k >= 2) and collects the last one at
// the end, so every semaphore is 0 when the kernel exits.
//
//   mpirun -np 4 build/examples/04_ring_psum_capacity
#include <atomic>
#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include "examples/example_util.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"
#include "tools/runtime_flags.h"

namespace {

constexpr int64_t kElems = 8 * 1024;

// A deterministic uniform value in [0, 1) for (device, i).
float Uniform(int device, int64_t i) {
  uint32_t x = static_cast<uint32_t>(device * 2654435761u + i * 40503u + 17u);
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return (x & 0xffffff) / 16777216.0f;
}

absl::Status RingPsum(std::atomic<int64_t>* wrong) {
  using meshdma::SemaphoreType;
  MESHDMA_ASSIGN_OR_RETURN(int me, meshdma::axis_index("x"));
  MESHDMA_ASSIGN_OR_RETURN(int n, meshdma::axis_size("x"));
  std::vector<float> input(kElems), acc(kElems);
  for (int64_t i = 0; i < kElems; ++i) acc[i] = input[i] = Uniform(me, i);
  const int64_t shape[] = {kElems};
  MESHDMA_ASSIGN_OR_RETURN(auto input_ref,
                           meshdma::ArrayRef::FromPointer(
                               input.data(), meshdma::DType::kF32, shape));

  MESHDMA_RETURN_IF_ERROR(
      meshdma::RunKernel({.name = "ring_psum"}, [&]() -> absl::Status {
        // Two receive slots; a DMA semaphore for each, one for my sends, and
        // the capacity semaphore that my right neighbour signals.
        MESHDMA_ASSIGN_OR_RETURN(
            auto slots, meshdma::AllocateSymmetric<float>({2, kElems}));
        MESHDMA_ASSIGN_OR_RETURN(
            auto recv_sems,
            meshdma::AllocateSemaphoreArray(SemaphoreType::kDma, 2, "recv"));
        MESHDMA_ASSIGN_OR_RETURN(
            auto send_sem,
            meshdma::AllocateSemaphore(SemaphoreType::kDma, "send"));
        MESHDMA_ASSIGN_OR_RETURN(
            auto capacity,
            meshdma::AllocateSemaphore(SemaphoreType::kRegular, "capacity"));
        const int right = (me + 1) % n;
        const int left = (me + n - 1) % n;
        for (int k = 0; k < n - 1; ++k) {
          MESHDMA_ASSIGN_OR_RETURN(auto out_slot, slots.At(k % 2));
          // 1. Wait until the right neighbour has freed slot k % 2 (it was
          //    last written in step k - 2).
          if (k >= 2)
            MESHDMA_RETURN_IF_ERROR(meshdma::semaphore_wait(capacity));
          // 2. Forward my input (k = 0) or what arrived in step k - 1.
          meshdma::ArrayRef src = input_ref;
          if (k > 0) {
            MESHDMA_ASSIGN_OR_RETURN(src, slots.At((k - 1) % 2));
          }
          auto copy = meshdma::make_async_remote_copy(src, out_slot, send_sem,
                                                      recv_sems[k % 2], right);
          MESHDMA_RETURN_IF_ERROR(copy.start());
          // 3. Receive the left neighbour's step-k block into slot k % 2 and
          //    add it to the accumulator while my copy is in flight.
          MESHDMA_RETURN_IF_ERROR(copy.wait_recv());
          const float* got = out_slot.data_as<float>();
          for (int64_t i = 0; i < kElems; ++i) acc[i] += got[i];
          // 4. Once my forward has been read, slot (k - 1) % 2 is free again:
          //    tell the left neighbour, who writes it in step k + 1.
          MESHDMA_RETURN_IF_ERROR(copy.wait_send());
          if (k >= 1) {
            MESHDMA_RETURN_IF_ERROR(
                meshdma::semaphore_signal(capacity, 1, left));
          }
        }
        // 5. The right neighbour signals once more than I waited (for its
        //    last forward); collect it so the semaphore ends at 0.
        if (n >= 3) MESHDMA_RETURN_IF_ERROR(meshdma::semaphore_wait(capacity));
        return absl::OkStatus();
      }));

  // Against a naive sum, within 1e-5 as in the tutorial.
  int64_t bad = 0;
  for (int64_t i = 0; i < kElems; ++i) {
    double want = 0;
    for (int d = 0; d < n; ++d) want += Uniform(d, i);
    bad += std::fabs(acc[i] - want) > 1e-5 * std::max(1.0, std::fabs(want));
  }
  *wrong += bad;
  return absl::OkStatus();
}

const meshdma::cli::Program kProgram = meshdma::examples::ExampleProgram(
    "04_ring_psum_capacity",
    "Ring all-reduce (psum) with double-buffered receive slots and a\n"
    "REGULAR capacity semaphore, checked against the sum.");

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
      rt.Run(*mesh, [&]() -> absl::Status { return RingPsum(&wrong); });
  if (!s.ok()) {
    std::fprintf(stderr, "ring psum failed: %s\n",
                 std::string(s.message()).c_str());
    return 1;
  }
  std::printf(
      "rank %d: ring psum of f32[%lld] over mesh %s (%d devices, %d in this "
      "process), two receive slots and a capacity semaphore: %s\n",
      rt.launch().rank(), static_cast<long long>(kElems),
      mesh->ToString().c_str(), rt.num_devices(), rt.num_local_devices(),
      wrong == 0 ? "every device holds the sum (within 1e-5)" : "WRONG DATA");
  return wrong == 0 ? 0 : 1;
}
