// Every value of the pass's options is either supported or an error naming
// the option: `calls` is 1 to 8 and each value runs that many back-to-back
// calls (0 used to turn the entry-race check off, 3 used to mean 2: the step
// counts show each one runs), and `kernel` must name a kernel of the module
// (a typo used to prove nothing and pass).
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 calls=0})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 calls=9})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=NINE
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 kernel=singel_round})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=NAME
// RUN: meshdma-opt %s --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 calls=1 stats=true})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=ONE
// RUN: meshdma-opt %s --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 stats=true})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=TWO
// RUN: meshdma-opt %s --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 calls=3 stats=true})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=THREE
// RUN: meshdma-opt %s --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 calls=8 stats=true})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=EIGHT
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=5 calls=3})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=RACE
// ZERO: options.mlir:0:0: error: meshdma-verify-protocol: option 'calls' must be 1 to 8 (back-to-back calls checked for the entry race), got 0
// NINE: options.mlir:0:0: error: meshdma-verify-protocol: option 'calls' must be 1 to 8 (back-to-back calls checked for the entry race), got 9
// NAME: options.mlir:0:0: error: meshdma-verify-protocol: option 'kernel': no kernel @singel_round in the module (its kernels: @single_round)
// ONE: remark: protocol verified: 4 devices, 24 events, 48 steps,
// TWO: remark: protocol verified: 4 devices, 24 events, 360 steps,
// THREE: remark: protocol verified: 4 devices, 24 events, 600 steps,
// EIGHT: remark: protocol verified: 4 devices, 24 events, 1560 steps,
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @ring(shape = ?) {meshdma.axes = ["x"]}

// One barrier-semaphore round, then a DMA to the right neighbour: proved on
// 4 devices for any number of calls, an entry race on 5 or more.
func.func @single_round(%in: memref<64xf32>, %out: memref<64xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring,
                meshdma.entry_barrier = false, meshdma.collective_id = 0} {
  %c1 = arith.constant 1 : i32
  %c2 = arith.constant 2 : i32
  %me = meshdma.axis_index "x"
  %n = meshdma.axis_size "x"
  %r = arith.addi %me, %c1 : i32
  %right = arith.remsi %r, %n : i32
  %l0 = arith.addi %me, %n : i32
  %l1 = arith.subi %l0, %c1 : i32
  %left = arith.remsi %l1, %n : i32
  %bar = meshdma.barrier_semaphore : !bar
  meshdma.sem_signal %bar, %c1 device(%left) : !bar
  meshdma.sem_signal %bar, %c1 device(%right) : !bar
  meshdma.sem_wait %bar, %c2 : !bar
  %send = meshdma.sem_alloc : !dma
  %recv = meshdma.sem_alloc : !dma
  // RACE: options.mlir:[[@LINE+1]]:3: error: entry race: device 4 pushes into device 0 in call 1 before device 0 has entered call 1
  meshdma.dma_start %in : memref<64xf32> -> %out : memref<64xf32>,
      recv %recv : !dma, send %send : !dma device(%right)
  meshdma.dma_wait_send %send, %in : !dma, memref<64xf32>
  meshdma.dma_wait_recv %recv, %out : !dma, memref<64xf32>
  return
}
