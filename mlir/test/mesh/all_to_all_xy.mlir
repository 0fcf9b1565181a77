// An upstream mesh program on a 2x2 mesh, lowered (convert-mesh-to-meshdma,
// bufferization, convert-meshdma-to-llvm) and JIT-run by the ctest entry
// mlir.jit.mesh.all_to_all_xy; the output is checked against the C++ all_to_all:0:1
// over x,y.
mesh.mesh @m(shape = 2x2) {meshdma.axes = ["x", "y"]}
func.func @f(%t: tensor<4x8xf32>) -> tensor<1x32xf32> {
  %r = mesh.all_to_all %t on @m mesh_axes = [0, 1] split_axis = 0 concat_axis = 1 : tensor<4x8xf32> -> tensor<1x32xf32>
  return %r : tensor<1x32xf32>
}
