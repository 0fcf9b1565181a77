!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
mesh.mesh @ring(shape = ?) {meshdma.axes = ["x"]}
mesh.mesh @four(shape = 4) {meshdma.axes = ["x"]}

func.func @alloc_count() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : i32
  %me = meshdma.axis_index "x"
  %first = arith.cmpi eq, %me, %c0 : i32
  %a = meshdma.sem_alloc : !reg
  scf.if %first {
    %b = meshdma.sem_alloc : !reg
  }
  return
}

func.func @fewer_collectives(%a: memref<8xf32>, %b: memref<8xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : i32
  %me = meshdma.axis_index "x"
  %first = arith.cmpi eq, %me, %c0 : i32
  scf.if %first {
    meshdma.all_reduce sum %a, %b {axes = ["x"]} : memref<8xf32>, memref<8xf32>
  }
  return
}

func.func @div_zero() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %me = meshdma.axis_index "x"
  %q = arith.divsi %me, %me : i32
  return
}

func.func @negative() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %m1 = arith.constant -1 : i32
  %s = meshdma.sem_alloc : !reg
  meshdma.sem_signal %s, %m1 : !reg
  return
}

func.func @parallel() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1 : i32
  %s = meshdma.sem_alloc : !reg
  scf.parallel (%i) = (%c0) to (%c1) step (%c1) {
    meshdma.sem_signal %s, %one : !reg
    scf.reduce
  }
  return
}

func.func @switch() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %me = meshdma.axis_index "x"
  cf.switch %me : i32, [
    default: ^b1
  ]
^b1:
  return
}

func.func @fixed() attributes {meshdma.kernel, meshdma.mesh = @four} {
  return
}

func.func @barrier_deadlock() attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : i32
  %me = meshdma.axis_index "x"
  %first = arith.cmpi eq, %me, %c0 : i32
  scf.if %first {
    meshdma.device_barrier
  }
  return
}
