// Every op prints in a form that parses back to the same IR.
// RUN: meshdma-opt %s | meshdma-opt | FileCheck %s

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 2x4) {meshdma.axes = ["x", "y"]}

// CHECK-LABEL: func.func @all_ops
// CHECK-SAME: meshdma.collective_id = 5 : i64
// CHECK-SAME: meshdma.iteration_bounds = array<i64: 2, 3>
func.func @all_ops(%a: memref<8x4xf32>, %b: memref<8x4xf32>,
                   %g: memref<16x4xf32>, %s: memref<2x8x4xf32>,
                   %t: memref<4x8xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @m, meshdma.collective_id = 5,
                meshdma.entry_barrier = false,
                meshdma.iteration_bounds = array<i64: 2, 3>,
                meshdma.dimension_semantics = ["parallel", "arbitrary"],
                meshdma.window_params = [{window_bounds = array<i64: 4, 4>},
                                         {}, {}, {}, {}]} {
  // CHECK: meshdma.device_id
  %id = meshdma.device_id
  // CHECK: meshdma.axis_index "x"
  %x = meshdma.axis_index "x"
  // CHECK: meshdma.axis_size "y"
  %ny = meshdma.axis_size "y"
  // CHECK: meshdma.program_id 1
  %p = meshdma.program_id 1
  // CHECK: meshdma.num_programs 0
  %np = meshdma.num_programs 0
  // CHECK: meshdma.sem_alloc : <regular>
  %r = meshdma.sem_alloc : !reg
  // CHECK: meshdma.sem_alloc : <dma>
  %d = meshdma.sem_alloc : !dma
  %d2 = meshdma.sem_alloc : !dma
  // CHECK: meshdma.barrier_semaphore : <barrier>
  %bs = meshdma.barrier_semaphore : !bar
  // CHECK: meshdma.alloc : memref<8x4xf32>
  %buf = meshdma.alloc : memref<8x4xf32>
  %c1 = arith.constant 1 : i32
  // CHECK: meshdma.sem_signal %{{.*}}, %{{.*}} : <regular>
  meshdma.sem_signal %r, %c1 : !reg
  // CHECK: meshdma.sem_signal %{{.*}}, %{{.*}} device(%{{.*}}, %{{.*}}) : <regular>
  meshdma.sem_signal %r, %c1 device(%x, %c1) : !reg
  // CHECK: meshdma.sem_signal %{{.*}}, %{{.*}} device(%{{.*}}) logical : <barrier>
  meshdma.sem_signal %bs, %c1 device(%id) logical : !bar
  // CHECK: meshdma.sem_wait %{{.*}}, %{{.*}} : <regular>
  meshdma.sem_wait %r, %c1 : !reg
  // CHECK: meshdma.sem_read %{{.*}} : <dma>
  %v = meshdma.sem_read %d : !dma
  // CHECK: meshdma.dma_start %{{.*}} : memref<8x4xf32> -> %{{.*}} : memref<8x4xf32>, recv %{{.*}} : <dma>{{$}}
  meshdma.dma_start %a : memref<8x4xf32> -> %b : memref<8x4xf32>, recv %d : !dma
  // CHECK: meshdma.dma_start {{.*}}, recv %{{.*}} : <dma>, send %{{.*}} : !meshdma.semaphore<dma> device(%{{.*}}) logical
  meshdma.dma_start %a : memref<8x4xf32> -> %buf : memref<8x4xf32>,
      recv %d : !dma, send %d2 : !dma device(%id) logical
  // CHECK: meshdma.dma_wait_send %{{.*}}, %{{.*}} : <dma>, memref<8x4xf32>
  meshdma.dma_wait_send %d2, %a : !dma, memref<8x4xf32>
  // CHECK: meshdma.dma_wait_recv %{{.*}}, %{{.*}} : <dma>, memref<8x4xf32>
  meshdma.dma_wait_recv %d, %b : !dma, memref<8x4xf32>
  // CHECK: meshdma.device_barrier
  meshdma.device_barrier
  // CHECK: meshdma.ppermute {{.*}} {axes = ["y"], offset = 1 : i64, rotate}
  meshdma.ppermute %a, %b {axes = ["y"], offset = 1, rotate} : memref<8x4xf32>, memref<8x4xf32>
  // CHECK: meshdma.ppermute {{.*}} {axes = ["x"], perm = array<i64: 0, 1, 1, 0>}
  meshdma.ppermute %a, %b {axes = ["x"], perm = array<i64: 0, 1, 1, 0>} : memref<8x4xf32>, memref<8x4xf32>
  // CHECK: meshdma.all_gather {{.*}} {axes = ["x"], tiled} : memref<8x4xf32>, memref<16x4xf32>
  meshdma.all_gather %a, %g {axes = ["x"], tiled} : memref<8x4xf32>, memref<16x4xf32>
  // CHECK: meshdma.all_gather {{.*}} {axes = ["x"]} : memref<8x4xf32>, memref<2x8x4xf32>
  meshdma.all_gather %a, %s {axes = ["x"]} : memref<8x4xf32>, memref<2x8x4xf32>
  // CHECK: meshdma.all_reduce mean {{.*}} {axes = ["x", "y"]}
  meshdma.all_reduce mean %a, %b {axes = ["x", "y"]} : memref<8x4xf32>, memref<8x4xf32>
  // CHECK: meshdma.reduce_scatter max {{.*}} : memref<16x4xf32>, memref<8x4xf32>
  meshdma.reduce_scatter max %g, %a {axes = ["x"]} : memref<16x4xf32>, memref<8x4xf32>
  // CHECK: meshdma.all_to_all {{.*}} {axes = ["x"], concat_axis = 1 : i64, split_axis = 0 : i64} : memref<8x4xf32>, memref<4x8xf32>
  meshdma.all_to_all %a, %t {axes = ["x"], split_axis = 0, concat_axis = 1} : memref<8x4xf32>, memref<4x8xf32>
  return
}
