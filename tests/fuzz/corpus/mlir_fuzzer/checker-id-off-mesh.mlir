!reg = !meshdma.semaphore<regular>
mesh.mesh @ring(shape = ?) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c1 = arith.constant 1 : i32
  %me = meshdma.axis_index "x"
  %right = arith.addi %me, %c1 : i32
  %sem = meshdma.sem_alloc : !reg
  meshdma.sem_signal %sem, %c1 device(%right) : !reg
  meshdma.sem_wait %sem, %c1 : !reg
  return
}
func.func @logical() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c1 = arith.constant 1 : i32
  %c4 = arith.constant 4 : i32
  %me = meshdma.device_id
  %t = arith.subi %me, %c4 : i32
  %sem = meshdma.sem_alloc : !reg
  meshdma.sem_signal %sem, %c1 device(%t) logical : !reg
  return
}
