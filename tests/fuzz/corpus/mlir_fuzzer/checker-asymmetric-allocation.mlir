!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
mesh.mesh @ring(shape = ?) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : i32
  %me = meshdma.axis_index "x"
  %first = arith.cmpi eq, %me, %c0 : i32
  scf.if %first {
    %a = meshdma.sem_alloc : !dma
    %b = meshdma.sem_alloc : !reg
  } else {
    %b = meshdma.sem_alloc : !reg
    %a = meshdma.sem_alloc : !dma
  }
  return
}
