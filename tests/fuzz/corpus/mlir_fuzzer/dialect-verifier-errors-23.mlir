!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 2x2) {meshdma.axes = ["x", "y"]}
func.func @k(%a: memref<4xf32>, %b: memref<4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  %c1 = arith.constant 1 : i32
  %s = meshdma.sem_alloc : !dma
  meshdma.dma_start %a : memref<4xf32> -> %b : memref<4xf32>, recv %s : !dma, send %s : !dma device(%c1)
  return
}
