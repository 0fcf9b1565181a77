mesh.mesh @m(shape = 2x2) {meshdma.axes = ["x", "y"]}
func.func @f(%t: tensor<4x8xf32>) -> tensor<1x32xf32> {
  %r = mesh.all_to_all %t on @m mesh_axes = [0, 1] split_axis = 0 concat_axis = 1 : tensor<4x8xf32> -> tensor<1x32xf32>
  return %r : tensor<1x32xf32>
}
