!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
func.func @k() attributes {meshdma.mesh = "m"} {
  return
}
