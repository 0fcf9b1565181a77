!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8x4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m, meshdma.iteration_bounds = [4]} {
  return
}
