// An upstream mesh program on a 2x2 mesh, lowered (convert-mesh-to-meshdma,
// bufferization, convert-meshdma-to-llvm) and JIT-run by the ctest entry
// mlir.jit.mesh.all_reduce_x; the output is checked against the C++ psum
// over x.
mesh.mesh @m(shape = 2x2) {meshdma.axes = ["x", "y"]}
func.func @f(%t: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = mesh.all_reduce %t on @m mesh_axes = [0] reduction = <sum> : tensor<4x8xf32> -> tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}
