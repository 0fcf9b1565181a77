mesh.mesh @m(shape = 2x2) {meshdma.axes = ["x", "y"]}
func.func @f(%t: tensor<4x8xf32>) -> tensor<2x8xf32> {
  %r = mesh.reduce_scatter %t on @m mesh_axes = [1] reduction = <sum> scatter_axis = 0 : tensor<4x8xf32> -> tensor<2x8xf32>
  return %r : tensor<2x8xf32>
}
