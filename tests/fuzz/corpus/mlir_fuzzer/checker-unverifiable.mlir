!reg = !meshdma.semaphore<regular>
mesh.mesh @ring(shape = ?) {meshdma.axes = ["x"]}
func.func @trip_count(%counts: memref<1xindex>) attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1 : i32
  %sem = meshdma.sem_alloc : !reg
  %n = memref.load %counts[%c0] : memref<1xindex>
  scf.for %i = %c0 to %n step %c1 {
    meshdma.sem_signal %sem, %one : !reg
    meshdma.sem_wait %sem, %one : !reg
  }
  return
}
func.func @sem_read_branch() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %zero = arith.constant 0 : i32
  %sem = meshdma.sem_alloc : !reg
  %v = meshdma.sem_read %sem : !reg
  %c = arith.cmpi eq, %v, %zero : i32
  scf.if %c {
    meshdma.sem_wait %sem, %zero : !reg
  }
  return
}
func.func @scalar_arg(%amount: i32) attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %sem = meshdma.sem_alloc : !reg
  meshdma.sem_signal %sem, %amount : !reg
  meshdma.sem_wait %sem, %amount : !reg
  return
}
