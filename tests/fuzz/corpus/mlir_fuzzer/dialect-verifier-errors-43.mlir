!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<6xf32>, %b: memref<2xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  meshdma.reduce_scatter sum %a, %b {axes = ["x"]} : memref<6xf32>, memref<2xf32>
  return
}
