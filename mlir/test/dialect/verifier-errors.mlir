// Every diagnostic of the meshdma verifiers, one case each.
// RUN: meshdma-opt %s -split-input-file -verify-diagnostics -o /dev/null

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>

mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{unknown mesh axis 'y' (mesh @m has axes x)}}
  %0 = meshdma.axis_index "y"
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 2x2) {meshdma.axes = ["x", "y"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{unknown mesh axis 'z' (mesh @m has axes x, y)}}
  %0 = meshdma.axis_size "z"
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{needs an enclosing kernel with meshdma.iteration_bounds}}
  %0 = meshdma.program_id 0
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @m, meshdma.iteration_bounds = array<i64: 4>} {
  // expected-error @+1 {{grid dimension 1 is out of range for a grid of rank 1}}
  %0 = meshdma.program_id 1
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @m, meshdma.iteration_bounds = array<i64: 4>} {
  // expected-error @+1 {{grid dimension -1 is out of range for a grid of rank 1}}
  %0 = meshdma.num_programs -1
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{cannot allocate a BARRIER semaphore; use meshdma.barrier_semaphore}}
  %0 = meshdma.sem_alloc : !bar
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @m, meshdma.collective_id = 0} {
  // expected-error @+1 {{returns a !meshdma.semaphore<barrier>, not '!meshdma.semaphore<regular>'}}
  %0 = meshdma.barrier_semaphore : !reg
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{needs an enclosing kernel with meshdma.collective_id}}
  %0 = meshdma.barrier_semaphore : !bar
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{symmetric scratch needs a static shape, got 'memref<?xf32>'}}
  %0 = meshdma.alloc : memref<?xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{symmetric scratch needs the identity layout}}
  %0 = meshdma.alloc : memref<4xf32, strided<[2]>>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @m} {
  %c1 = arith.constant 1 : i32
  %s = meshdma.sem_alloc : !dma
  // expected-error @+1 {{cannot signal a DMA semaphore: DMA semaphores count bytes and move only with DMAs}}
  meshdma.sem_signal %s, %c1 : !dma
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @m} {
  %c1 = arith.constant 1 : i32
  %s = meshdma.sem_alloc : !reg
  // expected-error @+1 {{'logical' needs a device(...) id}}
  meshdma.sem_signal %s, %c1 logical : !reg
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 2x2) {meshdma.axes = ["x", "y"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @m} {
  %c1 = arith.constant 1 : i32
  %s = meshdma.sem_alloc : !reg
  // expected-error @+1 {{a LOGICAL device id is one i32, got 2}}
  meshdma.sem_signal %s, %c1 device(%c1, %c1) logical : !reg
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 2x2) {meshdma.axes = ["x", "y"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @m} {
  %c1 = arith.constant 1 : i32
  %s = meshdma.sem_alloc : !reg
  // expected-error @+1 {{a MESH device id needs one coordinate per mesh axis (2, mesh @m has axes x, y), got 1}}
  meshdma.sem_signal %s, %c1 device(%c1) : !reg
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @m} {
  %c1 = arith.constant 1 : i32
  %s = meshdma.sem_alloc : !dma
  // expected-error @+1 {{cannot sem_wait on a DMA semaphore; use dma_wait_recv or dma_wait_send}}
  meshdma.sem_wait %s, %c1 : !dma
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<4xf32>, %b: memref<4xi32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  %s = meshdma.sem_alloc : !dma
  // expected-error @+1 {{source and target element types differ ('f32' vs 'i32')}}
  meshdma.dma_start %a : memref<4xf32> -> %b : memref<4xi32>, recv %s : !dma
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<4x2xf32>, %b: memref<8xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  %s = meshdma.sem_alloc : !dma
  // expected-error @+1 {{source and target shapes differ (4x2 vs 8)}}
  meshdma.dma_start %a : memref<4x2xf32> -> %b : memref<8xf32>, recv %s : !dma
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<1x1x1x1x1x1x2xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  %s = meshdma.sem_alloc : !dma
  // expected-error @+1 {{rank 7 exceeds the runtime's maximum of 6}}
  meshdma.dma_start %a : memref<1x1x1x1x1x1x2xf32> -> %a : memref<1x1x1x1x1x1x2xf32>, recv %s : !dma
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<4xf32>, %b: memref<4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  %s = meshdma.sem_alloc : !reg
  // expected-error @+1 {{the target (recv) semaphore must be a DMA semaphore, got '!meshdma.semaphore<regular>'}}
  meshdma.dma_start %a : memref<4xf32> -> %b : memref<4xf32>, recv %s : !reg
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<4xf32>, %b: memref<4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  %s = meshdma.sem_alloc : !dma
  // expected-error @+1 {{'logical' needs a device(...) id}}
  meshdma.dma_start %a : memref<4xf32> -> %b : memref<4xf32>, recv %s : !dma logical
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<4xf32>, %b: memref<4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  %c1 = arith.constant 1 : i32
  %s = meshdma.sem_alloc : !dma
  // expected-error @+1 {{a remote DMA (device given) needs a source (send) semaphore}}
  meshdma.dma_start %a : memref<4xf32> -> %b : memref<4xf32>, recv %s : !dma device(%c1)
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<4xf32>, %b: memref<4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  %s = meshdma.sem_alloc : !dma
  // expected-error @+1 {{a local DMA (no device) takes no source (send) semaphore}}
  meshdma.dma_start %a : memref<4xf32> -> %b : memref<4xf32>, recv %s : !dma, send %s : !dma
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<4xf32>, %b: memref<4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  %c1 = arith.constant 1 : i32
  %s = meshdma.sem_alloc : !dma
  %r = meshdma.sem_alloc : !reg
  // expected-error @+1 {{the source (send) semaphore must be a DMA semaphore, got '!meshdma.semaphore<regular>'}}
  meshdma.dma_start %a : memref<4xf32> -> %b : memref<4xf32>, recv %s : !dma, send %r : !reg device(%c1)
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 2x2) {meshdma.axes = ["x", "y"]}
func.func @k(%a: memref<4xf32>, %b: memref<4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  %c1 = arith.constant 1 : i32
  %s = meshdma.sem_alloc : !dma
  // expected-error @+1 {{a MESH device id needs one coordinate per mesh axis (2, mesh @m has axes x, y), got 1}}
  meshdma.dma_start %a : memref<4xf32> -> %b : memref<4xf32>, recv %s : !dma, send %s : !dma device(%c1)
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  %s = meshdma.sem_alloc : !reg
  // expected-error @+1 {{needs a DMA semaphore, got '!meshdma.semaphore<regular>' (use sem_wait)}}
  meshdma.dma_wait_recv %s, %a : !reg, memref<4xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m, meshdma.collective_id = 3} {
  %s = meshdma.barrier_semaphore : !bar
  // expected-error @+1 {{needs a DMA semaphore, got '!meshdma.semaphore<barrier>' (use sem_wait)}}
  meshdma.dma_wait_send %s, %a : !bar, memref<4xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8xf32>, %b: memref<8xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{needs at least one mesh axis}}
  meshdma.all_reduce sum %a, %b {axes = []} : memref<8xf32>, memref<8xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 2x2) {meshdma.axes = ["x", "y"]}
func.func @k(%a: memref<8xf32>, %b: memref<8xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{mesh axis 'x' is listed twice}}
  meshdma.all_reduce sum %a, %b {axes = ["x", "x"]} : memref<8xf32>, memref<8xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8xf32>, %b: memref<8xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{unknown mesh axis 'q' (mesh @m has axes x)}}
  meshdma.all_gather %a, %b {axes = ["q"], tiled} : memref<8xf32>, memref<8xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8xf32>, %b: memref<8xi32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{input and output element types differ ('f32' vs 'i32')}}
  meshdma.all_reduce max %a, %b {axes = ["x"]} : memref<8xf32>, memref<8xi32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8xf32>, %b: memref<8xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{output must not be the input (a peer may write it while this device still reads)}}
  meshdma.ppermute %a, %a {axes = ["x"], offset = 1} : memref<8xf32>, memref<8xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8xf32>, %b: memref<4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{input and output element counts differ (8 vs 4)}}
  meshdma.ppermute %a, %b {axes = ["x"], offset = 1} : memref<8xf32>, memref<4xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8xf32>, %b: memref<8xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{needs exactly one of 'perm' and 'offset'}}
  meshdma.ppermute %a, %b {axes = ["x"]} : memref<8xf32>, memref<8xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8xf32>, %b: memref<8xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{'rotate' goes with 'offset'}}
  meshdma.ppermute %a, %b {axes = ["x"], perm = array<i64: 0, 1>, rotate} : memref<8xf32>, memref<8xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8xf32>, %b: memref<8xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{'perm' holds (source, destination) pairs; got 3 entries}}
  meshdma.ppermute %a, %b {axes = ["x"], perm = array<i64: 0, 1, 2>} : memref<8xf32>, memref<8xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8xf32>, %b: memref<8xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{position 4 is off the group of size 4}}
  meshdma.ppermute %a, %b {axes = ["x"], perm = array<i64: 0, 4>} : memref<8xf32>, memref<8xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8xf32>, %b: memref<8xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{position 0 is a source twice}}
  meshdma.ppermute %a, %b {axes = ["x"], perm = array<i64: 0, 1, 0, 2>} : memref<8xf32>, memref<8xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8xf32>, %b: memref<8xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{position 1 is a destination twice}}
  meshdma.ppermute %a, %b {axes = ["x"], perm = array<i64: 0, 1, 2, 1>} : memref<8xf32>, memref<8xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<f32>, %b: memref<4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{a tiled all_gather needs an input of rank >= 1}}
  meshdma.all_gather %a, %b {axes = ["x"], tiled} : memref<f32>, memref<4xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8xf32>, %b: memref<32xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{output rank 1 should be 2 for a stacked all_gather}}
  meshdma.all_gather %a, %b {axes = ["x"]} : memref<8xf32>, memref<32xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8xf32>, %b: memref<16xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{output dimension 0 is 16, expected 32 (input 8, group size 4)}}
  meshdma.all_gather %a, %b {axes = ["x"], tiled} : memref<8xf32>, memref<16xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8xi8>, %b: memref<8xi8>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{reductions do not support 'i8' (f32, f64, bf16, f16, i32 and i64 only)}}
  meshdma.all_reduce sum %a, %b {axes = ["x"]} : memref<8xi8>, memref<8xi8>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8xf32>, %b: memref<4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{input and output element counts differ (8 vs 4)}}
  meshdma.all_reduce mean %a, %b {axes = ["x"]} : memref<8xf32>, memref<4xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<6xf32>, %b: memref<2xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{input element count 6 is not divisible by the group size 4 (a static output cannot hold unequal segments)}}
  meshdma.reduce_scatter sum %a, %b {axes = ["x"]} : memref<6xf32>, memref<2xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8xf32>, %b: memref<4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{output holds 4 elements, expected 2 (input 8 / group size 4)}}
  meshdma.reduce_scatter min %a, %b {axes = ["x"]} : memref<8xf32>, memref<4xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8xf32>, %b: memref<8xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{output must not be the input}}
  meshdma.all_to_all %a, %a {axes = ["x"], split_axis = 0, concat_axis = 0} : memref<8xf32>, memref<8xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8xf32>, %b: memref<8xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{split_axis 1 and concat_axis 0 must be dimensions of the rank-1 input}}
  meshdma.all_to_all %a, %b {axes = ["x"], split_axis = 1, concat_axis = 0} : memref<8xf32>, memref<8xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8xf32>, %b: memref<8x1xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{output rank 2 differs from the input's 1}}
  meshdma.all_to_all %a, %b {axes = ["x"], split_axis = 0, concat_axis = 0} : memref<8xf32>, memref<8x1xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<6x2xf32>, %b: memref<6x2xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{split dimension 0 of size 6 is not divisible by the group size 4}}
  meshdma.all_to_all %a, %b {axes = ["x"], split_axis = 0, concat_axis = 1} : memref<6x2xf32>, memref<6x2xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%a: memref<8x2xf32>, %b: memref<8x2xf32>) attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{output shape 8x2 should be 2x8 (group size 4)}}
  meshdma.all_to_all %a, %b {axes = ["x"], split_axis = 0, concat_axis = 1} : memref<8x2xf32>, memref<8x2xf32>
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
// expected-error @+1 {{meshdma.axes belongs on a mesh.mesh}}
func.func @f() attributes {meshdma.axes = ["x"]} {
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
// expected-error @+1 {{meshdma.axes must be an array of axis names}}
mesh.mesh @m(shape = 4) {meshdma.axes = [1]}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
// expected-error @+1 {{meshdma.axes names 1 axes but mesh @m has rank 2}}
mesh.mesh @m(shape = 2x2) {meshdma.axes = ["x"]}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
// expected-error @+1 {{meshdma.axes: axis 'x' is named twice}}
mesh.mesh @m(shape = 2x2) {meshdma.axes = ["x", "x"]}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
// expected-error @+1 {{meshdma.mesh belongs on a func.func}}
mesh.mesh @m(shape = 2) {meshdma.mesh = @m}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
// expected-error @+1 {{meshdma.kernel is a unit attribute}}
func.func @k() attributes {meshdma.kernel = 1, meshdma.mesh = @m} {
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
// expected-error @+1 {{a meshdma kernel needs meshdma.mesh = @mesh}}
func.func @k() attributes {meshdma.kernel} {
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
// expected-error @+1 {{a meshdma kernel returns no values, got 1}}
func.func @k() -> i32 attributes {meshdma.kernel, meshdma.mesh = @m} {
  %c = arith.constant 0 : i32
  return %c : i32
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
// expected-error @+1 {{meshdma.mesh must be a symbol (@mesh)}}
func.func @k() attributes {meshdma.mesh = "m"} {
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
// expected-error @+1 {{meshdma.mesh @nowhere does not name a mesh.mesh}}
func.func @k() attributes {meshdma.mesh = @nowhere} {
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
// expected-error @+1 {{meshdma.entry_barrier must be true or false}}
func.func @k(%a: memref<8x4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m, meshdma.entry_barrier = 1} {
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
// expected-error @+1 {{meshdma.collective_id must be an integer in [0, 64)}}
func.func @k(%a: memref<8x4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m, meshdma.collective_id = 64} {
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
// expected-error @+1 {{meshdma.iteration_bounds must be array<i64: ...>}}
func.func @k(%a: memref<8x4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m, meshdma.iteration_bounds = [4]} {
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
// expected-error @+1 {{meshdma.iteration_bounds: grid dimension 1 has bound 0, must be >= 1}}
func.func @k(%a: memref<8x4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m, meshdma.iteration_bounds = array<i64: 4, 0>} {
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
// expected-error @+1 {{meshdma.dimension_semantics needs one entry per dimension of meshdma.iteration_bounds}}
func.func @k(%a: memref<8x4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m, meshdma.iteration_bounds = array<i64: 4>, meshdma.dimension_semantics = ["parallel", "parallel"]} {
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
// expected-error @+1 {{meshdma.dimension_semantics: entries are "parallel" or "arbitrary"}}
func.func @k(%a: memref<8x4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m, meshdma.iteration_bounds = array<i64: 4>, meshdma.dimension_semantics = ["serial"]} {
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
// expected-error @+1 {{meshdma.window_params needs one dictionary per argument (1)}}
func.func @k(%a: memref<8x4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m, meshdma.window_params = []} {
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
// expected-error @+1 {{meshdma.window_params[0] must be a dictionary}}
func.func @k(%a: memref<8x4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m, meshdma.window_params = [1]} {
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
// expected-error @+1 {{meshdma.window_params[0]: window_bounds have rank 1, argument has rank 2}}
func.func @k(%a: memref<8x4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m, meshdma.window_params = [{window_bounds = array<i64: 2>}]} {
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
// expected-error @+1 {{meshdma.window_params[0]: window bound 3 does not divide dimension 0 of size 8}}
func.func @k(%a: memref<8x4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m, meshdma.window_params = [{window_bounds = array<i64: 3, 4>}]} {
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
// expected-error @+1 {{unknown meshdma attribute meshdma.frobnicate}}
func.func @k(%a: memref<8x4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m, meshdma.frobnicate} {
  return
}

// -----

!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
// expected-error @+1 {{meshdma.window_params[0]: window_bounds need a static memref argument}}
func.func @k(%a: memref<?x4xf32>) attributes {meshdma.kernel, meshdma.mesh = @m, meshdma.window_params = [{window_bounds = array<i64: 2, 4>}]} {
  return
}

// -----

mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{cannot allocate BARRIER semaphores; use meshdma.barrier_semaphore}}
  %0 = meshdma.sem_alloc_array : !meshdma.semaphore_array<barrier, 2>
  return
}

// -----

mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @m} {
  // expected-error @+1 {{an array of 0 semaphores; the size must be 1 to 65536}}
  %0 = meshdma.sem_alloc_array : !meshdma.semaphore_array<dma, 0>
  return
}

// -----

mesh.mesh @m(shape = 4) {meshdma.axes = ["x"]}
func.func @k(%i: index) attributes {meshdma.kernel, meshdma.mesh = @m} {
  %0 = meshdma.sem_alloc_array : !meshdma.semaphore_array<dma, 2>
  // expected-error @+1 {{indexes an array of dma semaphores but returns '!meshdma.semaphore<regular>'}}
  %1 = meshdma.sem_index %0[%i] : !meshdma.semaphore_array<dma, 2> -> !meshdma.semaphore<regular>
  return
}
