!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
func.func @f() attributes {meshdma.axes = ["x"]} {
  return
}
