mesh.mesh @m(shape = 2x2) {meshdma.axes = ["x", "y"]}
func.func @f(%t: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = mesh.shift %t on @m mesh_axes = [1] shift_axis = 1 offset = 1 rotate : tensor<4x8xf32> -> tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}
