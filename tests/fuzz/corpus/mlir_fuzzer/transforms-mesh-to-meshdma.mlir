mesh.mesh @m(shape = 2x2) {meshdma.axes = ["x", "y"]}

func.func @collectives(%t: tensor<4x8xf32>) -> (tensor<8x8xf32>, tensor<4x8xf32>,
    tensor<1x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, index) {
  %g = mesh.all_gather %t on @m mesh_axes = [1] gather_axis = 0
      : tensor<4x8xf32> -> tensor<8x8xf32>
  %r = mesh.all_reduce %t on @m mesh_axes = [0, 1] reduction = <average>
      : tensor<4x8xf32> -> tensor<4x8xf32>
  %s = mesh.reduce_scatter %t on @m mesh_axes = [0, 1] reduction = <max>
      scatter_axis = 0 : tensor<4x8xf32> -> tensor<1x8xf32>
  %a = mesh.all_to_all %t on @m mesh_axes = [0] split_axis = 0 concat_axis = 0
      : tensor<4x8xf32> -> tensor<4x8xf32>
  %h = mesh.shift %t on @m mesh_axes = [1] shift_axis = 1 offset = 1 rotate
      : tensor<4x8xf32> -> tensor<4x8xf32>
  %i = mesh.process_linear_index on @m : index
  return %g, %r, %s, %a, %h, %i : tensor<8x8xf32>, tensor<4x8xf32>,
      tensor<1x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, index
}

func.func @no_axes(%t: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = mesh.all_reduce %t on @m reduction = <product> : tensor<4x8xf32> -> tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}
