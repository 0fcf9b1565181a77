// Loops that only compute (no meshdma op, no semaphore, no call of code that
// may communicate) are skipped, whatever decides their trip count: an
// scf.while over data, a loop over data that calls a helper that only
// computes. A compute-only loop with an integer result is evaluated where the
// checker can (a device id computed by a while loop); where it cannot, its
// result is data and a device id taken from it is unverifiable.
// RUN: meshdma-opt %s --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 kernel=while_over_data})' -o /dev/null
// RUN: meshdma-opt %s --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 kernel=loop_calls_helper})' -o /dev/null
// RUN: meshdma-opt %s --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 kernel=id_from_while})' -o /dev/null
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 kernel=id_from_data_loop})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=DATA
!reg = !meshdma.semaphore<regular>
mesh.mesh @ring(shape = ?) {meshdma.axes = ["x"]}

// Scales buf[i] by 2 for i < n.
func.func private @scale(%buf: memref<16xf32>, %i: index) {
  %v = memref.load %buf[%i] : memref<16xf32>
  %w = arith.addf %v, %v : f32
  memref.store %w, %buf[%i] : memref<16xf32>
  return
}

func.func private @ring_signal(%right: i32) {
  %c1 = arith.constant 1 : i32
  %sem = meshdma.sem_alloc : !reg
  meshdma.sem_signal %sem, %c1 device(%right) : !reg
  meshdma.sem_wait %sem, %c1 : !reg
  return
}

// Halves buf[0] until it is below 1: the trip count depends on data.
func.func @while_over_data(%buf: memref<16xf32>) attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : index
  %one = arith.constant 1.0 : f32
  %half = arith.constant 0.5 : f32
  scf.while : () -> () {
    %v = memref.load %buf[%c0] : memref<16xf32>
    %big = arith.cmpf oge, %v, %one : f32
    scf.condition(%big)
  } do {
    %v = memref.load %buf[%c0] : memref<16xf32>
    %w = arith.mulf %v, %half : f32
    memref.store %w, %buf[%c0] : memref<16xf32>
    scf.yield
  }
  %c1 = arith.constant 1 : i32
  %me = meshdma.axis_index "x"
  %n = meshdma.axis_size "x"
  %r = arith.addi %me, %c1 : i32
  %right = arith.remsi %r, %n : i32
  func.call @ring_signal(%right) : (i32) -> ()
  return
}

func.func @loop_calls_helper(%buf: memref<16xf32>, %sizes: memref<1xindex>) attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.load %sizes[%c0] : memref<1xindex>
  scf.for %i = %c0 to %n step %c1 {
    func.call @scale(%buf, %i) : (memref<16xf32>, index) -> ()
  }
  %one = arith.constant 1 : i32
  %me = meshdma.axis_index "x"
  %ax = meshdma.axis_size "x"
  %r = arith.addi %me, %one : i32
  %right = arith.remsi %r, %ax : i32
  func.call @ring_signal(%right) : (i32) -> ()
  return
}

// right = me + 1 mod n, by counting up in a while loop.
func.func @id_from_while() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %me = meshdma.axis_index "x"
  %n = meshdma.axis_size "x"
  %target = arith.addi %me, %c1 : i32
  %sum = scf.while (%k = %c0) : (i32) -> i32 {
    %more = arith.cmpi slt, %k, %target : i32
    scf.condition(%more) %k : i32
  } do {
  ^bb0(%k: i32):
    %next = arith.addi %k, %c1 : i32
    scf.yield %next : i32
  }
  %right = arith.remsi %sum, %n : i32
  func.call @ring_signal(%right) : (i32) -> ()
  return
}

func.func @id_from_data_loop(%sizes: memref<1xindex>) attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1 : i32
  %n = memref.load %sizes[%c0] : memref<1xindex>
  %last = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %c0) -> (index) {
    scf.yield %i : index
  }
  %id = arith.index_cast %last : index to i32
  %sem = meshdma.sem_alloc : !reg
  // DATA: compute-only.mlir:[[@LINE+1]]:3: error: unverifiable: the device id depends on data (the result of 'scf.for', which only computes)
  meshdma.sem_signal %sem, %one device(%id) : !reg
  // DATA: compute-only.mlir:[[@LINE-7]]:11: note: the data comes from here
  meshdma.sem_wait %sem, %one : !reg
  return
}
