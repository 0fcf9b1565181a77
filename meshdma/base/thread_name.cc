#include "meshdma/base/thread_name.h"

#include <pthread.h>

#include <string>

namespace meshdma::base_internal {

namespace {

void NameByHandle(pthread_t handle, absl::string_view name) {
#if defined(__linux__)
  constexpr size_t kLinuxNameChars = 15;
  const std::string cut(name.substr(0, kLinuxNameChars));
  pthread_setname_np(handle, cut.c_str());
#else
  (void)handle;
  (void)name;
#endif
}

}  // namespace

void NameThisThread(absl::string_view name) {
  NameByHandle(pthread_self(), name);
}

void NameThread(std::thread& thread, absl::string_view name) {
  NameByHandle(thread.native_handle(), name);
}

}  // namespace meshdma::base_internal
