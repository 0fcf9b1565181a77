!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8xf32>, %b: memref<8xi32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  meshdma.all_reduce max %a, %b {axes = ["x"]} : memref<8xf32>, memref<8xi32>
  return
}
