// meshdma-expand-collectives turns ppermute and all_gather over one axis into
// ring kernels of DMA and semaphore ops, which the checker then proves, on a
// ring and on each axis of a 2-D mesh.
// RUN: sed s/@N@/4/g %s | meshdma-opt --meshdma-expand-collectives | FileCheck %s
// RUN: for n in 1 2 3 5 8 16; do \
// RUN:   sed s/@N@/$n/g %s | meshdma-opt --mlir-print-op-on-diagnostic=false \
// RUN:     --pass-pipeline='builtin.module(meshdma-expand-collectives,meshdma-verify-protocol)' \
// RUN:     -o /dev/null || exit 1; done
// RUN: sed s/@N@/4/g %s | meshdma-opt --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-expand-collectives,meshdma-verify-protocol{stats=true})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=VERIFIED

mesh.mesh @ring(shape = @N@) {meshdma.axes = ["x"]}
mesh.mesh @grid(shape = 2x3) {meshdma.axes = ["a", "b"]}

// CHECK-LABEL: func.func @gather
// CHECK: meshdma.device_barrier
// CHECK: meshdma.dma_start
// CHECK: scf.for
// CHECK: meshdma.dma_start {{.*}} device(
// CHECK-NOT: meshdma.all_gather
// VERIFIED: remark: protocol verified: 4 devices
func.func @gather(%in: memref<2x8xf32>, %row: memref<1x8xf32>,
                  %tiled: memref<@N@x8xf32>, %stacked: memref<@N@x2x8xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  meshdma.all_gather %row, %tiled {axes = ["x"], tiled} : memref<1x8xf32>, memref<@N@x8xf32>
  meshdma.all_gather %in, %stacked {axes = ["x"]} : memref<2x8xf32>, memref<@N@x2x8xf32>
  return
}

// VERIFIED: remark: protocol verified: 4 devices
// CHECK-LABEL: func.func @shifts
// CHECK-NOT: meshdma.ppermute
func.func @shifts(%in: memref<16xi32>, %out: memref<16xi32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  meshdma.ppermute %in, %out {axes = ["x"], offset = 1, rotate} : memref<16xi32>, memref<16xi32>
  meshdma.ppermute %in, %out {axes = ["x"], offset = -2} : memref<16xi32>, memref<16xi32>
  meshdma.ppermute %in, %out {axes = ["x"], perm = array<i64: 0, 0>} : memref<16xi32>, memref<16xi32>
  return
}

// VERIFIED: remark: protocol verified: 6 devices
func.func @grid_axes(%in: memref<4xf32>, %ga: memref<8xf32>, %gb: memref<12xf32>,
                     %out: memref<4xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @grid} {
  meshdma.all_gather %in, %ga {axes = ["a"], tiled} : memref<4xf32>, memref<8xf32>
  meshdma.all_gather %in, %gb {axes = ["b"], tiled} : memref<4xf32>, memref<12xf32>
  meshdma.ppermute %in, %out {axes = ["b"], offset = 1} : memref<4xf32>, memref<4xf32>
  meshdma.ppermute %in, %out {axes = ["a"], perm = array<i64: 0, 1, 1, 0>} : memref<4xf32>, memref<4xf32>
  return
}
