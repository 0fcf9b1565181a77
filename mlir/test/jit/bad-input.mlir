// meshdma-run reports bad input as a diagnostic with a location and exits 1:
// a syntax error, a verifier error, an unknown kernel, and a kernel error at
// run time (an id off the mesh, reported by the runtime; a mesh that is not
// the kernel's).
// RUN: sed -n '/^\/\/ SYNTAX/,$p' %s | sed 's/^.. SYNTAX//' > %t/syntax.mlir; \
// RUN:   not meshdma-run %t/syntax.mlir --kernel=k 2>&1 | FileCheck %s --check-prefix=SYNTAX
// RUN: not meshdma-run %s --kernel=nope 2>&1 | FileCheck %s --check-prefix=NOKERNEL
// RUN: not meshdma-run %s --kernel=off_mesh 2>&1 | FileCheck %s --check-prefix=RUNTIME
// RUN: not meshdma-run %s --kernel=off_mesh --mesh=y:2 2>&1 | FileCheck %s --check-prefix=AXIS
// RUN: sed 's/shape = 2)/shape = 3)/' %s > %t/three.mlir; \
// RUN:   not meshdma-run %t/three.mlir --kernel=off_mesh 2>&1 | FileCheck %s --check-prefix=SIZE
// RUN: sed 's/sem_signal %reg, %c1 device(%c5) : !reg/sem_signal %d, %c1 device(%c5) : !dma/' \
// RUN:   %s > %t/verify.mlir; \
// RUN:   not meshdma-run %t/verify.mlir --kernel=off_mesh 2>&1 | FileCheck %s --check-prefix=VERIFY
!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
mesh.mesh @ring(shape = 2) {meshdma.axes = ["x"]}
// AXIS: kernel 'off_mesh' is written for mesh @ring with axis 'x' of size 2: {{.*}}
// SIZE: kernel 'off_mesh' is written for mesh @ring with axis 'x' of size 3, the running mesh has 2
// NOKERNEL: meshdma-run: no kernel 'nope'
// RUNTIME: device 0 (rank 0, local 0): kernel 'off_mesh': device id (5): coordinate 5 out of range for axis 'x' of size 2 in mesh {x: 2}
// VERIFY: verify.mlir:[[@LINE+6]]:3: error: 'meshdma.sem_signal' op cannot signal a DMA semaphore
func.func @off_mesh() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c1 = arith.constant 1 : i32
  %c5 = arith.constant 5 : i32
  %reg = meshdma.sem_alloc : !reg
  %d = meshdma.sem_alloc : !dma
  meshdma.sem_signal %reg, %c1 device(%c5) : !reg
  meshdma.sem_wait %reg, %c1 : !reg
  return
}
// SYNTAX: syntax.mlir:1:{{[0-9]+}}: error: {{.*}}
// SYNTAX func.func @k( {
