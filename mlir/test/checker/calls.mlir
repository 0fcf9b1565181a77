// Back-to-back calls: a kernel that hands a credit from one call to the
// next (device 1 signals device 0 once more than device 0 waits, so the
// second call's wait could be satisfied by the first call's signal, and a
// third call's extra wait would hang) breaks the exit contract in its first
// call, at any `calls`; the kernel that balances its credits (after a
// handshake on the barrier semaphore) is proved for 2 and 3 calls.
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=handoff calls=2})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=HANDOFF
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=handoff calls=3})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=HANDOFF
// RUN: meshdma-opt %s -o /dev/null \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=balanced calls=2})'
// RUN: meshdma-opt %s -o /dev/null \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=balanced calls=3})'

!reg = !meshdma.semaphore<regular>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @pair(shape = ?) {meshdma.axes = ["x"]}

func.func private @exchange(%s: !reg, %signals: i32) {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %me = meshdma.device_id
  %first = arith.cmpi eq, %me, %c0 : i32
  scf.if %first {
    meshdma.sem_wait %s, %c1 : !reg
  } else {
    meshdma.sem_signal %s, %signals device(%c0) : !reg
  }
  return
}

func.func @handoff() attributes {meshdma.kernel, meshdma.mesh = @pair,
                                 meshdma.entry_barrier = false} {
  %c2 = arith.constant 2 : i32
  // HANDOFF: calls.mlir:[[@LINE+1]]:8: error: semaphore #0 (regular) of device 0 holds 1 at exit, the exit contract needs 0
  %s = meshdma.sem_alloc : !reg
  func.call @exchange(%s, %c2) : (!reg, i32) -> ()
  return
}

func.func @balanced() attributes {meshdma.kernel, meshdma.mesh = @pair,
                                  meshdma.entry_barrier = false,
                                  meshdma.collective_id = 0} {
  %c1 = arith.constant 1 : i32
  %me = meshdma.device_id
  %other = arith.subi %c1, %me : i32
  %bar = meshdma.barrier_semaphore : !bar
  meshdma.sem_signal %bar, %c1 device(%other) : !bar
  meshdma.sem_wait %bar, %c1 : !bar
  %s = meshdma.sem_alloc : !reg
  func.call @exchange(%s, %c1) : (!reg, i32) -> ()
  return
}
