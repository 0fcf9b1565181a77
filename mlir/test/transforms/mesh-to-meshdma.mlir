// Upstream mesh collectives on tensors become meshdma collectives on
// symmetric memrefs; what has no equivalent is an error at the op.
// RUN: meshdma-opt %s --convert-mesh-to-meshdma | FileCheck %s
// RUN: meshdma-opt %s --convert-mesh-to-meshdma | meshdma-opt > /dev/null

mesh.mesh @m(shape = 2x2) {meshdma.axes = ["x", "y"]}

// CHECK-LABEL: func.func @collectives
// CHECK-SAME: meshdma.mesh = @m
func.func @collectives(%t: tensor<4x8xf32>) -> (tensor<8x8xf32>, tensor<4x8xf32>,
    tensor<1x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, index) {
  // CHECK-DAG: %[[IN:.*]] = bufferization.to_memref %{{.*}} : memref<4x8xf32>
  // CHECK-DAG: %[[G:.*]] = meshdma.alloc : memref<8x8xf32>
  // CHECK: meshdma.all_gather %[[IN]], %[[G]] {axes = ["y"], tiled} : memref<4x8xf32>, memref<8x8xf32>
  // CHECK: bufferization.to_tensor %[[G]] restrict writable : memref<8x8xf32>
  %g = mesh.all_gather %t on @m mesh_axes = [1] gather_axis = 0
      : tensor<4x8xf32> -> tensor<8x8xf32>
  // CHECK: meshdma.all_reduce mean %{{.*}}, %{{.*}} {axes = ["x", "y"]} : memref<4x8xf32>, memref<4x8xf32>
  %r = mesh.all_reduce %t on @m mesh_axes = [0, 1] reduction = <average>
      : tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK: meshdma.reduce_scatter max %{{.*}}, %{{.*}} {axes = ["x", "y"]} : memref<4x8xf32>, memref<1x8xf32>
  %s = mesh.reduce_scatter %t on @m mesh_axes = [0, 1] reduction = <max>
      scatter_axis = 0 : tensor<4x8xf32> -> tensor<1x8xf32>
  // CHECK: meshdma.all_to_all %{{.*}}, %{{.*}} {axes = ["x"], concat_axis = 0 : i64, split_axis = 0 : i64}
  %a = mesh.all_to_all %t on @m mesh_axes = [0] split_axis = 0 concat_axis = 0
      : tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK: meshdma.ppermute %{{.*}}, %{{.*}} {axes = ["y"], offset = 1 : i64, rotate}
  %h = mesh.shift %t on @m mesh_axes = [1] shift_axis = 1 offset = 1 rotate
      : tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK: %[[ID:.*]] = meshdma.device_id
  // CHECK: arith.index_cast %[[ID]] : i32 to index
  %i = mesh.process_linear_index on @m : index
  return %g, %r, %s, %a, %h, %i : tensor<8x8xf32>, tensor<4x8xf32>,
      tensor<1x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, index
}

// CHECK-LABEL: func.func @no_axes
// CHECK-NOT: meshdma.
// CHECK: return %arg0
func.func @no_axes(%t: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = mesh.all_reduce %t on @m reduction = <product> : tensor<4x8xf32> -> tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}
