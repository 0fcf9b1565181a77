// Semaphore arrays (`sem_alloc_array`, `sem_index`): a KV pipeline with one
// receive semaphore per layer, written as one array indexed by the layer,
// is proved; an index off the array is reported at its line with the
// device; an index that maps two layers to one slot is the shared-semaphore
// race. The printed form parses back; the ring all-gather with one receive
// semaphore per step is proved.
// RUN: meshdma-opt %s -o /dev/null \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=kv_per_layer})'
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=kv_off_array})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=OFF
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=kv_collide})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=COLLIDE
// RUN: meshdma-opt %s | meshdma-opt -o /dev/null
// RUN: sed s/@N@/5/g %S/../kernels/all_gather_sem_array.mlir | meshdma-opt \
// RUN:   -o /dev/null --pass-pipeline='builtin.module(meshdma-verify-protocol{calls=2})'

!dma = !meshdma.semaphore<dma>
!dmas = !meshdma.semaphore_array<dma, 3>
!blk = memref<8x128xf32, strided<[128, 1], offset: ?>>
mesh.mesh @ring(shape = ?) {meshdma.axes = ["x"]}

// dst += src over an 8x128 block (code the checker skips: it reads src and
// dst and writes dst).
func.func private @accumulate(%dst: memref<8x128xf32>, %src: !blk) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c128 = arith.constant 128 : index
  scf.for %i = %c0 to %c8 step %c1 {
    scf.for %j = %c0 to %c128 step %c1 {
      %a = memref.load %dst[%i, %j] : memref<8x128xf32>
      %b = memref.load %src[%i, %j] : !blk
      %s = arith.addf %a, %b : f32
      memref.store %s, %dst[%i, %j] : memref<8x128xf32>
    }
  }
  return
}

// Device 0 streams three layers' KV blocks into device 1's cache; device 1
// attends to each layer once its DMA has arrived. Layer l signals slot
// (l * %mul) mod %mod of the array: %mul = 1, %mod = 3 gives one slot per
// layer.
func.func private @kv(%kv: memref<3x8x128xf32>, %o: memref<8x128xf32>,
                      %recv: !dmas, %mul: index, %mod: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %c0i = arith.constant 0 : i32
  %c1i = arith.constant 1 : i32
  %me = meshdma.device_id
  %send = meshdma.sem_alloc : !dma
  %cache = meshdma.alloc : memref<3x8x128xf32>
  %prefill = arith.cmpi eq, %me, %c0i : i32
  scf.if %prefill {
    scf.for %l = %c0 to %c3 step %c1 {
      %m = arith.muli %l, %mul : index
      %slot = arith.remsi %m, %mod : index
      %sem = meshdma.sem_index %recv[%slot] : !dmas -> !dma
      %k = memref.subview %kv[%l, 0, 0] [1, 8, 128] [1, 1, 1]
          : memref<3x8x128xf32> to !blk
      %c = memref.subview %cache[%l, 0, 0] [1, 8, 128] [1, 1, 1]
          : memref<3x8x128xf32> to !blk
      meshdma.dma_start %k : !blk -> %c : !blk,
          recv %sem : !dma, send %send : !dma device(%c1i)
    }
    scf.for %l = %c0 to %c3 step %c1 {
      %k = memref.subview %kv[%l, 0, 0] [1, 8, 128] [1, 1, 1]
          : memref<3x8x128xf32> to !blk
      meshdma.dma_wait_send %send, %k : !dma, !blk
    }
  } else {
    scf.for %l = %c0 to %c3 step %c1 {
      %m = arith.muli %l, %mul : index
      %slot = arith.remsi %m, %mod : index
      // OFF: semaphore-arrays.mlir:[[@LINE+1]]:14: error: semaphore index 3 is off the array of 3 semaphores (0 to 2) (device 1)
      %sem = meshdma.sem_index %recv[%slot] : !dmas -> !dma
      %c = memref.subview %cache[%l, 0, 0] [1, 8, 128] [1, 1, 1]
          : memref<3x8x128xf32> to !blk
      meshdma.dma_wait_recv %sem, %c : !dma, !blk
      // COLLIDE: semaphore-arrays.mlir:[[@LINE+1]]:7: error: data race on device 1: bytes [0, 4096) of the buffer of 'meshdma.alloc' at line {{[0-9]+}} are written by the DMA device 0 starts at line {{[0-9]+}} (it may land until a wait observes it) and read by device 1 at line [[@LINE+1]]; nothing orders them
      func.call @accumulate(%o, %c) : (memref<8x128xf32>, !blk) -> ()
    }
  }
  return
}

func.func @kv_per_layer(%kv: memref<3x8x128xf32>, %o: memref<8x128xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %recv = meshdma.sem_alloc_array : !dmas
  func.call @kv(%kv, %o, %recv, %c1, %c3)
      : (memref<3x8x128xf32>, memref<8x128xf32>, !dmas, index, index) -> ()
  return
}

// The receiver computes its slot as 3 l mod 4: layer 1 indexes slot 3 of
// an array of 3.
func.func @kv_off_array(%kv: memref<3x8x128xf32>, %o: memref<8x128xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %recv = meshdma.sem_alloc_array : !dmas
  %me = meshdma.device_id
  %c0i = arith.constant 0 : i32
  %sender = arith.cmpi eq, %me, %c0i : i32
  %mul = arith.select %sender, %c1, %c3 : index
  %mod = arith.select %sender, %c3, %c4 : index
  func.call @kv(%kv, %o, %recv, %mul, %mod)
      : (memref<3x8x128xf32>, memref<8x128xf32>, !dmas, index, index) -> ()
  return
}

// Layer l uses slot (2 l) mod 2: every layer shares slot 0, and the wait
// for layer 0 can be satisfied by layer 1's DMA.
func.func @kv_collide(%kv: memref<3x8x128xf32>, %o: memref<8x128xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c2 = arith.constant 2 : index
  %recv = meshdma.sem_alloc_array : !dmas
  func.call @kv(%kv, %o, %recv, %c2, %c2)
      : (memref<3x8x128xf32>, memref<8x128xf32>, !dmas, index, index) -> ()
  return
}
