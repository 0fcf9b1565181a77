!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8xf32>, %b: memref<4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  meshdma.reduce_scatter min %a, %b {axes = ["x"]} : memref<8xf32>, memref<4xf32>
  return
}
