// meshdma-materialize-grid hoists a grid kernel's allocations (in order) and
// runs the rest of the body in a row-major scf.for nest.
// RUN: meshdma-opt %s --meshdma-materialize-grid | FileCheck %s

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
mesh.mesh @ring(shape = 2) {meshdma.axes = ["x"]}

// CHECK-LABEL: func.func @k
// CHECK-NOT: meshdma.iteration_bounds
// CHECK: %[[A:.*]] = meshdma.sem_alloc : <regular>
// CHECK-NEXT: %[[B:.*]] = meshdma.sem_alloc : <dma>
// CHECK: scf.for %[[I:.*]] = %{{.*}} to %c3
// CHECK: scf.for %[[J:.*]] = %{{.*}} to %c2
// CHECK: arith.index_cast %[[I]]
// CHECK: arith.index_cast %[[J]]
// CHECK: %[[N:.*]] = arith.constant 2 : index
// CHECK: arith.index_cast %[[N]]
// CHECK: meshdma.sem_signal %[[A]]
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @ring,
                           meshdma.iteration_bounds = array<i64: 3, 2>} {
  %c1 = arith.constant 1 : i32
  %a = meshdma.sem_alloc : !reg
  %i = meshdma.program_id 0
  %b = meshdma.sem_alloc : !dma
  %j = meshdma.program_id 1
  %i32 = arith.index_cast %i : index to i32
  %j32 = arith.index_cast %j : index to i32
  %n = meshdma.num_programs 1
  %n32 = arith.index_cast %n : index to i32
  meshdma.sem_signal %a, %c1 : !reg
  meshdma.sem_wait %a, %c1 : !reg
  return
}
