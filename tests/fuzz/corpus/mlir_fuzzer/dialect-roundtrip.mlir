!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 2x4) {meshdma.axes = ["x", "y"]}

func.func @all_ops(%a: memref<8x4xf32>, %b: memref<8x4xf32>,
                   %g: memref<16x4xf32>, %s: memref<2x8x4xf32>,
                   %t: memref<4x8xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @m, meshdma.collective_id = 5,
                meshdma.entry_barrier = false,
                meshdma.iteration_bounds = array<i64: 2, 3>,
                meshdma.dimension_semantics = ["parallel", "arbitrary"],
                meshdma.window_params = [{window_bounds = array<i64: 4, 4>},
                                         {}, {}, {}, {}]} {
  %id = meshdma.device_id
  %x = meshdma.axis_index "x"
  %ny = meshdma.axis_size "y"
  %p = meshdma.program_id 1
  %np = meshdma.num_programs 0
  %r = meshdma.sem_alloc : !reg
  %d = meshdma.sem_alloc : !dma
  %d2 = meshdma.sem_alloc : !dma
  %bs = meshdma.barrier_semaphore : !bar
  %buf = meshdma.alloc : memref<8x4xf32>
  %c1 = arith.constant 1 : i32
  meshdma.sem_signal %r, %c1 : !reg
  meshdma.sem_signal %r, %c1 device(%x, %c1) : !reg
  meshdma.sem_signal %bs, %c1 device(%id) logical : !bar
  meshdma.sem_wait %r, %c1 : !reg
  %v = meshdma.sem_read %d : !dma
  meshdma.dma_start %a : memref<8x4xf32> -> %b : memref<8x4xf32>, recv %d : !dma
  meshdma.dma_start %a : memref<8x4xf32> -> %buf : memref<8x4xf32>,
      recv %d : !dma, send %d2 : !dma device(%id) logical
  meshdma.dma_wait_send %d2, %a : !dma, memref<8x4xf32>
  meshdma.dma_wait_recv %d, %b : !dma, memref<8x4xf32>
  meshdma.device_barrier
  meshdma.ppermute %a, %b {axes = ["y"], offset = 1, rotate} : memref<8x4xf32>, memref<8x4xf32>
  meshdma.ppermute %a, %b {axes = ["x"], perm = array<i64: 0, 1, 1, 0>} : memref<8x4xf32>, memref<8x4xf32>
  meshdma.all_gather %a, %g {axes = ["x"], tiled} : memref<8x4xf32>, memref<16x4xf32>
  meshdma.all_gather %a, %s {axes = ["x"]} : memref<8x4xf32>, memref<2x8x4xf32>
  meshdma.all_reduce mean %a, %b {axes = ["x", "y"]} : memref<8x4xf32>, memref<8x4xf32>
  meshdma.reduce_scatter max %g, %a {axes = ["x"]} : memref<16x4xf32>, memref<8x4xf32>
  meshdma.all_to_all %a, %t {axes = ["x"], split_axis = 0, concat_axis = 1} : memref<8x4xf32>, memref<4x8xf32>
  return
}
