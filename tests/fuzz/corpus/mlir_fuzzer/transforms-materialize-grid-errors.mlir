!reg = !meshdma.semaphore<regular>
mesh.mesh @ring(shape = 2) {meshdma.axes = ["x"]}
func.func @k(%c: i1) attributes {meshdma.kernel, meshdma.mesh = @ring,
                                 meshdma.iteration_bounds = array<i64: 3>} {
  scf.if %c {
    %a = meshdma.sem_alloc : !reg
  }
  return
}
