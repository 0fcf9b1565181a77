!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 2x2) {meshdma.axes = ["x", "y"]}
func.func @k(%a: memref<8xf32>, %b: memref<8xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  meshdma.all_reduce sum %a, %b {axes = ["x", "x"]} : memref<8xf32>, memref<8xf32>
  return
}
