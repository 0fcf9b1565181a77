mesh.mesh @m(shape = 0) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8x4xf32>, %t: memref<4x8xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  meshdma.all_to_all %a, %t {axes = ["x"], split_axis = 0, concat_axis = 1} : memref<8x4xf32>, memref<4x8xf32>
  return
}
