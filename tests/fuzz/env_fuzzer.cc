// Fuzzes the parsers of environment values (meshdma/base/env.h): the input
// is set as the value of a variable and read back as each kind, then as
// every row of the configuration table.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "meshdma/base/config.h"
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
  // Every row of the configuration table, read with its own type and range.
  for (const meshdma::config::Variable* v : meshdma::config::AllVariables()) {
    setenv(v->name, value.c_str(), 1);
    (void)meshdma::base_internal::EnvString(*v);
    switch (v->type) {
      case meshdma::config::Type::kBool:
        (void)meshdma::base_internal::EnvBool(*v);
        break;
      case meshdma::config::Type::kInt:
        (void)meshdma::base_internal::EnvInt(*v);
        break;
      case meshdma::config::Type::kSeconds:
        (void)meshdma::base_internal::EnvSeconds(*v);
        break;
      case meshdma::config::Type::kChoice:
        (void)meshdma::base_internal::EnvChoice(*v);
        break;
      case meshdma::config::Type::kString:
        break;
    }
    unsetenv(v->name);
  }
  return 0;
}
