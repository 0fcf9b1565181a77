!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
mesh.mesh @ring(shape = ?) {meshdma.axes = ["x"]}
mesh.mesh @grid2(shape = 2x2) {meshdma.axes = ["x", "y"]}

func.func @shape(%a: memref<16xf32>, %b: memref<16xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c8 = arith.constant 8 : index
  %me = meshdma.axis_index "x"
  %mi = arith.index_cast %me : i32 to index
  %n = arith.addi %mi, %c8 : index
  %s = meshdma.sem_alloc : !dma
  %src = memref.subview %a[0] [8] [1] : memref<16xf32> to memref<8xf32, strided<[1]>>
  %dst = memref.subview %b[0] [%n] [1] : memref<16xf32> to memref<?xf32, strided<[1]>>
  %dstc = memref.cast %dst : memref<?xf32, strided<[1]>> to memref<?xf32, strided<[1]>>
  %srcc = memref.cast %src : memref<8xf32, strided<[1]>> to memref<?xf32, strided<[1]>>
  meshdma.dma_start %srcc : memref<?xf32, strided<[1]>> -> %dstc : memref<?xf32, strided<[1]>>, recv %s : !dma
  meshdma.dma_wait_recv %s, %srcc : !dma, memref<?xf32, strided<[1]>>
  return
}

func.func @local_target(%a: memref<16xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : i32
  %send = meshdma.sem_alloc : !dma
  %recv = meshdma.sem_alloc : !dma
  %t = memref.alloc() : memref<16xf32>
  meshdma.dma_start %a : memref<16xf32> -> %t : memref<16xf32>,
      recv %recv : !dma, send %send : !dma device(%c0)
  return
}

func.func @bounds(%a: memref<16xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %me = meshdma.axis_index "x"
  %mi = arith.index_cast %me : i32 to index
  %c4 = arith.constant 4 : index
  %o = arith.muli %mi, %c4 : index
  %o2 = arith.addi %o, %c4 : index
  %v = memref.subview %a[%o2] [4] [1] : memref<16xf32> to memref<4xf32, strided<[1], offset: ?>>
  return
}

func.func @collectives(%a: memref<8xf32>, %b: memref<8xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : i32
  %me = meshdma.axis_index "x"
  %first = arith.cmpi eq, %me, %c0 : i32
  scf.if %first {
    meshdma.all_reduce sum %a, %b {axes = ["x"]} : memref<8xf32>, memref<8xf32>
  } else {
    meshdma.all_reduce max %a, %b {axes = ["x"]} : memref<8xf32>, memref<8xf32>
  }
  return
}

func.func @grid() attributes {meshdma.kernel, meshdma.mesh = @ring,
                             meshdma.iteration_bounds = array<i64: 3, 2>} {
  %c1 = arith.constant 1 : i32
  %me = meshdma.axis_index "x"
  %n = meshdma.axis_size "x"
  %r = arith.addi %me, %c1 : i32
  %right = arith.remsi %r, %n : i32
  %sem = meshdma.sem_alloc : !reg
  %i = meshdma.program_id 0
  %j = meshdma.program_id 1
  %nj = meshdma.num_programs 1
  %k0 = arith.muli %i, %nj : index
  %k = arith.addi %k0, %j : index
  %k32 = arith.index_cast %k : index to i32
  %amount = arith.addi %k32, %c1 : i32
  meshdma.sem_signal %sem, %amount device(%right) : !reg
  %c5 = arith.constant 5 : index
  %last = arith.cmpi eq, %k, %c5 : index
  scf.if %last {
    %c21 = arith.constant 21 : i32
    meshdma.sem_wait %sem, %c21 : !reg
  }
  return
}
