// meshdma-run --help prints the usage and the flags on stdout and exits 0;
// an unknown flag is an error with the synopsis and exit status 2.
// RUN: meshdma-run --help | FileCheck %s
// RUN: meshdma-run -h | FileCheck %s
// RUN: meshdma-run --bogus 2>&1 >/dev/null; test $? -eq 2
// RUN: not meshdma-run --bogus 2>&1 | FileCheck %s --check-prefix=BAD
// CHECK: usage: meshdma-run FILE.mlir --kernel=NAME
// CHECK: --kernel=NAME        the kernel (a func.func with meshdma.kernel)
// CHECK: --help, -h           this text
// CHECK: Exit status 0 when the kernel ran on every device and matched
// BAD: meshdma-run: unknown flag --bogus
// BAD-NEXT: usage: meshdma-run FILE.mlir --kernel=NAME
