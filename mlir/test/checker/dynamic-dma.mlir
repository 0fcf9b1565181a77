// A DMA whose length is known only at run time is unverifiable, naming the
// dynamic dimension and where the buffer comes from (it used to be rejected
// with a made-up size, "source -1 vs target 16"). A dynamic size the checker
// knows (memref.alloc of a constant, a cast to a static shape) is static.
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=dynamic_argument})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=ARG
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=dynamic_alloc})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=ALLOC
// RUN: meshdma-opt %s --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=known_sizes})' -o /dev/null
!dma = !meshdma.semaphore<dma>
mesh.mesh @ring(shape = ?) {meshdma.axes = ["x"]}

func.func @dynamic_argument(%in: memref<?xf32>, %out16: memref<16xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %out = memref.cast %out16 : memref<16xf32> to memref<?xf32>
  %recv = meshdma.sem_alloc : !dma
  // ARG: dynamic-dma.mlir:[[@LINE+1]]:3: error: unverifiable: the DMA's length is known only at run time: dimension 0 of its source (kernel argument #0) is dynamic
  meshdma.dma_start %in : memref<?xf32> -> %out : memref<?xf32>, recv %recv : !dma
  meshdma.dma_wait_recv %recv, %out : !dma, memref<?xf32>
  return
}

func.func @dynamic_alloc(%sizes: memref<1xindex>, %in16: memref<16xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : index
  %n = memref.load %sizes[%c0] : memref<1xindex>
  %buf = memref.alloc(%n) : memref<?xf32>
  %in = memref.cast %in16 : memref<16xf32> to memref<?xf32>
  %recv = meshdma.sem_alloc : !dma
  // ALLOC: dynamic-dma.mlir:[[@LINE+1]]:3: error: unverifiable: the DMA's length is known only at run time: dimension 0 of its target (the result of 'memref.alloc') is dynamic
  meshdma.dma_start %in : memref<?xf32> -> %buf : memref<?xf32>, recv %recv : !dma
  // ALLOC: dynamic-dma.mlir:[[@LINE-5]]:10: note: the buffer comes from here
  meshdma.dma_wait_recv %recv, %buf : !dma, memref<?xf32>
  return
}

func.func @known_sizes(%in: memref<?xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c16 = arith.constant 16 : index
  %buf = memref.alloc(%c16) : memref<?xf32>
  %s16 = memref.cast %in : memref<?xf32> to memref<16xf32>
  %src = memref.cast %s16 : memref<16xf32> to memref<?xf32>
  %recv = meshdma.sem_alloc : !dma
  meshdma.dma_start %src : memref<?xf32> -> %buf : memref<?xf32>, recv %recv : !dma
  meshdma.dma_wait_recv %recv, %buf : !dma, memref<?xf32>
  memref.dealloc %buf : memref<?xf32>
  return
}
