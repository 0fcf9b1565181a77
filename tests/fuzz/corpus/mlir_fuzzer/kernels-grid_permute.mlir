!dma = !meshdma.semaphore<dma>
!row = memref<1x256xf32, strided<[256, 1], offset: ?>>

mesh.mesh @ring(shape = @N@) {meshdma.axes = ["x"]}

func.func @grid_permute(%in: memref<4x256xf32>, %out: memref<4x256xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring,
                meshdma.iteration_bounds = array<i64: 4>,
                meshdma.dimension_semantics = ["arbitrary"]} {
  %c1 = arith.constant 1 : i32
  %send = meshdma.sem_alloc : !dma
  %recv = meshdma.sem_alloc : !dma
  %me = meshdma.axis_index "x"
  %n = meshdma.axis_size "x"
  %r = arith.addi %me, %c1 : i32
  %right = arith.remsi %r, %n : i32
  %i = meshdma.program_id 0
  %src = memref.subview %in[%i, 0] [1, 256] [1, 1] : memref<4x256xf32> to !row
  %dst = memref.subview %out[%i, 0] [1, 256] [1, 1] : memref<4x256xf32> to !row
  meshdma.dma_start %src : !row -> %dst : !row,
      recv %recv : !dma, send %send : !dma device(%right)
  meshdma.dma_wait_send %send, %src : !dma, !row
  meshdma.dma_wait_recv %recv, %dst : !dma, !row
  return
}
