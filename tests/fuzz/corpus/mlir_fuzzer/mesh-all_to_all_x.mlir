mesh.mesh @m(shape = 2x2) {meshdma.axes = ["x", "y"]}
func.func @f(%t: tensor<4x8xf32>) -> tensor<8x4xf32> {
  %r = mesh.all_to_all %t on @m mesh_axes = [0] split_axis = 1 concat_axis = 0 : tensor<4x8xf32> -> tensor<8x4xf32>
  return %r : tensor<8x4xf32>
}
