// Device 0 allocates its semaphores in another order than the others: the
// k-th allocation would name different objects.
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s
!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
mesh.mesh @ring(shape = ?) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : i32
  %me = meshdma.axis_index "x"
  %first = arith.cmpi eq, %me, %c0 : i32
  scf.if %first {
    %a = meshdma.sem_alloc : !dma
    %b = meshdma.sem_alloc : !reg
  } else {
    // CHECK: asymmetric-allocation.mlir:[[@LINE+1]]:10: error: asymmetric allocation: allocation #0 is a regular semaphore on device 1 but a dma semaphore on device 0
    %b = meshdma.sem_alloc : !reg
    // CHECK: asymmetric-allocation.mlir:[[@LINE-5]]:10: note: device 0 allocates it here
    %a = meshdma.sem_alloc : !dma
  }
  return
}
