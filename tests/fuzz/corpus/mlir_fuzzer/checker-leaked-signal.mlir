!reg = !meshdma.semaphore<regular>
mesh.mesh @ring(shape = ?) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c1 = arith.constant 1 : i32
  %me = meshdma.axis_index "x"
  %n = meshdma.axis_size "x"
  %r = arith.addi %me, %c1 : i32
  %right = arith.remsi %r, %n : i32
  %sem = meshdma.sem_alloc : !reg
  meshdma.sem_signal %sem, %c1 device(%right) : !reg
  meshdma.sem_signal %sem, %c1 device(%right) : !reg
  meshdma.sem_wait %sem, %c1 : !reg
  return
}
