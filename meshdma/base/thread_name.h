// Names meshdma's threads, so that `top -H`, `perf` and `gdb` tell
// meshdma's threads apart: "meshdma-dev3" (device 3's thread),
// "meshdma-mpi" and "meshdma-tcp" (a transport's progress thread),
// "meshdma-copy" (a copy worker), "meshdma-races" (checked mode's mailbox).
#ifndef MESHDMA_BASE_THREAD_NAME_H_
#define MESHDMA_BASE_THREAD_NAME_H_

#include <thread>

#include "absl/strings/string_view.h"

namespace meshdma::base_internal {

// Linux keeps 15 characters of a thread's name; longer names are cut. A
// no-op where the platform has no thread names.
void NameThisThread(absl::string_view name);

// Names `thread` from the thread that started it, so that the name is in
// place when the creator returns (a thread naming itself may not have run
// yet when someone lists the process's threads).
void NameThread(std::thread& thread, absl::string_view name);

}  // namespace meshdma::base_internal

#endif  // MESHDMA_BASE_THREAD_NAME_H_
