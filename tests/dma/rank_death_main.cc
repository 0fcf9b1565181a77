// A process that dies, stops or leaves early must not leave the others
// hanging: every live process stops with an error naming the lost rank within
// the wait timeout and exits nonzero, also when the launcher does not kill
// the job (mpirun --enable-recovery). Run under mpirun by
// check_rank_death.py, which times each process.
//
// Usage: rank_death_main MODE, MODE one of
//   exit   rank 1 calls _exit(7) inside a kernel
//   exit0  rank 1 calls std::exit(0) inside a kernel (its atexit handlers
//          and static destructors run while its runtime's threads still do)
//   kill   rank 1 sends itself SIGKILL inside a kernel
//   kill_sending
//          every device starts a 16 MiB put to its right neighbour, then
//          rank 1 sends itself SIGKILL 1 ms later, while they move (between
//          hosts over TCP: in the middle of the payloads, with the rest of
//          each still queued at its sender)
//   stop   rank 1 sends itself SIGSTOP inside a kernel (stuck forever)
//   early  rank 1 returns from main (status 0) before calling Run
//   again  as stop; then rank 0 calls Run twice more: the first is refused
//          (naming rank 1) within the wait timeout, the second at once
//   hang   no rank is lost: every device waits for a signal that never
//          comes, and every process's Status carries the mesh-wide picture
// Each process prints "rank R pid P" at start, whether its Run's Status
// carries the mesh-wide picture naming rank 1, and "rank R exits after S s"
// when its runtime is gone.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "exit";
  const auto start = std::chrono::steady_clock::now();
  int rank = -1;
  absl::Status s;
  {
    auto rt = meshdma::Runtime::Create();
    if (!rt.ok()) {
      std::fprintf(stderr, "%s\n", std::string(rt.status().message()).c_str());
      return 3;
    }
    rank = (*rt)->launch().rank();
    std::fprintf(stderr, "rank %d pid %d\n", rank, static_cast<int>(getpid()));
    if (mode == "early" && rank == 1) {
      std::fprintf(stderr, "rank 1 leaves before Run\n");
    } else {
      s = (*rt)->Run(*(*rt)->MakeMesh1D(), [&]() -> absl::Status {
        const bool sending = mode == "kill_sending";
        const int64_t ints = sending ? int64_t{4} << 20 : 1;  // 16 MiB.
        MESHDMA_ASSIGN_OR_RETURN(auto src,
                                 meshdma::AllocateSymmetric<int32_t>({ints}));
        MESHDMA_ASSIGN_OR_RETURN(auto dst,
                                 meshdma::AllocateSymmetric<int32_t>({ints}));
        return meshdma::RunKernel({.name = "victim"}, [&]() -> absl::Status {
          MESHDMA_ASSIGN_OR_RETURN(
              auto sem, meshdma::AllocateSemaphore(
                            meshdma::SemaphoreType::kRegular, "never"));
          if (sending) {
            MESHDMA_ASSIGN_OR_RETURN(auto sent,
                                     meshdma::AllocateSemaphore(
                                         meshdma::SemaphoreType::kDma, "sent"));
            MESHDMA_ASSIGN_OR_RETURN(
                auto arrived, meshdma::AllocateSemaphore(
                                  meshdma::SemaphoreType::kDma, "arrived"));
            MESHDMA_ASSIGN_OR_RETURN(int me, meshdma::axis_index("x"));
            const int n = (*rt)->num_devices();
            MESHDMA_RETURN_IF_ERROR(meshdma::make_async_remote_copy(
                                        src, dst, sent, arrived, (me + 1) % n)
                                        .start());
            if (rank == 1) {
              usleep(1000);
              raise(SIGKILL);
            }
          }
          if (rank == 1) {
            if (mode == "exit") _exit(7);       // Dies without a word.
            if (mode == "exit0") std::exit(0);  // A clean-looking exit.
            if (mode == "kill") raise(SIGKILL);
            if (mode == "stop" || mode == "again") raise(SIGSTOP);
          }
          return meshdma::semaphore_wait(sem, 1);
        });
      });
    }
    std::fprintf(stderr, "rank %d: %s\n", rank,
                 std::string(s.message()).c_str());
    std::fprintf(stderr, "rank %d mesh-wide picture in its Status: %d\n", rank,
                 absl::StrContains(s.message(), "Mesh-wide state") &&
                     absl::StrContains(s.message(), "rank 1 (pid"));
    // A lost process cannot be recovered from: every later Run is refused,
    // the first after the wait timeout, the next at once.
    for (int again = 1; mode == "again" && again <= 2; ++again) {
      const auto before = std::chrono::steady_clock::now();
      absl::Status refused =
          (*rt)->Run(*(*rt)->MakeMesh1D(), [] { return absl::OkStatus(); });
      const double took = std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - before)
                              .count();
      std::fprintf(stderr, "rank %d Run again %d after %.2f s: %s\n", rank,
                   again, took, std::string(refused.message()).c_str());
      if (refused.ok()) s = absl::InternalError("a Run after a lost rank ran");
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::fprintf(stderr, "rank %d exits after %.2f s\n", rank, secs);
  return s.ok() ? 0 : 1;
}
