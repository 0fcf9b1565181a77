// A wait that no device ever signals is a deadlock on every device.
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s
!reg = !meshdma.semaphore<regular>
mesh.mesh @ring(shape = ?) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c1 = arith.constant 1 : i32
  %ready = meshdma.sem_alloc : !reg
  // CHECK: wait-nobody-signals.mlir:[[@LINE+2]]:3: error: deadlock: device 0 is stuck here: sem_wait needs 1 on semaphore #0 (regular), has 0 (4 of 4 devices are stuck)
  // CHECK: note: no device credits it in the rest of its trace
  meshdma.sem_wait %ready, %c1 : !reg
  return
}
