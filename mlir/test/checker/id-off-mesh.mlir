// The right neighbour without the wrap-around: the last device targets a
// device that does not exist.
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 kernel=logical})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=LOGICAL
!reg = !meshdma.semaphore<regular>
mesh.mesh @ring(shape = ?) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c1 = arith.constant 1 : i32
  %me = meshdma.axis_index "x"
  %right = arith.addi %me, %c1 : i32
  %sem = meshdma.sem_alloc : !reg
  // CHECK: id-off-mesh.mlir:[[@LINE+1]]:3: error: device id off the mesh: coordinate 4 along axis 'x' of size 4 (device 3)
  meshdma.sem_signal %sem, %c1 device(%right) : !reg
  meshdma.sem_wait %sem, %c1 : !reg
  return
}
func.func @logical() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c1 = arith.constant 1 : i32
  %c4 = arith.constant 4 : i32
  %me = meshdma.device_id
  %t = arith.subi %me, %c4 : i32
  %sem = meshdma.sem_alloc : !reg
  // LOGICAL: id-off-mesh.mlir:[[@LINE+1]]:3: error: device id off the mesh: LOGICAL id -4 on a mesh of 4 devices (device 0)
  meshdma.sem_signal %sem, %c1 device(%t) logical : !reg
  return
}
