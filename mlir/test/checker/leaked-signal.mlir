// Two signals, one wait: the semaphore is not back to 0 at exit.
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s
!reg = !meshdma.semaphore<regular>
mesh.mesh @ring(shape = ?) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c1 = arith.constant 1 : i32
  %me = meshdma.axis_index "x"
  %n = meshdma.axis_size "x"
  %r = arith.addi %me, %c1 : i32
  %right = arith.remsi %r, %n : i32
  // CHECK: leaked-signal.mlir:[[@LINE+1]]:10: error: semaphore #0 (regular) of device 0 holds 1 at exit, the exit contract needs 0 (4 devices)
  %sem = meshdma.sem_alloc : !reg
  meshdma.sem_signal %sem, %c1 device(%right) : !reg
  // CHECK: leaked-signal.mlir:[[@LINE+1]]:3: note: unmatched: 1 from device 3 here
  meshdma.sem_signal %sem, %c1 device(%right) : !reg
  meshdma.sem_wait %sem, %c1 : !reg
  return
}
