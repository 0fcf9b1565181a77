mesh.mesh @ring(shape = @N@) {meshdma.axes = ["x"]}
mesh.mesh @grid(shape = 2x3) {meshdma.axes = ["a", "b"]}

func.func @gather(%in: memref<2x8xf32>, %row: memref<1x8xf32>,
                  %tiled: memref<@N@x8xf32>, %stacked: memref<@N@x2x8xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  meshdma.all_gather %row, %tiled {axes = ["x"], tiled} : memref<1x8xf32>, memref<@N@x8xf32>
  meshdma.all_gather %in, %stacked {axes = ["x"]} : memref<2x8xf32>, memref<@N@x2x8xf32>
  return
}

func.func @shifts(%in: memref<16xi32>, %out: memref<16xi32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  meshdma.ppermute %in, %out {axes = ["x"], offset = 1, rotate} : memref<16xi32>, memref<16xi32>
  meshdma.ppermute %in, %out {axes = ["x"], offset = -2} : memref<16xi32>, memref<16xi32>
  meshdma.ppermute %in, %out {axes = ["x"], perm = array<i64: 0, 0>} : memref<16xi32>, memref<16xi32>
  return
}

func.func @grid_axes(%in: memref<4xf32>, %ga: memref<8xf32>, %gb: memref<12xf32>,
                     %out: memref<4xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @grid} {
  meshdma.all_gather %in, %ga {axes = ["a"], tiled} : memref<4xf32>, memref<8xf32>
  meshdma.all_gather %in, %gb {axes = ["b"], tiled} : memref<4xf32>, memref<12xf32>
  meshdma.ppermute %in, %out {axes = ["b"], offset = 1} : memref<4xf32>, memref<4xf32>
  meshdma.ppermute %in, %out {axes = ["a"], perm = array<i64: 0, 1, 1, 0>} : memref<4xf32>, memref<4xf32>
  return
}
