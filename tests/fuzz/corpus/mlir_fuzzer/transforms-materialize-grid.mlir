!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
mesh.mesh @ring(shape = 2) {meshdma.axes = ["x"]}

func.func @k() attributes {meshdma.kernel, meshdma.mesh = @ring,
                           meshdma.iteration_bounds = array<i64: 3, 2>} {
  %c1 = arith.constant 1 : i32
  %a = meshdma.sem_alloc : !reg
  %i = meshdma.program_id 0
  %b = meshdma.sem_alloc : !dma
  %j = meshdma.program_id 1
  %i32 = arith.index_cast %i : index to i32
  %j32 = arith.index_cast %j : index to i32
  %n = meshdma.num_programs 1
  %n32 = arith.index_cast %n : index to i32
  meshdma.sem_signal %a, %c1 : !reg
  meshdma.sem_wait %a, %c1 : !reg
  return
}
