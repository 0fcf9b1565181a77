!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!bar = !meshdma.semaphore<barrier>
mesh.mesh @m(shape = 2x2) {meshdma.axes = ["x"]}
