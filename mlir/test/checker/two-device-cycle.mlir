// Each of two devices waits for the other's signal before sending its own:
// the report names the wait-for cycle.
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol)' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s
!reg = !meshdma.semaphore<regular>
mesh.mesh @pair(shape = 2) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @pair} {
  %c1 = arith.constant 1 : i32
  %me = meshdma.axis_index "x"
  %other = arith.subi %c1, %me : i32
  %go = meshdma.sem_alloc : !reg
  // CHECK: two-device-cycle.mlir:[[@LINE+3]]:3: error: deadlock: device 0 is stuck here: sem_wait needs 1 on semaphore #0 (regular), has 0 (2 of 2 devices are stuck)
  // CHECK: note: wait-for cycle: device 0 -> device 1 -> device 0
  // CHECK: two-device-cycle.mlir:[[@LINE+1]]:3: note: device 1 is stuck here: sem_wait needs 1 on semaphore #0 (regular), has 0
  meshdma.sem_wait %go, %c1 : !reg
  meshdma.sem_signal %go, %c1 device(%other) : !reg
  return
}
