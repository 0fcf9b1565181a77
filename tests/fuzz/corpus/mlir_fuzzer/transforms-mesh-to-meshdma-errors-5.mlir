mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @broadcast(%t: tensor<4xf32>) -> tensor<4xf32> {
  %b = mesh.broadcast %t on @m mesh_axes = [0] root = [0] : (tensor<4xf32>) -> tensor<4xf32>
  return %b : tensor<4xf32>
}
