// The ring all-gather of all_gather.mlir with one receive semaphore per
// step, taken from a semaphore array by the step's index (the runtime's
// ring collectives allocate theirs with AllocateSemaphoreArray). Template:
// @N@ is the ring size.
!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>

mesh.mesh @ring(shape = @N@) {meshdma.axes = ["x"]}

func.func private @handshake(%bar: !bar, %hs: !reg, %left: i32, %right: i32) {
  %c1 = arith.constant 1 : i32
  %c2 = arith.constant 2 : i32
  meshdma.sem_signal %bar, %c1 device(%left) : !bar
  meshdma.sem_signal %bar, %c1 device(%right) : !bar
  meshdma.sem_wait %bar, %c2 : !bar
  meshdma.sem_signal %hs, %c1 device(%left) : !reg
  meshdma.sem_signal %hs, %c1 device(%right) : !reg
  meshdma.sem_wait %hs, %c2 : !reg
  return
}

func.func @all_gather_sem_array(%in: memref<8x128xf32>, %out: memref<@N@x8x128xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring,
                meshdma.entry_barrier = false, meshdma.collective_id = 0} {
  %c0 = arith.constant 0 : index
  %c1i = arith.constant 1 : index
  %c1 = arith.constant 1 : i32
  %me = meshdma.axis_index "x"
  %n = meshdma.axis_size "x"
  %r = arith.addi %me, %c1 : i32
  %right = arith.remsi %r, %n : i32
  %l0 = arith.addi %me, %n : i32
  %l1 = arith.subi %l0, %c1 : i32
  %left = arith.remsi %l1, %n : i32
  %bar = meshdma.barrier_semaphore : !bar
  %hs = meshdma.sem_alloc : !reg
  %local = meshdma.sem_alloc : !dma
  %send = meshdma.sem_alloc : !dma
  %recvs = meshdma.sem_alloc_array : !meshdma.semaphore_array<dma, @N@>
  func.call @handshake(%bar, %hs, %left, %right) : (!bar, !reg, i32, i32) -> ()
  // Own block into place (waited at the end).
  %mi = arith.index_cast %me : i32 to index
  %own = memref.subview %out[%mi, 0, 0] [1, 8, 128] [1, 1, 1]
      : memref<@N@x8x128xf32> to memref<8x128xf32, strided<[128, 1], offset: ?>>
  meshdma.dma_start %in : memref<8x128xf32>
      -> %own : memref<8x128xf32, strided<[128, 1], offset: ?>>, recv %local : !dma
  %in_s = memref.cast %in
      : memref<8x128xf32> to memref<8x128xf32, strided<[128, 1], offset: ?>>
  // Step k forwards block (me - k) mod n to the right neighbour: from the
  // input at step 0, then from where it arrived.
  %ni = arith.index_cast %n : i32 to index
  %steps = arith.subi %ni, %c1i : index
  scf.for %k = %c0 to %steps step %c1i {
    %a = arith.subi %mi, %k : index
    %b = arith.addi %a, %ni : index
    %slot = arith.remsi %b, %ni : index
    %blk = memref.subview %out[%slot, 0, 0] [1, 8, 128] [1, 1, 1]
        : memref<@N@x8x128xf32> to memref<8x128xf32, strided<[128, 1], offset: ?>>
    %recv = meshdma.sem_index %recvs[%k]
        : !meshdma.semaphore_array<dma, @N@> -> !dma
    %first = arith.cmpi eq, %k, %c0 : index
    %src = arith.select %first, %in_s, %blk
        : memref<8x128xf32, strided<[128, 1], offset: ?>>
    meshdma.dma_start %src : memref<8x128xf32, strided<[128, 1], offset: ?>>
        -> %blk : memref<8x128xf32, strided<[128, 1], offset: ?>>,
        recv %recv : !dma, send %send : !dma device(%right)
    meshdma.dma_wait_send %send, %src
        : !dma, memref<8x128xf32, strided<[128, 1], offset: ?>>
    meshdma.dma_wait_recv %recv, %blk
        : !dma, memref<8x128xf32, strided<[128, 1], offset: ?>>
  }
  meshdma.dma_wait_recv %local, %own
      : !dma, memref<8x128xf32, strided<[128, 1], offset: ?>>
  return
}
