// The checker's remaining diagnostics, one kernel each.
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 kernel=alloc_count})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=COUNT
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 kernel=fewer_collectives})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=FEWER
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 kernel=div_zero})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=DIV
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 kernel=negative})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=NEG
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 kernel=parallel})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=PAR
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 kernel=switch})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=SWITCH
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=fixed})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=FIXED
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4x})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=5000 kernel=div_zero})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=CAP
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 kernel=barrier_deadlock})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=BARRIER
!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
mesh.mesh @ring(shape = ?) {meshdma.axes = ["x"]}
mesh.mesh @four(shape = 4) {meshdma.axes = ["x"]}

// COUNT: more-diagnostics.mlir:[[@LINE+1]]:1: error: asymmetric allocation: device 1 makes 1 allocations, device 0 2
func.func @alloc_count() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : i32
  %me = meshdma.axis_index "x"
  %first = arith.cmpi eq, %me, %c0 : i32
  %a = meshdma.sem_alloc : !reg
  scf.if %first {
    %b = meshdma.sem_alloc : !reg
  }
  return
}

func.func @fewer_collectives(%a: memref<8xf32>, %b: memref<8xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : i32
  %me = meshdma.axis_index "x"
  %first = arith.cmpi eq, %me, %c0 : i32
  scf.if %first {
    // FEWER: more-diagnostics.mlir:[[@LINE+1]]:5: error: collective mismatch: device 0 calls its collective #0 here; device 1 of its group makes only 0
    meshdma.all_reduce sum %a, %b {axes = ["x"]} : memref<8xf32>, memref<8xf32>
  }
  return
}

func.func @div_zero() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %me = meshdma.axis_index "x"
  // DIV: more-diagnostics.mlir:[[@LINE+1]]:8: error: division by zero (device 0)
  %q = arith.divsi %me, %me : i32
  return
}

func.func @negative() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %m1 = arith.constant -1 : i32
  %s = meshdma.sem_alloc : !reg
  // NEG: more-diagnostics.mlir:[[@LINE+1]]:3: error: negative signal amount -1 (device 0)
  meshdma.sem_signal %s, %m1 : !reg
  return
}

func.func @parallel() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1 : i32
  %s = meshdma.sem_alloc : !reg
  // PAR: more-diagnostics.mlir:[[@LINE+1]]:3: error: unverifiable: 'scf.parallel' holds meshdma ops or calls the checker cannot follow
  scf.parallel (%i) = (%c0) to (%c1) step (%c1) {
    meshdma.sem_signal %s, %one : !reg
    scf.reduce
  }
  return
}

func.func @switch() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %me = meshdma.axis_index "x"
  // SWITCH: more-diagnostics.mlir:[[@LINE+1]]:3: error: unverifiable: unsupported branch 'cf.switch'
  cf.switch %me : i32, [
    default: ^b1
  ]
^b1:
  return
}

// FIXED: more-diagnostics.mlir:[[@LINE+1]]:1: error: mesh-shape '2' contradicts mesh @four (axis 'x' has size 4)
func.func @fixed() attributes {meshdma.kernel, meshdma.mesh = @four} {
  return
}
// BAD: error: bad mesh-shape '4x'
// CAP: error: the checker handles meshes of up to 4096 devices, got 5000

func.func @barrier_deadlock() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : i32
  %me = meshdma.axis_index "x"
  %first = arith.cmpi eq, %me, %c0 : i32
  scf.if %first {
    // BARRIER: more-diagnostics.mlir:[[@LINE+1]]:5: error: deadlock: device 0 is stuck here: device barrier (1 of 4 devices are stuck)
    meshdma.device_barrier
  }
  return
}
