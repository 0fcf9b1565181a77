// What convert-mesh-to-meshdma cannot map is an error at the op.
// RUN: meshdma-opt %s --convert-mesh-to-meshdma --split-input-file \
// RUN:   -verify-diagnostics -o /dev/null
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @product(%t: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{reduction 'product' has no meshdma equivalent (sum, max, min and average only)}}
  %r = mesh.all_reduce %t on @m mesh_axes = [0] reduction = <product> : tensor<4xf32> -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @gather_axis(%t: tensor<2x3xf32>) -> tensor<2x12xf32> {
  // expected-error @+1 {{all_gather along tensor dimension 1 is not supported (only 0)}}
  %g = mesh.all_gather %t on @m mesh_axes = [0] gather_axis = 1 : tensor<2x3xf32> -> tensor<2x12xf32>
  return %g : tensor<2x12xf32>
}

// -----

mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @scatter_axis(%t: tensor<2x8xf32>) -> tensor<2x2xf32> {
  // expected-error @+1 {{reduce_scatter along tensor dimension 1 is not supported (only 0)}}
  %g = mesh.reduce_scatter %t on @m mesh_axes = [0] scatter_axis = 1 : tensor<2x8xf32> -> tensor<2x2xf32>
  return %g : tensor<2x2xf32>
}

// -----

mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @accumulate(%t: tensor<4xf16>) -> tensor<4xf32> {
  // expected-error @+1 {{an accumulation type ('f32' for 'f16') is not supported}}
  %r = mesh.all_reduce %t on @m mesh_axes = [0] reduction = <sum> : tensor<4xf16> -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @element_type(%t: tensor<4xi16>) -> tensor<16xi16> {
  // expected-error @+1 {{element type 'i16' is not one the runtime moves (i8, i32, i64, f16, bf16, f32, f64)}}
  %g = mesh.all_gather %t on @m mesh_axes = [0] gather_axis = 0 : tensor<4xi16> -> tensor<16xi16>
  return %g : tensor<16xi16>
}

// -----

mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @broadcast(%t: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mesh.broadcast' has no meshdma lowering}}
  %b = mesh.broadcast %t on @m mesh_axes = [0] root = [0] : (tensor<4xf32>) -> tensor<4xf32>
  return %b : tensor<4xf32>
}

// -----

// No mesh axes: a group of one device, the collective is its input.
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @no_axes(%t: tensor<4xf32>) -> tensor<4xf32> {
  %r = mesh.all_reduce %t on @m reduction = <product> : tensor<4xf32> -> tensor<4xf32>
  return %r : tensor<4xf32>
}
