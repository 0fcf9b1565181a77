!reg = !meshdma.semaphore<regular>
mesh.mesh @ring(shape = ?) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c1 = arith.constant 1 : i32
  %ready = meshdma.sem_alloc : !reg
  meshdma.sem_wait %ready, %c1 : !reg
  return
}
