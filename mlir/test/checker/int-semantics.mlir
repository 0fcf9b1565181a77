// Integer semantics that decide a device id: `arith.extsi` of an i1 true is
// -1, so every device signalling device extsi(true) goes off the mesh, and
// extsi(true) + 1 is device 0. Pure integer arithmetic (`arith.ceildivui`,
// the `index` dialect's ops and casts) is evaluated, not taken for data; an
// op with no defined value for its operands is reported, and so is a loop
// whose induction variable wraps around its width.
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=extsi_off_mesh})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=OFF
// RUN: meshdma-opt %s --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=extsi_on_mesh})' -o /dev/null
// RUN: meshdma-opt %s --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 kernel=index_ring})' -o /dev/null
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=poison_shift})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=POISON
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=index_width})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=WIDTH
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=div_zero})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=loop_wraps})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=WRAP
!reg = !meshdma.semaphore<regular>
mesh.mesh @ring(shape = ?) {meshdma.axes = ["x"]}

func.func @extsi_off_mesh() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c1 = arith.constant 1 : i32
  %t = arith.constant true
  %id = arith.extsi %t : i1 to i32
  %sem = meshdma.sem_alloc : !reg
  // OFF: int-semantics.mlir:[[@LINE+1]]:3: error: device id off the mesh: LOGICAL id -1 on a mesh of 2 devices (device 0)
  meshdma.sem_signal %sem, %c1 device(%id) logical : !reg
  return
}

// Every device signals device 0, which waits for all of them.
func.func @extsi_on_mesh() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %t = arith.constant true
  %m1 = arith.extsi %t : i1 to i32
  %id = arith.addi %m1, %c1 : i32
  %me = meshdma.axis_index "x"
  %n = meshdma.axis_size "x"
  %sem = meshdma.sem_alloc : !reg
  meshdma.sem_signal %sem, %c1 device(%id) logical : !reg
  %root = arith.cmpi eq, %me, %c0 : i32
  scf.if %root {
    meshdma.sem_wait %sem, %n : !reg
  }
  return
}

// A ring whose right neighbour is computed in the index dialect (casts, add,
// rems) and whose amount is arith.ceildivui(2, 2) = 1.
func.func @index_ring() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c2 = arith.constant 2 : i32
  %me = meshdma.axis_index "x"
  %n = meshdma.axis_size "x"
  %mi = index.casts %me : i32 to index
  %ni = index.castu %n : i32 to index
  %one = index.constant 1
  %two = arith.ceildivui %c2, %c2 : i32
  %r = index.add %mi, %one
  %right = index.rems %r, %ni
  %right32 = index.casts %right : index to i32
  %sem = meshdma.sem_alloc : !reg
  meshdma.sem_signal %sem, %two device(%right32) : !reg
  meshdma.sem_wait %sem, %two : !reg
  return
}

func.func @poison_shift() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c1 = arith.constant 1 : i32
  %c32 = arith.constant 32 : i32
  // POISON: int-semantics.mlir:[[@LINE+1]]:8: error: unverifiable: 'arith.shli' has no value the checker can compute for the operands (1, 32): the result is poison, undefined, or depends on the width of index
  %s = arith.shli %c1, %c32 : i32
  %sem = meshdma.sem_alloc : !reg
  meshdma.sem_signal %sem, %s : !reg
  meshdma.sem_wait %sem, %s : !reg
  return
}

// -1 divided by 2 as an unsigned index is 2^63 - 1 with 64-bit indices and
// 2^31 - 1 with 32-bit ones.
func.func @index_width() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %m1 = index.constant -1
  %two = index.constant 2
  // WIDTH: int-semantics.mlir:[[@LINE+1]]:8: error: unverifiable: 'index.divu' has no value the checker can compute for the operands (-1, 2): the result is poison, undefined, or depends on the width of index
  %q = index.divu %m1, %two
  %q32 = index.casts %q : index to i32
  %sem = meshdma.sem_alloc : !reg
  meshdma.sem_signal %sem, %q32 : !reg
  meshdma.sem_wait %sem, %q32 : !reg
  return
}

func.func @div_zero() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : i32
  %c7 = arith.constant 7 : i32
  // ZERO: int-semantics.mlir:[[@LINE+1]]:8: error: division by zero (device 0)
  %q = arith.ceildivui %c7, %c0 : i32
  %sem = meshdma.sem_alloc : !reg
  meshdma.sem_signal %sem, %q : !reg
  meshdma.sem_wait %sem, %q : !reg
  return
}

// 0, 100, then 100 + 100 wraps to -56 in i8, still below the bound: the
// lowered loop goes on where a loop over unbounded integers would stop.
func.func @loop_wraps() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : i8
  %c100 = arith.constant 100 : i8
  %c120 = arith.constant 120 : i8
  %one = arith.constant 1 : i32
  %sem = meshdma.sem_alloc : !reg
  // WRAP: int-semantics.mlir:[[@LINE+1]]:3: error: unverifiable: the loop's induction variable wraps around after 100 (step 100, 8 bits)
  scf.for %i = %c0 to %c120 step %c100 : i8 {
    meshdma.sem_signal %sem, %one : !reg
    meshdma.sem_wait %sem, %one : !reg
  }
  return
}
