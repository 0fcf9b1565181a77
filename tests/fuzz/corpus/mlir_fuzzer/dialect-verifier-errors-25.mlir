!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m, meshdma.collective_id = 3} {
  %s = meshdma.barrier_semaphore : !bar
  meshdma.dma_wait_send %s, %a : !bar, memref<4xf32>
  return
}
