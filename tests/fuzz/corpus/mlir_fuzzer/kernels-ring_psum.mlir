!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
!slot = memref<8x128xf32, strided<[128, 1], offset: ?>>

mesh.mesh @ring(shape = @N@) {meshdma.axes = ["x"]}

func.func private @zero(%dst: memref<8x128xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c128 = arith.constant 128 : index
  %zero = arith.constant 0.0 : f32
  scf.for %i = %c0 to %c8 step %c1 {
    scf.for %j = %c0 to %c128 step %c1 {
      memref.store %zero, %dst[%i, %j] : memref<8x128xf32>
    }
  }
  return
}

func.func private @accumulate(%dst: memref<8x128xf32>, %src: memref<8x128xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c128 = arith.constant 128 : index
  scf.for %i = %c0 to %c8 step %c1 {
    scf.for %j = %c0 to %c128 step %c1 {
      %a = memref.load %dst[%i, %j] : memref<8x128xf32>
      %b = memref.load %src[%i, %j] : memref<8x128xf32>
      %s = arith.addf %a, %b : f32
      memref.store %s, %dst[%i, %j] : memref<8x128xf32>
    }
  }
  return
}

func.func @ring_psum(%x: memref<8x128xf32>, %o: memref<8x128xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring,
                meshdma.entry_barrier = false, meshdma.collective_id = 0} {
  %c0 = arith.constant 0 : index
  %c1i = arith.constant 1 : index
  %c2i = arith.constant 2 : index
  %c1 = arith.constant 1 : i32
  %c2 = arith.constant 2 : i32
  %me = meshdma.axis_index "x"
  %n = meshdma.axis_size "x"
  %r = arith.addi %me, %c1 : i32
  %right = arith.remsi %r, %n : i32
  %l0 = arith.addi %me, %n : i32
  %l1 = arith.subi %l0, %c1 : i32
  %left = arith.remsi %l1, %n : i32
  %bar = meshdma.barrier_semaphore : !bar
  %copy_sem = meshdma.sem_alloc : !dma
  %recv_sem = meshdma.sem_alloc : !dma
  %send_sem = meshdma.sem_alloc : !dma
  %capacity = meshdma.sem_alloc : !reg
  %hbm = meshdma.alloc : memref<2x8x128xf32>
  %scratch = memref.alloc() : memref<8x128xf32>
  meshdma.sem_signal %bar, %c1 device(%left) : !bar
  meshdma.sem_signal %bar, %c1 device(%right) : !bar
  meshdma.sem_wait %bar, %c2 : !bar
  func.call @zero(%o) : (memref<8x128xf32>) -> ()
  %w0 = memref.subview %hbm[%c0, 0, 0] [1, 8, 128] [1, 1, 1]
      : memref<2x8x128xf32> to !slot
  meshdma.dma_start %x : memref<8x128xf32> -> %w0 : !slot,
      recv %recv_sem : !dma, send %send_sem : !dma device(%right)
  meshdma.dma_wait_send %send_sem, %x : !dma, memref<8x128xf32>
  meshdma.dma_wait_recv %recv_sem, %w0 : !dma, !slot
  %ni = arith.index_cast %n : i32 to index
  scf.for %k = %c0 to %ni step %c1i {
    %ws = arith.remsi %k, %c2i : index
    %rs = arith.subi %c1i, %ws : index
    %work = memref.subview %hbm[%ws, 0, 0] [1, 8, 128] [1, 1, 1]
        : memref<2x8x128xf32> to !slot
    %next = memref.subview %hbm[%rs, 0, 0] [1, 8, 128] [1, 1, 1]
        : memref<2x8x128xf32> to !slot
    meshdma.sem_signal %capacity, %c1 device(%left) : !reg
    meshdma.dma_start %work : !slot -> %scratch : memref<8x128xf32>,
        recv %copy_sem : !dma
    meshdma.sem_wait %capacity, %c1 : !reg
    meshdma.dma_start %work : !slot -> %next : !slot,
        recv %recv_sem : !dma, send %send_sem : !dma device(%right)
    meshdma.dma_wait_recv %copy_sem, %scratch : !dma, memref<8x128xf32>
    func.call @accumulate(%o, %scratch)
        : (memref<8x128xf32>, memref<8x128xf32>) -> ()
    meshdma.dma_wait_send %send_sem, %work : !dma, !slot
    meshdma.dma_wait_recv %recv_sem, %next : !dma, !slot
  }
  memref.dealloc %scratch : memref<8x128xf32>
  return
}
