// Fuzzes the parsers of environment values (meshdma/base/env.h): the input
// is set as the value of a variable and read back as each kind.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "meshdma/base/env.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // setenv takes a C string: the value ends at the first NUL.
  const std::string value(reinterpret_cast<const char*>(data),
                          strnlen(reinterpret_cast<const char*>(data), size));
  constexpr char kName[] = "MESHDMA_FUZZ_VALUE";
  setenv(kName, value.c_str(), 1);
  (void)meshdma::base_internal::EnvString(kName);
  (void)meshdma::base_internal::EnvInt(kName, INT64_MIN, INT64_MAX);
  (void)meshdma::base_internal::EnvInt(kName, 1, 4096);
  (void)meshdma::base_internal::EnvDouble(kName, 0.0, 1e9);
  (void)meshdma::base_internal::EnvSeconds(kName, 1e6);
  (void)meshdma::base_internal::EnvBool(kName);
  (void)meshdma::base_internal::EnvChoice(kName, {"sync", "async", "auto"});
  unsetenv(kName);
  return 0;
}
