mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @product(%t: tensor<4xf32>) -> tensor<4xf32> {
  %r = mesh.all_reduce %t on @m mesh_axes = [0] reduction = <product> : tensor<4xf32> -> tensor<4xf32>
  return %r : tensor<4xf32>
}
