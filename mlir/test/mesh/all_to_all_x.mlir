// An upstream mesh program on a 2x2 mesh, lowered (convert-mesh-to-meshdma,
// bufferization, convert-meshdma-to-llvm) and JIT-run by the ctest entry
// mlir.jit.mesh.all_to_all_x; the output is checked against the C++ all_to_all:1:0
// over x.
mesh.mesh @m(shape = 2x2) {meshdma.axes = ["x", "y"]}
func.func @f(%t: tensor<4x8xf32>) -> tensor<8x4xf32> {
  %r = mesh.all_to_all %t on @m mesh_axes = [0] split_axis = 1 concat_axis = 0 : tensor<4x8xf32> -> tensor<8x4xf32>
  return %r : tensor<8x4xf32>
}
