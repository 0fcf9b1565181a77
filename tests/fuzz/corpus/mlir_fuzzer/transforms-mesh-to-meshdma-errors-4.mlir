mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @element_type(%t: tensor<4xi16>) -> tensor<16xi16> {
  %g = mesh.all_gather %t on @m mesh_axes = [0] gather_axis = 0 : tensor<4xi16> -> tensor<16xi16>
  return %g : tensor<16xi16>
}
