mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @scatter_axis(%t: tensor<2x8xf32>) -> tensor<2x2xf32> {
  %g = mesh.reduce_scatter %t on @m mesh_axes = [0] scatter_axis = 1 : tensor<2x8xf32> -> tensor<2x2xf32>
  return %g : tensor<2x2xf32>
}
