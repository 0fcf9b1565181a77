!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
!row = memref<64xf32, strided<[1], offset: ?>>

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

func.func private @add_row(%dst: memref<64xf32>, %a: !row, %b: !row) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  scf.for %i = %c0 to %c64 step %c1 {
    %u = memref.load %a[%i] : !row
    %v = memref.load %b[%i] : !row
    %s = arith.addf %u, %v : f32
    memref.store %s, %dst[%i] : memref<64xf32>
  }
  return
}

func.func @reduce_scatter(%x: memref<@N@x2x64xf32>, %out: memref<2x64xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring,
                meshdma.entry_barrier = false, meshdma.collective_id = 0} {
  %c0 = arith.constant 0 : index
  %c1i = arith.constant 1 : index
  %c2i = arith.constant 2 : index
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
  %send_r = meshdma.sem_alloc : !dma
  %recv_r = meshdma.sem_alloc : !dma
  %send_l = meshdma.sem_alloc : !dma
  %recv_l = meshdma.sem_alloc : !dma
  %cap_r = meshdma.sem_alloc : !reg
  %cap_l = meshdma.sem_alloc : !reg
  %buf_r = meshdma.alloc : memref<2x64xf32>
  %buf_l = meshdma.alloc : memref<2x64xf32>
  %acc_r = memref.alloc() : memref<64xf32>
  %acc_l = memref.alloc() : memref<64xf32>
  func.call @handshake(%bar, %hs, %left, %right) : (!bar, !reg, i32, i32) -> ()
  %mi = arith.index_cast %me : i32 to index
  %ni = arith.index_cast %n : i32 to index
  %a0 = arith.addi %mi, %ni : index
  %a1 = arith.subi %a0, %c1i : index
  %seg_r0 = arith.remsi %a1, %ni : index
  %b0 = arith.addi %mi, %c1i : index
  %seg_l0 = arith.remsi %b0, %ni : index
  %x_r0 = memref.subview %x[%seg_r0, 0, 0] [1, 1, 64] [1, 1, 1]
      : memref<@N@x2x64xf32> to !row
  %x_l0 = memref.subview %x[%seg_l0, 1, 0] [1, 1, 64] [1, 1, 1]
      : memref<@N@x2x64xf32> to !row
  meshdma.dma_start %x_r0 : !row -> %acc_r : memref<64xf32>, recv %local : !dma
  meshdma.dma_wait_recv %local, %acc_r : !dma, memref<64xf32>
  meshdma.dma_start %x_l0 : !row -> %acc_l : memref<64xf32>, recv %local : !dma
  meshdma.dma_wait_recv %local, %acc_l : !dma, memref<64xf32>
  %steps = arith.subi %ni, %c1i : index
  scf.for %k = %c0 to %steps step %c1i {
    %slot = arith.remsi %k, %c2i : index
    %in_r = memref.subview %buf_r[%slot, 0] [1, 64] [1, 1]
        : memref<2x64xf32> to !row
    %in_l = memref.subview %buf_l[%slot, 0] [1, 64] [1, 1]
        : memref<2x64xf32> to !row
    meshdma.sem_signal %cap_r, %c1 device(%left) : !reg
    meshdma.sem_signal %cap_l, %c1 device(%right) : !reg
    meshdma.sem_wait %cap_r, %c1 : !reg
    meshdma.dma_start %acc_r : memref<64xf32> -> %in_r : !row,
        recv %recv_r : !dma, send %send_r : !dma device(%right)
    meshdma.sem_wait %cap_l, %c1 : !reg
    meshdma.dma_start %acc_l : memref<64xf32> -> %in_l : !row,
        recv %recv_l : !dma, send %send_l : !dma device(%left)
    meshdma.dma_wait_send %send_r, %acc_r : !dma, memref<64xf32>
    meshdma.dma_wait_send %send_l, %acc_l : !dma, memref<64xf32>
    meshdma.dma_wait_recv %recv_r, %in_r : !dma, !row
    meshdma.dma_wait_recv %recv_l, %in_l : !dma, !row
    %c2n = arith.muli %ni, %c2i : index
    %p0 = arith.addi %mi, %c2n : index
    %p1 = arith.subi %p0, %k : index
    %p2 = arith.subi %p1, %c2i : index
    %seg_r = arith.remsi %p2, %ni : index
    %q0 = arith.addi %mi, %k : index
    %q1 = arith.addi %q0, %c2i : index
    %seg_l = arith.remsi %q1, %ni : index
    %x_r = memref.subview %x[%seg_r, 0, 0] [1, 1, 64] [1, 1, 1]
        : memref<@N@x2x64xf32> to !row
    %x_l = memref.subview %x[%seg_l, 1, 0] [1, 1, 64] [1, 1, 1]
        : memref<@N@x2x64xf32> to !row
    func.call @add_row(%acc_r, %in_r, %x_r) : (memref<64xf32>, !row, !row) -> ()
    func.call @add_row(%acc_l, %in_l, %x_l) : (memref<64xf32>, !row, !row) -> ()
  }
  %o_r = memref.subview %out[%c0, 0] [1, 64] [1, 1] : memref<2x64xf32> to !row
  %o_l = memref.subview %out[%c1i, 0] [1, 64] [1, 1] : memref<2x64xf32> to !row
  meshdma.dma_start %acc_r : memref<64xf32> -> %o_r : !row, recv %local : !dma
  meshdma.dma_wait_recv %local, %o_r : !dma, !row
  meshdma.dma_start %acc_l : memref<64xf32> -> %o_l : !row, recv %local : !dma
  meshdma.dma_wait_recv %local, %o_l : !dma, !row
  memref.dealloc %acc_r : memref<64xf32>
  memref.dealloc %acc_l : memref<64xf32>
  return
}
