!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @ring(shape = ?) {meshdma.axes = ["x"]}

func.func private @permute(%in: memref<64xf32>, %out: memref<64xf32>, %right: i32) {
  %send = meshdma.sem_alloc : !dma
  %recv = meshdma.sem_alloc : !dma
  meshdma.dma_start %in : memref<64xf32> -> %out : memref<64xf32>,
      recv %recv : !dma, send %send : !dma device(%right)
  meshdma.dma_wait_send %send, %in : !dma, memref<64xf32>
  meshdma.dma_wait_recv %recv, %out : !dma, memref<64xf32>
  return
}

func.func @single_round(%in: memref<64xf32>, %out: memref<64xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring,
                meshdma.entry_barrier = false, meshdma.collective_id = 0} {
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
  meshdma.sem_signal %bar, %c1 device(%left) : !bar
  meshdma.sem_signal %bar, %c1 device(%right) : !bar
  meshdma.sem_wait %bar, %c2 : !bar
  func.call @permute(%in, %out, %right) : (memref<64xf32>, memref<64xf32>, i32) -> ()
  return
}

func.func @with_entry_barrier(%in: memref<64xf32>, %out: memref<64xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c1 = arith.constant 1 : i32
  %me = meshdma.axis_index "x"
  %n = meshdma.axis_size "x"
  %r = arith.addi %me, %c1 : i32
  %right = arith.remsi %r, %n : i32
  func.call @permute(%in, %out, %right) : (memref<64xf32>, memref<64xf32>, i32) -> ()
  return
}

func.func @no_handshake(%in: memref<64xf32>, %out: memref<64xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring,
                meshdma.entry_barrier = false} {
  %c1 = arith.constant 1 : i32
  %me = meshdma.axis_index "x"
  %n = meshdma.axis_size "x"
  %r = arith.addi %me, %c1 : i32
  %right = arith.remsi %r, %n : i32
  func.call @permute(%in, %out, %right) : (memref<64xf32>, memref<64xf32>, i32) -> ()
  return
}
