!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @m, meshdma.iteration_bounds = array<i64: 4>} {
  %0 = meshdma.num_programs -1
  return
}
