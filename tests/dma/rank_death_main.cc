// A process that dies in the middle of a kernel must not leave the others
// hanging: they stop with an error within the wait timeout and the launch
// exits nonzero. Run under mpirun; ctest expects failure (WILL_FAIL), and the
// test's own timeout catches a hang.
#include <unistd.h>

#include <cstdio>

#include "meshdma/base/status_macros.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"

int main() {
  meshdma::RuntimeOptions o;
  o.wait_timeout = absl::Seconds(5);
  auto rt = meshdma::Runtime::Create(o);
  if (!rt.ok()) return 3;
  const int rank = (*rt)->launch().rank();
  absl::Status s = (*rt)->Run(*(*rt)->MakeMesh1D(), [&]() -> absl::Status {
    return meshdma::RunKernel({.name = "victim"}, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(
          auto sem, meshdma::AllocateSemaphore(meshdma::SemaphoreType::kRegular,
                                               "never"));
      if (rank == 1) _exit(7);  // Dies without a word.
      return meshdma::semaphore_wait(sem, 1);
    });
  });
  std::fprintf(stderr, "rank %d: %s\n", rank, std::string(s.message()).c_str());
  return s.ok() ? 0 : 1;
}
