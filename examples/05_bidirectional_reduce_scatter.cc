// Tutorial 5: bidirectional ring reduce-scatter (the Pallas distributed
// tutorial's fourth kernel), written with the same API as any user kernel.
//
// Every device holds `input` [n, 2, kHalf]: block b is its contribution to the
// sum that device b keeps. Each block is split in two halves that travel in
// opposite directions, so both ring links carry data at once: half 0 goes
// right, half 1 goes left. In step k, for each direction d (+1 right, -1
// left), a device sends its partial sum of block (me - d*(k+1)) to neighbour
// me + d, and receives from neighbour me - d the partial of block
// (me - d*(k+2)), to which it adds its own contribution. After n - 1 steps
// the partial it receives is of its own block: with its contribution added it
// is the total, written to `output` [2, kHalf].
//
// Per direction: two receive slots (symmetric), two staging slots for the
// partials it sends, and a REGULAR capacity semaphore that the receiver
// signals as soon as it has consumed a slot; the sender waits for it before
// reusing a slot (from the third message on) and collects the rest at the end.
//
//   mpirun -np 4 build/examples/05_bidirectional_reduce_scatter
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

constexpr int64_t kHalf = 4 * 1024;

float Uniform(int device, int64_t i) {
  uint32_t x = static_cast<uint32_t>(device * 2654435761u + i * 40503u + 7u);
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return (x & 0xffffff) / 16777216.0f;
}

absl::Status BidirectionalReduceScatter(std::atomic<int64_t>* wrong) {
  using meshdma::SemaphoreType;
  MESHDMA_ASSIGN_OR_RETURN(int me, meshdma::axis_index("x"));
  MESHDMA_ASSIGN_OR_RETURN(int n, meshdma::axis_size("x"));
  MESHDMA_ASSIGN_OR_RETURN(auto input,
                           meshdma::AllocateSymmetric<float>({n, 2, kHalf}));
  MESHDMA_ASSIGN_OR_RETURN(auto output,
                           meshdma::AllocateSymmetric<float>({2, kHalf}));
  float* in = input.data_as<float>();
  for (int64_t i = 0; i < n * 2 * kHalf; ++i) in[i] = Uniform(me, i);
  auto own = [&](int block, int half) {
    return in + (static_cast<int64_t>(block) * 2 + half) * kHalf;
  };

  MESHDMA_RETURN_IF_ERROR(meshdma::RunKernel(
      {.name = "bidirectional_reduce_scatter"}, [&]() -> absl::Status {
        struct Direction {
          int d;                            // +1: send right; -1: send left.
          meshdma::ArrayRef recv, staging;  // [2, kHalf] each.
          meshdma::SemaphoreArray recv_sems;
          meshdma::Semaphore send_sem, capacity;
          std::optional<meshdma::AsyncCopyDescriptor> last_send[2];
        };
        Direction dirs[2];
        for (int h = 0; h < 2; ++h) {
          Direction& dir = dirs[h];
          dir.d = h == 0 ? 1 : -1;
          MESHDMA_ASSIGN_OR_RETURN(
              dir.recv, meshdma::AllocateSymmetric<float>({2, kHalf}));
          MESHDMA_ASSIGN_OR_RETURN(
              dir.staging, meshdma::AllocateSymmetric<float>({2, kHalf}));
          MESHDMA_ASSIGN_OR_RETURN(
              dir.recv_sems,
              meshdma::AllocateSemaphoreArray(SemaphoreType::kDma, 2, "recv"));
          MESHDMA_ASSIGN_OR_RETURN(
              dir.send_sem,
              meshdma::AllocateSemaphore(SemaphoreType::kDma, "send"));
          MESHDMA_ASSIGN_OR_RETURN(
              dir.capacity,
              meshdma::AllocateSemaphore(SemaphoreType::kRegular, "capacity"));
        }
        auto wrap = [&](int b) { return ((b % n) + n) % n; };
        for (int k = 0; k < n - 1; ++k) {
          // Both directions send first, so the two links work together ...
          for (int h = 0; h < 2; ++h) {
            Direction& dir = dirs[h];
            const int slot = k % 2;
            // 1. Step 0 sends my own contribution; later steps the partial
            //    staged in the previous step.
            if (k == 0) {
              std::copy(own(wrap(me - dir.d), h),
                        own(wrap(me - dir.d), h) + kHalf,
                        dir.staging.data_as<float>());
            }
            // 2. Slot `slot` of the neighbour is free for messages 0 and 1;
            //    after that, once it signals capacity.
            if (k >= 2) {
              MESHDMA_RETURN_IF_ERROR(meshdma::semaphore_wait(dir.capacity));
            }
            MESHDMA_ASSIGN_OR_RETURN(auto src, dir.staging.At(slot));
            MESHDMA_ASSIGN_OR_RETURN(auto dst, dir.recv.At(slot));
            dir.last_send[slot] = meshdma::make_async_remote_copy(
                src, dst, dir.send_sem, dir.recv_sems[slot], wrap(me + dir.d));
            MESHDMA_RETURN_IF_ERROR(dir.last_send[slot]->start());
          }
          // ... then both receive and reduce.
          for (int h = 0; h < 2; ++h) {
            Direction& dir = dirs[h];
            const int slot = k % 2;
            MESHDMA_ASSIGN_OR_RETURN(auto got, dir.recv.At(slot));
            auto arrival = meshdma::make_async_remote_copy(
                got, got, dir.send_sem, dir.recv_sems[slot], wrap(me - dir.d));
            MESHDMA_RETURN_IF_ERROR(arrival.wait_recv());
            // 3. Add my contribution to the partial of block me - d*(k+2):
            //    into the output at the last step, else into the staging
            //    slot of the next send (once its previous send was read).
            const float* g = got.data_as<float>();
            const float* mine = own(wrap(me - dir.d * (k + 2)), h);
            float* dst;
            if (k == n - 2) {
              dst = output.data_as<float>() + h * kHalf;
            } else {
              const int next = (k + 1) % 2;
              if (dir.last_send[next].has_value()) {
                MESHDMA_RETURN_IF_ERROR(dir.last_send[next]->wait_send());
                dir.last_send[next].reset();
              }
              dst = dir.staging.data_as<float>() + next * kHalf;
            }
            for (int64_t i = 0; i < kHalf; ++i) dst[i] = g[i] + mine[i];
            // 4. The slot is consumed: hand it back to the sender.
            MESHDMA_RETURN_IF_ERROR(
                meshdma::semaphore_signal(dir.capacity, 1, wrap(me - dir.d)));
          }
        }
        // 5. Wait for my last sends and collect the remaining capacity
        //    signals (n - 1 messages, max(0, n - 3) waited in the loop).
        for (Direction& dir : dirs) {
          for (auto& send : dir.last_send) {
            if (send.has_value()) MESHDMA_RETURN_IF_ERROR(send->wait_send());
          }
          const int remaining = std::min(2, n - 1);
          if (remaining > 0) {
            MESHDMA_RETURN_IF_ERROR(
                meshdma::semaphore_wait(dir.capacity, remaining));
          }
        }
        return absl::OkStatus();
      }));

  if (n == 1) {
    std::copy(own(0, 0), own(0, 0) + 2 * kHalf, output.data_as<float>());
  }
  // Against a naive sum of block `me` over all devices, within 1e-5.
  int64_t bad = 0;
  for (int64_t i = 0; i < 2 * kHalf; ++i) {
    double want = 0;
    for (int d = 0; d < n; ++d) want += Uniform(d, me * 2 * kHalf + i);
    const double got = output.data_as<float>()[i];
    bad += std::fabs(got - want) > 1e-5 * std::max(1.0, std::fabs(want));
  }
  *wrong += bad;
  return absl::OkStatus();
}

const meshdma::cli::Program kProgram = meshdma::examples::ExampleProgram(
    "05_bidirectional_reduce_scatter",
    "Bidirectional ring reduce-scatter: each block's halves travel in\n"
    "opposite directions; every device checks the block it keeps.");

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
  absl::Status s = rt.Run(*mesh, [&]() -> absl::Status {
    return BidirectionalReduceScatter(&wrong);
  });
  if (!s.ok()) {
    std::fprintf(stderr, "bidirectional reduce-scatter failed: %s\n",
                 std::string(s.message()).c_str());
    return 1;
  }
  std::printf(
      "rank %d: bidirectional reduce-scatter of f32[n,2,%lld] over mesh %s (%d "
      "devices, %d in this process): %s\n",
      rt.launch().rank(), static_cast<long long>(kHalf),
      mesh->ToString().c_str(), rt.num_devices(), rt.num_local_devices(),
      wrong == 0 ? "every device holds the sum of its block (within 1e-5)"
                 : "WRONG DATA");
  return wrong == 0 ? 0 : 1;
}
