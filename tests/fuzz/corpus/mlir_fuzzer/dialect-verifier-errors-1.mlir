!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 2x2) {meshdma.axes = ["x", "y"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @m} {
  %0 = meshdma.axis_size "z"
  return
}
