// Control flow, ids or amounts that depend on data are reported, never
// passed.
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=trip_count})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=TRIP
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=sem_read_branch})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=READ
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=scalar_arg})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=ARG
!reg = !meshdma.semaphore<regular>
mesh.mesh @ring(shape = ?) {meshdma.axes = ["x"]}
func.func @trip_count(%counts: memref<1xindex>) attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1 : i32
  %sem = meshdma.sem_alloc : !reg
  %n = memref.load %counts[%c0] : memref<1xindex>
  // TRIP: unverifiable.mlir:[[@LINE+1]]:3: error: unverifiable: the loop's upper bound depends on data (the result of 'memref.load')
  scf.for %i = %c0 to %n step %c1 {
  // TRIP: unverifiable.mlir:[[@LINE-3]]:8: note: the data comes from here
    meshdma.sem_signal %sem, %one : !reg
    meshdma.sem_wait %sem, %one : !reg
  }
  return
}
func.func @sem_read_branch() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %zero = arith.constant 0 : i32
  %sem = meshdma.sem_alloc : !reg
  %v = meshdma.sem_read %sem : !reg
  %c = arith.cmpi eq, %v, %zero : i32
  // READ: unverifiable.mlir:[[@LINE+1]]:3: error: unverifiable: the scf.if condition depends on data (a semaphore count read by sem_read)
  scf.if %c {
    meshdma.sem_wait %sem, %zero : !reg
  }
  return
}
func.func @scalar_arg(%amount: i32) attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %sem = meshdma.sem_alloc : !reg
  // ARG: unverifiable.mlir:[[@LINE+1]]:3: error: unverifiable: the signal amount depends on data (kernel argument #0)
  meshdma.sem_signal %sem, %amount : !reg
  meshdma.sem_wait %sem, %amount : !reg
  return
}
