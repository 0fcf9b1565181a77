// The checker proves only what it has seen. An indirect call of a
// func.constant is followed (the leak inside is found); an indirect call it
// cannot resolve, a semaphore, a buffer or a function handed to a function
// without a body, and an unknown op that takes a semaphore are unverifiable, naming
// the op.
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=indirect_leak})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=LEAK
// RUN: meshdma-opt %s --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=indirect_balanced})' -o /dev/null
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=indirect_unknown})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=indirect_external})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=INDEXT
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=external_semaphore})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=EXTSEM
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=external_buffer_in_loop})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=EXTBUF
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=external_callback})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=CALLBACK
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=cast_semaphore})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=CAST
!reg = !meshdma.semaphore<regular>
mesh.mesh @ring(shape = ?) {meshdma.axes = ["x"]}

func.func private @signal_only(%sem: !reg) {
  %c1 = arith.constant 1 : i32
  meshdma.sem_signal %sem, %c1 : !reg
  return
}
func.func private @signal_and_wait(%sem: !reg) {
  %c1 = arith.constant 1 : i32
  meshdma.sem_signal %sem, %c1 : !reg
  meshdma.sem_wait %sem, %c1 : !reg
  return
}
func.func private @external(%sem: !reg)
func.func private @external_compute(%buf: memref<4xf32>)
func.func private @external_pure(%x: i32) -> i32
func.func private @external_apply(%f: (!reg) -> (), %x: i32)

func.func @indirect_leak() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  // LEAK: escapes.mlir:[[@LINE+1]]:10: error: semaphore #0 (regular) of device 0 holds 1 at exit, the exit contract needs 0 (2 devices)
  %sem = meshdma.sem_alloc : !reg
  %f = func.constant @signal_only : (!reg) -> ()
  func.call_indirect %f(%sem) : (!reg) -> ()
  return
}

func.func @indirect_balanced() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %sem = meshdma.sem_alloc : !reg
  %f = func.constant @signal_and_wait : (!reg) -> ()
  func.call_indirect %f(%sem) : (!reg) -> ()
  return
}

// The callee depends on data: which function runs is not known.
func.func @indirect_unknown(%which: memref<1xi1>) attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : index
  %sem = meshdma.sem_alloc : !reg
  %a = func.constant @signal_only : (!reg) -> ()
  %b = func.constant @signal_and_wait : (!reg) -> ()
  %c = memref.load %which[%c0] : memref<1xi1>
  // UNKNOWN: escapes.mlir:[[@LINE+1]]:8: error: unverifiable: the select condition depends on data (the result of 'memref.load')
  %f = arith.select %c, %a, %b : (!reg) -> ()
  func.call_indirect %f(%sem) : (!reg) -> ()
  return
}

func.func @indirect_external() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %sem = meshdma.sem_alloc : !reg
  %f = func.constant @external : (!reg) -> ()
  // INDEXT: escapes.mlir:[[@LINE+1]]:3: error: unverifiable: 'func.call_indirect' calls @external, a function without a body: the checker cannot see what it does
  func.call_indirect %f(%sem) : (!reg) -> ()
  return
}

func.func @external_semaphore() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c1 = arith.constant 1 : i32
  %x = func.call @external_pure(%c1) : (i32) -> i32
  %sem = meshdma.sem_alloc : !reg
  // EXTSEM: escapes.mlir:[[@LINE+1]]:3: error: unverifiable: 'func.call' hands a semaphore (operand #0) to @external, a function without a body: the checker cannot see what it does with it
  func.call @external(%sem) : (!reg) -> ()
  return
}

// Inside a loop that would otherwise only compute.
func.func @external_buffer_in_loop(%buf: memref<4xf32>) attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  scf.for %i = %c0 to %c4 step %c1 {
    // EXTBUF: escapes.mlir:[[@LINE+1]]:5: error: unverifiable: 'func.call' hands a buffer (operand #0) to @external_compute, a function without a body: the checker cannot see what it does with it
    func.call @external_compute(%buf) : (memref<4xf32>) -> ()
  }
  return
}

// The external function may call the function it is handed.
func.func @external_callback() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c1 = arith.constant 1 : i32
  %f = func.constant @signal_only : (!reg) -> ()
  // CALLBACK: escapes.mlir:[[@LINE+1]]:3: error: unverifiable: 'func.call' hands a function (operand #0) to @external_apply, a function without a body: the checker cannot see what it does with it
  func.call @external_apply(%f, %c1) : ((!reg) -> (), i32) -> ()
  return
}

func.func @cast_semaphore() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %sem = meshdma.sem_alloc : !reg
  // CAST: escapes.mlir:[[@LINE+1]]:8: error: unverifiable: 'builtin.unrealized_conversion_cast' takes a semaphore (operand #0) and the checker does not model it
  %x = builtin.unrealized_conversion_cast %sem : !reg to i64
  return
}
