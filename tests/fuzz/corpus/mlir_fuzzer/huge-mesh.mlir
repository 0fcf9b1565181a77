mesh.mesh @m(shape = 4294967296x4294967296x4) {meshdma.axes = ["x", "y", "z"]}
func.func @k() attributes {meshdma.kernel, meshdma.mesh = @m} {
  return
}
