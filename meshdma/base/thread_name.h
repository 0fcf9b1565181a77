// Names meshdma's threads, so that `top -H`, `perf` and `gdb` tell them
// apart: "meshdma-dev3" (device 3's thread), "meshdma-mpi" and
// "meshdma-tcp" (a transport's progress thread), "meshdma-copy" (a copy
// worker), "meshdma-watch" (the watch over the other processes of this
// machine), "meshdma-races" (checked mode's mailbox).
#ifndef MESHDMA_BASE_THREAD_NAME_H_
#define MESHDMA_BASE_THREAD_NAME_H_

#include <thread>

#include "absl/strings/string_view.h"

namespace meshdma::base_internal {

// Names `thread`, called by the thread that started it, so that the name is
// in place when its creator returns (a thread that named itself might not
// have run yet when someone lists the process's threads). Linux keeps 15
// characters of a name; longer names are cut. A no-op where the platform
// has no thread names.
void NameThread(std::thread& thread, absl::string_view name);

}  // namespace meshdma::base_internal

#endif  // MESHDMA_BASE_THREAD_NAME_H_
