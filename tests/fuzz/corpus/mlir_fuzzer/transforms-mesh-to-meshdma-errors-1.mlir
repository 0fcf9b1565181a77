mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @gather_axis(%t: tensor<2x3xf32>) -> tensor<2x12xf32> {
  %g = mesh.all_gather %t on @m mesh_axes = [0] gather_axis = 1 : tensor<2x3xf32> -> tensor<2x12xf32>
  return %g : tensor<2x12xf32>
}
