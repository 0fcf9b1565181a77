!reg = !meshdma.semaphore<regular>
mesh.mesh @pair(shape = 2) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @pair} {
  %c1 = arith.constant 1 : i32
  %me = meshdma.axis_index "x"
  %other = arith.subi %c1, %me : i32
  %go = meshdma.sem_alloc : !reg
  meshdma.sem_wait %go, %c1 : !reg
  meshdma.sem_signal %go, %c1 device(%other) : !reg
  return
}
