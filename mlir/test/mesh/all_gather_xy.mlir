// An upstream mesh program on a 2x2 mesh, lowered (convert-mesh-to-meshdma,
// bufferization, convert-meshdma-to-llvm) and JIT-run by the ctest entry
// mlir.jit.mesh.all_gather_xy; the output is checked against the C++ all_gather_tiled
// over x,y.
mesh.mesh @m(shape = 2x2) {meshdma.axes = ["x", "y"]}
func.func @f(%t: tensor<4x8xf32>) -> tensor<16x8xf32> {
  %r = mesh.all_gather %t on @m mesh_axes = [0, 1] gather_axis = 0 : tensor<4x8xf32> -> tensor<16x8xf32>
  return %r : tensor<16x8xf32>
}
