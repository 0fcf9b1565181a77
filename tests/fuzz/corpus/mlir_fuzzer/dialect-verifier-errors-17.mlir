!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<1x1x1x1x1x1x2xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  %s = meshdma.sem_alloc : !dma
  meshdma.dma_start %a : memref<1x1x1x1x1x1x2xf32> -> %a : memref<1x1x1x1x1x1x2xf32>, recv %s : !dma
  return
}
