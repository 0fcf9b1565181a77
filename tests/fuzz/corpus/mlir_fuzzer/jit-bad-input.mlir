!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
mesh.mesh @ring(shape = 2) {meshdma.axes = ["x"]}
func.func @off_mesh() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c1 = arith.constant 1 : i32
  %c5 = arith.constant 5 : i32
  %reg = meshdma.sem_alloc : !reg
  %d = meshdma.sem_alloc : !dma
  meshdma.sem_signal %reg, %c1 device(%c5) : !reg
  meshdma.sem_wait %reg, %c1 : !reg
  return
}
