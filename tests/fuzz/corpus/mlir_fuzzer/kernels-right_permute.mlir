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

func.func @right_permute(%in: memref<8x128xf32>, %out: memref<8x128xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring,
                meshdma.entry_barrier = false, meshdma.collective_id = 0} {
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
  %send = meshdma.sem_alloc : !dma
  %recv = meshdma.sem_alloc : !dma
  func.call @handshake(%bar, %hs, %left, %right) : (!bar, !reg, i32, i32) -> ()
  meshdma.dma_start %in : memref<8x128xf32> -> %out : memref<8x128xf32>,
      recv %recv : !dma, send %send : !dma device(%right)
  meshdma.dma_wait_send %send, %in : !dma, memref<8x128xf32>
  meshdma.dma_wait_recv %recv, %out : !dma, memref<8x128xf32>
  return
}
