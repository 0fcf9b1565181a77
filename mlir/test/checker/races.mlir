// Data races the checker finds before a kernel runs, each next to the kernel
// that avoids it, which must be proved: a ring all-gather through one
// receive slot without flow control; the double-buffered ring psum without
// its capacity semaphore; a tree all-reduce sharing one receive semaphore
// across its rounds; a KV pipeline sharing one semaphore across layers; two
// devices DMA-ing into the same bytes of a third. A DMA wait that consumes
// part of a DMA is reported even when every count ends at 0.
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 kernel=gather_one_slot})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=GATHER
// RUN: meshdma-opt %s -o /dev/null \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 kernel=gather_flow})'
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 kernel=psum_no_capacity})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=PSUM
// RUN: sed s/@N@/4/ %S/../kernels/ring_psum.mlir | meshdma-opt -o /dev/null \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol)'
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 kernel=tree_shared_sem})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=TREE
// RUN: meshdma-opt %s -o /dev/null \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 kernel=tree_sem_per_round})'
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=kv_shared_sem})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=KV
// RUN: meshdma-opt %s -o /dev/null \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 kernel=kv_sem_per_layer})'
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=3 kernel=same_bytes})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=SAME
// RUN: meshdma-opt %s -o /dev/null \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=3 kernel=own_halves})'
// RUN: not meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=4 kernel=split_wait})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=SPLIT
!reg = !meshdma.semaphore<regular>
!dma = !meshdma.semaphore<dma>
!blk = memref<8x128xf32, strided<[128, 1], offset: ?>>
mesh.mesh @ring(shape = ?) {meshdma.axes = ["x"]}

// dst += src over an 8x128 block (code the checker skips: it reads src and
// dst and writes dst).
func.func private @accumulate(%dst: memref<8x128xf32>, %src: !blk) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c128 = arith.constant 128 : index
  scf.for %i = %c0 to %c8 step %c1 {
    scf.for %j = %c0 to %c128 step %c1 {
      %a = memref.load %dst[%i, %j] : memref<8x128xf32>
      %b = memref.load %src[%i, %j] : !blk
      %s = arith.addf %a, %b : f32
      memref.store %s, %dst[%i, %j] : memref<8x128xf32>
    }
  }
  return
}

// Ring all-gather through ONE receive slot: each step a device copies the
// block it holds into its output, passes it on from its output, and
// receives the next one into the slot. With `flow`, a device tells its left
// neighbour once it has copied the slot out, and waits for the same from its
// right neighbour before writing into that neighbour's slot.
func.func private @gather(%in: memref<8x128xf32>, %out: memref<4x8x128xf32>,
                          %flow: i1) {
  %c0 = arith.constant 0 : index
  %c1i = arith.constant 1 : index
  %c1 = arith.constant 1 : i32
  %me = meshdma.axis_index "x"
  %n = meshdma.axis_size "x"
  %r = arith.addi %me, %c1 : i32
  %right = arith.remsi %r, %n : i32
  %l0 = arith.addi %me, %n : i32
  %l1 = arith.subi %l0, %c1 : i32
  %left = arith.remsi %l1, %n : i32
  %copy = meshdma.sem_alloc : !dma
  %recv = meshdma.sem_alloc : !dma
  %send = meshdma.sem_alloc : !dma
  %ready = meshdma.sem_alloc : !reg
  %slot = meshdma.alloc : memref<8x128xf32>
  %mi = arith.index_cast %me : i32 to index
  %ni = arith.index_cast %n : i32 to index
  %own = memref.subview %out[%mi, 0, 0] [1, 8, 128] [1, 1, 1]
      : memref<4x8x128xf32> to !blk
  meshdma.dma_start %in : memref<8x128xf32> -> %own : !blk, recv %copy : !dma
  meshdma.dma_wait_recv %copy, %own : !dma, !blk
  meshdma.dma_start %in : memref<8x128xf32> -> %slot : memref<8x128xf32>,
      recv %recv : !dma, send %send : !dma device(%right)
  meshdma.dma_wait_send %send, %in : !dma, memref<8x128xf32>
  meshdma.dma_wait_recv %recv, %slot : !dma, memref<8x128xf32>
  %last = arith.subi %ni, %c1i : index
  scf.for %k = %c1i to %ni step %c1i {
    %a = arith.subi %mi, %k : index
    %b = arith.addi %a, %ni : index
    %s = arith.remsi %b, %ni : index
    %blk = memref.subview %out[%s, 0, 0] [1, 8, 128] [1, 1, 1]
        : memref<4x8x128xf32> to !blk
    // GATHER: races.mlir:[[@LINE+1]]:5: error: data race on device 1: bytes [0, 4096) of the buffer of 'meshdma.alloc' at line {{[0-9]+}} are written by the DMA device 0 starts at line {{[0-9]+}} (it may land until a wait observes it) and read by device 1 at line [[@LINE+1]]; nothing orders them: either a wait on device 1 that only the DMA of line {{[0-9]+}} can satisfy before line [[@LINE+1]], or a signal from device 1 after line [[@LINE+1]] awaited by device 0 before line {{[0-9]+}}, would
    memref.copy %slot, %blk : memref<8x128xf32> to !blk
    %more = arith.cmpi slt, %k, %last : index
    scf.if %more {
      scf.if %flow {
        meshdma.sem_signal %ready, %c1 device(%left) : !reg
        meshdma.sem_wait %ready, %c1 : !reg
      }
      meshdma.dma_start %blk : !blk -> %slot : memref<8x128xf32>,
          recv %recv : !dma, send %send : !dma device(%right)
      meshdma.dma_wait_send %send, %blk : !dma, !blk
      meshdma.dma_wait_recv %recv, %slot : !dma, memref<8x128xf32>
    }
  }
  return
}

func.func @gather_one_slot(%in: memref<8x128xf32>, %out: memref<4x8x128xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %false = arith.constant false
  func.call @gather(%in, %out, %false)
      : (memref<8x128xf32>, memref<4x8x128xf32>, i1) -> ()
  return
}

func.func @gather_flow(%in: memref<8x128xf32>, %out: memref<4x8x128xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %true = arith.constant true
  func.call @gather(%in, %out, %true)
      : (memref<8x128xf32>, memref<4x8x128xf32>, i1) -> ()
  return
}

// The tutorial's double-buffered ring psum (kernels/ring_psum.mlir) without
// its capacity semaphore: the left neighbour may run a step ahead and write
// the slot this device is still sending from.
func.func @psum_no_capacity(%x: memref<8x128xf32>, %o: memref<8x128xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c0 = arith.constant 0 : index
  %c1i = arith.constant 1 : index
  %c2i = arith.constant 2 : index
  %c1 = arith.constant 1 : i32
  %me = meshdma.axis_index "x"
  %n = meshdma.axis_size "x"
  %r = arith.addi %me, %c1 : i32
  %right = arith.remsi %r, %n : i32
  %copy_sem = meshdma.sem_alloc : !dma
  %recv_sem = meshdma.sem_alloc : !dma
  %send_sem = meshdma.sem_alloc : !dma
  %hbm = meshdma.alloc : memref<2x8x128xf32>
  %scratch = memref.alloc() : memref<8x128xf32>
  memref.copy %x, %o : memref<8x128xf32> to memref<8x128xf32>
  %w0 = memref.subview %hbm[%c0, 0, 0] [1, 8, 128] [1, 1, 1]
      : memref<2x8x128xf32> to !blk
  meshdma.dma_start %x : memref<8x128xf32> -> %w0 : !blk,
      recv %recv_sem : !dma, send %send_sem : !dma device(%right)
  meshdma.dma_wait_send %send_sem, %x : !dma, memref<8x128xf32>
  meshdma.dma_wait_recv %recv_sem, %w0 : !dma, !blk
  %ni = arith.index_cast %n : i32 to index
  %steps = arith.subi %ni, %c1i : index
  scf.for %k = %c0 to %steps step %c1i {
    %ws = arith.remsi %k, %c2i : index
    %rs = arith.subi %c1i, %ws : index
    %work = memref.subview %hbm[%ws, 0, 0] [1, 8, 128] [1, 1, 1]
        : memref<2x8x128xf32> to !blk
    %next = memref.subview %hbm[%rs, 0, 0] [1, 8, 128] [1, 1, 1]
        : memref<2x8x128xf32> to !blk
    // PSUM: races.mlir:[[@LINE+1]]:5: error: data race on device 2: bytes [0, 4096) of the buffer of 'meshdma.alloc' at line {{[0-9]+}} are written by the DMA device 1 starts at line {{[0-9]+}} (it may land until a wait observes it) and read by the DMA device 2 starts at line [[@LINE+1]] (until a wait observes it); nothing orders them: either a wait on device 2 that only the DMA of line {{[0-9]+}} can satisfy before line [[@LINE+1]], or a dma_wait_send on device 2 for the DMA of line [[@LINE+1]], then a signal awaited by device 1 before line {{[0-9]+}}, would
    meshdma.dma_start %work : !blk -> %scratch : memref<8x128xf32>,
        recv %copy_sem : !dma
    meshdma.dma_start %work : !blk -> %next : !blk,
        recv %recv_sem : !dma, send %send_sem : !dma device(%right)
    meshdma.dma_wait_recv %copy_sem, %scratch : !dma, memref<8x128xf32>
    %s = memref.cast %scratch : memref<8x128xf32> to !blk
    func.call @accumulate(%o, %s) : (memref<8x128xf32>, !blk) -> ()
    meshdma.dma_wait_send %send_sem, %work : !dma, !blk
    meshdma.dma_wait_recv %recv_sem, %next : !dma, !blk
  }
  return
}

// Recursive doubling over 4 devices: round r exchanges with device
// me xor 2^r into inbox slot r. With one receive semaphore for both rounds,
// the round-1 partner's DMA can satisfy the round-0 wait.
func.func private @exchange(%o: memref<8x128xf32>, %inbox: !blk, %peer: i32,
                            %recv: !dma, %send: !dma) {
  meshdma.dma_start %o : memref<8x128xf32> -> %inbox : !blk,
      recv %recv : !dma, send %send : !dma device(%peer)
  meshdma.dma_wait_send %send, %o : !dma, memref<8x128xf32>
  meshdma.dma_wait_recv %recv, %inbox : !dma, !blk
  // TREE: races.mlir:[[@LINE+1]]:3: error: data race on device 1: bytes [0, 4096) of the buffer of 'meshdma.alloc' at line {{[0-9]+}} are written by the DMA device 0 starts at line {{[0-9]+}} (it may land until a wait observes it) and read by device 1 at line [[@LINE+1]]; nothing orders them: either a wait on device 1 that only the DMA of line {{[0-9]+}} can satisfy before line [[@LINE+1]]
  func.call @accumulate(%o, %inbox) : (memref<8x128xf32>, !blk) -> ()
  return
}
func.func private @tree(%x: memref<8x128xf32>, %o: memref<8x128xf32>,
                        %recv0: !dma, %recv1: !dma) {
  %c0 = arith.constant 0 : index
  %c1i = arith.constant 1 : index
  %c1 = arith.constant 1 : i32
  %c2 = arith.constant 2 : i32
  %me = meshdma.device_id
  %send = meshdma.sem_alloc : !dma
  %inbox = meshdma.alloc : memref<2x8x128xf32>
  %in0 = memref.subview %inbox[%c0, 0, 0] [1, 8, 128] [1, 1, 1]
      : memref<2x8x128xf32> to !blk
  %in1 = memref.subview %inbox[%c1i, 0, 0] [1, 8, 128] [1, 1, 1]
      : memref<2x8x128xf32> to !blk
  memref.copy %x, %o : memref<8x128xf32> to memref<8x128xf32>
  %p0 = arith.xori %me, %c1 : i32
  func.call @exchange(%o, %in0, %p0, %recv0, %send)
      : (memref<8x128xf32>, !blk, i32, !dma, !dma) -> ()
  %p1 = arith.xori %me, %c2 : i32
  func.call @exchange(%o, %in1, %p1, %recv1, %send)
      : (memref<8x128xf32>, !blk, i32, !dma, !dma) -> ()
  return
}
func.func @tree_shared_sem(%x: memref<8x128xf32>, %o: memref<8x128xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %recv = meshdma.sem_alloc : !dma
  func.call @tree(%x, %o, %recv, %recv)
      : (memref<8x128xf32>, memref<8x128xf32>, !dma, !dma) -> ()
  return
}
func.func @tree_sem_per_round(%x: memref<8x128xf32>, %o: memref<8x128xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %recv0 = meshdma.sem_alloc : !dma
  %recv1 = meshdma.sem_alloc : !dma
  func.call @tree(%x, %o, %recv0, %recv1)
      : (memref<8x128xf32>, memref<8x128xf32>, !dma, !dma) -> ()
  return
}

// A KV pipeline over 2 devices: device 0 streams three layers' KV blocks
// into device 1's cache, which attends to each layer once it has arrived.
// With one semaphore for all layers, the wait for layer 0 can be satisfied
// by layer 1's DMA.
func.func private @kv(%kv: memref<3x8x128xf32>, %o: memref<8x128xf32>,
                      %s0: !dma, %s1: !dma, %s2: !dma) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c1i = arith.constant 1 : i32
  %me = meshdma.device_id
  %send = meshdma.sem_alloc : !dma
  %cache = meshdma.alloc : memref<3x8x128xf32>
  %k0 = memref.subview %kv[%c0, 0, 0] [1, 8, 128] [1, 1, 1]
      : memref<3x8x128xf32> to !blk
  %k1 = memref.subview %kv[%c1, 0, 0] [1, 8, 128] [1, 1, 1]
      : memref<3x8x128xf32> to !blk
  %k2 = memref.subview %kv[%c2, 0, 0] [1, 8, 128] [1, 1, 1]
      : memref<3x8x128xf32> to !blk
  %l0 = memref.subview %cache[%c0, 0, 0] [1, 8, 128] [1, 1, 1]
      : memref<3x8x128xf32> to !blk
  %l1 = memref.subview %cache[%c1, 0, 0] [1, 8, 128] [1, 1, 1]
      : memref<3x8x128xf32> to !blk
  %l2 = memref.subview %cache[%c2, 0, 0] [1, 8, 128] [1, 1, 1]
      : memref<3x8x128xf32> to !blk
  %c0i = arith.constant 0 : i32
  %prefill = arith.cmpi eq, %me, %c0i : i32
  scf.if %prefill {
    meshdma.dma_start %k0 : !blk -> %l0 : !blk,
        recv %s0 : !dma, send %send : !dma device(%c1i)
    meshdma.dma_start %k1 : !blk -> %l1 : !blk,
        recv %s1 : !dma, send %send : !dma device(%c1i)
    meshdma.dma_start %k2 : !blk -> %l2 : !blk,
        recv %s2 : !dma, send %send : !dma device(%c1i)
    meshdma.dma_wait_send %send, %k0 : !dma, !blk
    meshdma.dma_wait_send %send, %k1 : !dma, !blk
    meshdma.dma_wait_send %send, %k2 : !dma, !blk
  } else {
    meshdma.dma_wait_recv %s0, %l0 : !dma, !blk
    // KV: races.mlir:[[@LINE+1]]:5: error: data race on device 1: bytes [0, 4096) of the buffer of 'meshdma.alloc' at line {{[0-9]+}} are written by the DMA device 0 starts at line {{[0-9]+}} (it may land until a wait observes it) and read by device 1 at line [[@LINE+1]]; nothing orders them: either a wait on device 1 that only the DMA of line {{[0-9]+}} can satisfy before line [[@LINE+1]]
    func.call @accumulate(%o, %l0) : (memref<8x128xf32>, !blk) -> ()
    meshdma.dma_wait_recv %s1, %l1 : !dma, !blk
    func.call @accumulate(%o, %l1) : (memref<8x128xf32>, !blk) -> ()
    meshdma.dma_wait_recv %s2, %l2 : !dma, !blk
    func.call @accumulate(%o, %l2) : (memref<8x128xf32>, !blk) -> ()
  }
  return
}
func.func @kv_shared_sem(%kv: memref<3x8x128xf32>, %o: memref<8x128xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %s = meshdma.sem_alloc : !dma
  func.call @kv(%kv, %o, %s, %s, %s)
      : (memref<3x8x128xf32>, memref<8x128xf32>, !dma, !dma, !dma) -> ()
  return
}
func.func @kv_sem_per_layer(%kv: memref<3x8x128xf32>, %o: memref<8x128xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %s0 = meshdma.sem_alloc : !dma
  %s1 = meshdma.sem_alloc : !dma
  %s2 = meshdma.sem_alloc : !dma
  func.call @kv(%kv, %o, %s0, %s1, %s2)
      : (memref<3x8x128xf32>, memref<8x128xf32>, !dma, !dma, !dma) -> ()
  return
}

// Devices 0 and 1 push their input into device 2's `dst`: into the same
// bytes, or (with `halves`) each into its own half.
func.func private @two_writers(%in: memref<4x128xf32>, %dst: memref<8x128xf32>,
                               %halves: i1) {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c2 = arith.constant 2 : i32
  %me = meshdma.device_id
  %recv = meshdma.sem_alloc : !dma
  %send = meshdma.sem_alloc : !dma
  %writer = arith.cmpi slt, %me, %c2 : i32
  scf.if %writer {
    %mi = arith.index_cast %me : i32 to index
    %row0 = arith.muli %mi, %c4 : index
    %row = arith.select %halves, %row0, %c0 : index
    %part = memref.subview %dst[%row, 0] [4, 128] [1, 1]
        : memref<8x128xf32> to memref<4x128xf32, strided<[128, 1], offset: ?>>
    // SAME: races.mlir:[[@LINE+1]]:5: error: data race on device 2: bytes [0, 2048) of kernel argument #1 are written by the DMA device 0 starts at line [[@LINE+1]] (it may land until a wait observes it) and written by the DMA device 1 starts at line [[@LINE+1]] (it may land until a wait observes it); nothing orders them: either a wait on device 2 that only the DMA of line [[@LINE+1]] can satisfy, then a signal awaited by device 1 before line [[@LINE+1]], or a wait on device 2 that only the DMA of line [[@LINE+1]] can satisfy, then a signal awaited by device 0 before line [[@LINE+1]], would
    meshdma.dma_start %in : memref<4x128xf32>
        -> %part : memref<4x128xf32, strided<[128, 1], offset: ?>>,
        recv %recv : !dma, send %send : !dma device(%c2)
    meshdma.dma_wait_send %send, %in : !dma, memref<4x128xf32>
  } else {
    %all = memref.subview %dst[0, 0] [8, 128] [1, 1]
        : memref<8x128xf32> to memref<8x128xf32, strided<[128, 1]>>
    meshdma.dma_wait_recv %recv, %all
        : !dma, memref<8x128xf32, strided<[128, 1]>>
  }
  return
}
func.func @same_bytes(%in: memref<4x128xf32>, %dst: memref<8x128xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %false = arith.constant false
  func.call @two_writers(%in, %dst, %false)
      : (memref<4x128xf32>, memref<8x128xf32>, i1) -> ()
  return
}
func.func @own_halves(%in: memref<4x128xf32>, %dst: memref<8x128xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %true = arith.constant true
  func.call @two_writers(%in, %dst, %true)
      : (memref<4x128xf32>, memref<8x128xf32>, i1) -> ()
  return
}

// A 4096-byte DMA received by two waits of 2048 bytes: the semaphore ends at
// 0, but the first wait does not tell which bytes have landed.
func.func @split_wait(%in: memref<8x128xf32>, %out: memref<8x128xf32>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  %c1 = arith.constant 1 : i32
  %me = meshdma.axis_index "x"
  %n = meshdma.axis_size "x"
  %r = arith.addi %me, %c1 : i32
  %right = arith.remsi %r, %n : i32
  %send = meshdma.sem_alloc : !dma
  %recv = meshdma.sem_alloc : !dma
  meshdma.dma_start %in : memref<8x128xf32> -> %out : memref<8x128xf32>,
      recv %recv : !dma, send %send : !dma device(%right)
  meshdma.dma_wait_send %send, %in : !dma, memref<8x128xf32>
  %half = memref.subview %out[0, 0] [4, 128] [1, 1]
      : memref<8x128xf32> to memref<4x128xf32, strided<[128, 1]>>
  // SPLIT: races.mlir:[[@LINE+2]]:3: error: DMA size mismatch: on device 0 this wait of 2048 bytes consumed part of a 4096-byte DMA from device 3 (a DMA wait must take whole DMAs: it cannot tell which bytes have landed)
  // SPLIT: note: the DMA starts here
  meshdma.dma_wait_recv %recv, %half : !dma, memref<4x128xf32, strided<[128, 1]>>
  meshdma.dma_wait_recv %recv, %half : !dma, memref<4x128xf32, strided<[128, 1]>>
  return
}
