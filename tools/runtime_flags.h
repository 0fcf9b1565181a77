// Flags that mirror `RuntimeOptions` (--devices-per-process, --dma-mode, ...)
// for meshdma-info and the examples. Unset, each setting is left to the
// environment (MESHDMA_DEVICES_PER_PROCESS, ...) and then the default, as
// `Runtime::Create` resolves it.
#ifndef MESHDMA_TOOLS_RUNTIME_FLAGS_H_
#define MESHDMA_TOOLS_RUNTIME_FLAGS_H_

#include "absl/status/statusor.h"
#include "meshdma/dma/runtime.h"
#include "tools/flags.h"

namespace meshdma::cli {

// The usage's footer for programs with these flags: the variables that
// decide what a flag left unset means.
extern const char kRuntimeFlagsFooter[];

// The options the given flags set (after `Parse`); a value out of range is
// InvalidArgument naming the flag and the value.
absl::StatusOr<RuntimeOptions> RuntimeOptionsFromFlags(const Program& program);

// `ParseOrExit`, then `RuntimeOptionsFromFlags`, exiting 2 on a bad value.
RuntimeOptions ParseRuntimeOptionsOrExit(const Program& program, int argc,
                                         char** argv);

}  // namespace meshdma::cli

#endif  // MESHDMA_TOOLS_RUNTIME_FLAGS_H_
