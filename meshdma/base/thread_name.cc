#include "meshdma/base/thread_name.h"

#include <pthread.h>

#include <string>

namespace meshdma::base_internal {

void NameThread(std::thread& thread, absl::string_view name) {
#if defined(__linux__)
  constexpr size_t kLinuxNameChars = 15;
  const std::string cut(name.substr(0, kLinuxNameChars));
  pthread_setname_np(thread.native_handle(), cut.c_str());
#else
  (void)thread;
  (void)name;
#endif
}

}  // namespace meshdma::base_internal
