!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @m} {
  %c1 = arith.constant 1 : i32
  %s = meshdma.sem_alloc : !dma
  meshdma.sem_signal %s, %c1 : !dma
  return
}
