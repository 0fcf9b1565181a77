!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 2x2) {meshdma.axes = ["x", "y"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @m} {
  %c1 = arith.constant 1 : i32
  %s = meshdma.sem_alloc : !reg
  meshdma.sem_signal %s, %c1 device(%c1) : !reg
  return
}
