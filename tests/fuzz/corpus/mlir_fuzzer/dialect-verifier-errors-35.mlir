!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8xf32>, %b: memref<8xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  meshdma.ppermute %a, %b {axes = ["x"], perm = array<i64: 0, 4>} : memref<8xf32>, memref<8xf32>
  return
}
