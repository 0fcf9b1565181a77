!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  %s = meshdma.sem_alloc : !reg
  meshdma.dma_wait_recv %s, %a : !reg, memref<4xf32>
  return
}
