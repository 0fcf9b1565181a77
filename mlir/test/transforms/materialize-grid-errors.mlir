// Grid kernels whose allocations are not at the top level are rejected.
// RUN: meshdma-opt %s --meshdma-materialize-grid -verify-diagnostics -o /dev/null
!reg = !meshdma.semaphore<regular>
mesh.mesh @ring(shape = 2) {meshdma.axes = ["x"]}
func.func @k(%c: i1) attributes {meshdma.kernel, meshdma.mesh = @ring,
                                 meshdma.iteration_bounds = array<i64: 3>} {
  scf.if %c {
    // expected-error @+1 {{allocations in a grid kernel must be at the top level of its body (they are made once per call)}}
    %a = meshdma.sem_alloc : !reg
  }
  return
}
