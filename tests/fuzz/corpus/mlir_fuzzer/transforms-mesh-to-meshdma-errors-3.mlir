mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @accumulate(%t: tensor<4xf16>) -> tensor<4xf32> {
  %r = mesh.all_reduce %t on @m mesh_axes = [0] reduction = <sum> : tensor<4xf16> -> tensor<4xf32>
  return %r : tensor<4xf32>
}
