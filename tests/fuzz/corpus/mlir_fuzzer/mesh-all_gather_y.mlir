mesh.mesh @m(shape = 2x2) {meshdma.axes = ["x", "y"]}
func.func @f(%t: tensor<4x8xf32>) -> tensor<8x8xf32> {
  %r = mesh.all_gather %t on @m mesh_axes = [1] gather_axis = 0 : tensor<4x8xf32> -> tensor<8x8xf32>
  return %r : tensor<8x8xf32>
}
