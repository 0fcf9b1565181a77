!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8xf32>, %b: memref<32xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  meshdma.all_gather %a, %b {axes = ["x"]} : memref<8xf32>, memref<32xf32>
  return
}
