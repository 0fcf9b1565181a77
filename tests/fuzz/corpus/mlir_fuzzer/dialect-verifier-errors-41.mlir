!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8xi8>, %b: memref<8xi8>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  meshdma.all_reduce sum %a, %b {axes = ["x"]} : memref<8xi8>, memref<8xi8>
  return
}
