!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k() -> i32 attributes {meshdma.kernel, meshdma.mesh = @m} {
  %c = arith.constant 0 : i32
  return %c : i32
}
