// Every integer op the checker evaluates, at several widths, against values
// computed independently: each case k compares an op's result with the
// expected value and, on a mismatch, stores -1 into element k of the output
// and signals device 1000 + k (off the mesh). The checker must prove the
// kernel (it evaluates every case as expected), and the JIT must lower every
// op and compute the same values (registered as mlir.jit.int_ops.*: the
// output must equal the input, `--reference=shift:0`). 84 cases.
// RUN: meshdma-opt %s --mlir-print-op-on-diagnostic=false \
// RUN:   --pass-pipeline='builtin.module(meshdma-verify-protocol{mesh-shape=2 stats=true})' \
// RUN:   -o /dev/null 2>&1 | FileCheck %s
// CHECK: remark: protocol verified: 2 devices, 2 events,
// CHECK-NOT: error
// RUN: meshdma-opt %s --pass-pipeline='builtin.module(meshdma-lower-to-llvm)' \
// RUN:   -o /dev/null
!reg = !meshdma.semaphore<regular>
mesh.mesh @ring(shape = ?) {meshdma.axes = ["x"]}

// On a mismatch: the case's output element becomes -1 and device 1000 + k
// is signalled (off the mesh for the checker and at run time).
func.func private @expect(%ok: i1, %k: index, %out: memref<128xi64>, %sem: !reg) {
  %bad = arith.constant -1 : i64
  %one = arith.constant 1 : i32
  %base = arith.constant 1000 : index
  scf.if %ok {
  } else {
    memref.store %bad, %out[%k] : memref<128xi64>
    %id = arith.addi %base, %k : index
    %id32 = arith.index_cast %id : index to i32
    meshdma.sem_signal %sem, %one device(%id32) : !reg
  }
  return
}

func.func @int_ops(%in: memref<128xi64>, %out: memref<128xi64>)
    attributes {meshdma.kernel, meshdma.mesh = @ring} {
  memref.copy %in, %out : memref<128xi64> to memref<128xi64>
  %sem = meshdma.sem_alloc : !reg
  %i8_127 = arith.constant 127 : i8
  %i8_1 = arith.constant 1 : i8
  %i8_m128 = arith.constant -128 : i8
  %index_0 = arith.constant 0 : index
  %index_1 = arith.constant 1 : index
  %i16_300 = arith.constant 300 : i16
  %i16_24464 = arith.constant 24464 : i16
  %index_2 = arith.constant 2 : index
  %i32_m7 = arith.constant -7 : i32
  %i32_2 = arith.constant 2 : i32
  %i32_m3 = arith.constant -3 : i32
  %index_3 = arith.constant 3 : index
  %i32_2147483644 = arith.constant 2147483644 : i32
  %index_4 = arith.constant 4 : index
  %i32_m1 = arith.constant -1 : i32
  %index_5 = arith.constant 5 : index
  %i32_1 = arith.constant 1 : i32
  %index_6 = arith.constant 6 : index
  %index_7 = arith.constant 7 : index
  %i32_7 = arith.constant 7 : i32
  %i32_4 = arith.constant 4 : i32
  %index_8 = arith.constant 8 : index
  %i32_m2 = arith.constant -2 : i32
  %index_9 = arith.constant 9 : index
  %index_10 = arith.constant 10 : index
  %i8_m1 = arith.constant -1 : i8
  %i8_2 = arith.constant 2 : i8
  %index_11 = arith.constant 11 : index
  %i32_m4 = arith.constant -4 : i32
  %index_12 = arith.constant 12 : index
  %index_13 = arith.constant 13 : index
  %i64_7 = arith.constant 7 : i64
  %i64_2 = arith.constant 2 : i64
  %i64_3 = arith.constant 3 : i64
  %index_14 = arith.constant 14 : index
  %i8_12 = arith.constant 12 : i8
  %index_15 = arith.constant 15 : index
  %i8_m127 = arith.constant -127 : i8
  %index_16 = arith.constant 16 : index
  %i8_m2 = arith.constant -2 : i8
  %index_17 = arith.constant 17 : index
  %i8_7 = arith.constant 7 : i8
  %index_18 = arith.constant 18 : index
  %index_19 = arith.constant 19 : index
  %index_20 = arith.constant 20 : index
  %i32_28 = arith.constant 28 : i32
  %i32_15 = arith.constant 15 : i32
  %index_21 = arith.constant 21 : index
  %index_22 = arith.constant 22 : index
  %index_23 = arith.constant 23 : index
  %index_24 = arith.constant 24 : index
  %index_25 = arith.constant 25 : index
  %index_1099511627776 = arith.constant 1099511627776 : index
  %index_1099511627779 = arith.constant 1099511627779 : index
  %index_26 = arith.constant 26 : index
  %i1_1 = arith.constant true
  %index_27 = arith.constant 27 : index
  %index_28 = arith.constant 28 : index
  %i32_m128 = arith.constant -128 : i32
  %index_29 = arith.constant 29 : index
  %i32_255 = arith.constant 255 : i32
  %index_30 = arith.constant 30 : index
  %i64_m1 = arith.constant -1 : i64
  %index_31 = arith.constant 31 : index
  %i64_4294967295 = arith.constant 4294967295 : i64
  %index_32 = arith.constant 32 : index
  %i32_300 = arith.constant 300 : i32
  %i8_44 = arith.constant 44 : i8
  %index_33 = arith.constant 33 : index
  %i32_200 = arith.constant 200 : i32
  %i8_m56 = arith.constant -56 : i8
  %index_34 = arith.constant 34 : index
  %i64_4294967301 = arith.constant 4294967301 : i64
  %i32_5 = arith.constant 5 : i32
  %index_35 = arith.constant 35 : index
  %i8_3 = arith.constant 3 : i8
  %index_36 = arith.constant 36 : index
  %index_m1 = arith.constant -1 : index
  %index_37 = arith.constant 37 : index
  %index_4294967295 = arith.constant 4294967295 : index
  %index_38 = arith.constant 38 : index
  %index_4294967301 = arith.constant 4294967301 : index
  %index_39 = arith.constant 39 : index
  %i1_0 = arith.constant false
  %index_40 = arith.constant 40 : index
  %index_41 = arith.constant 41 : index
  %index_42 = arith.constant 42 : index
  %index_43 = arith.constant 43 : index
  %index_44 = arith.constant 44 : index
  %index_45 = arith.constant 45 : index
  %index_46 = arith.constant 46 : index
  %index_47 = arith.constant 47 : index
  %index_48 = arith.constant 48 : index
  %index_49 = arith.constant 49 : index
  %i32_3 = arith.constant 3 : i32
  %index_50 = arith.constant 50 : index
  %index_m7 = arith.constant -7 : index
  %index_m2 = arith.constant -2 : index
  %index_51 = arith.constant 51 : index
  %index_52 = arith.constant 52 : index
  %index_m42 = arith.constant -42 : index
  %index_53 = arith.constant 53 : index
  %index_m3 = arith.constant -3 : index
  %index_54 = arith.constant 54 : index
  %index_55 = arith.constant 55 : index
  %index_56 = arith.constant 56 : index
  %index_57 = arith.constant 57 : index
  %index_58 = arith.constant 58 : index
  %index_59 = arith.constant 59 : index
  %index_60 = arith.constant 60 : index
  %index_m4 = arith.constant -4 : index
  %index_61 = arith.constant 61 : index
  %index_62 = arith.constant 62 : index
  %index_m64 = arith.constant -64 : index
  %index_m8 = arith.constant -8 : index
  %index_63 = arith.constant 63 : index
  %index_64 = arith.constant 64 : index
  %index_65 = arith.constant 65 : index
  %index_66 = arith.constant 66 : index
  %index_67 = arith.constant 67 : index
  %index_68 = arith.constant 68 : index
  %index_69 = arith.constant 69 : index
  %index_70 = arith.constant 70 : index
  %index_71 = arith.constant 71 : index
  %index_72 = arith.constant 72 : index
  %index_73 = arith.constant 73 : index
  %index_300 = arith.constant 300 : index
  %index_74 = arith.constant 74 : index
  %index_75 = arith.constant 75 : index
  %index_76 = arith.constant 76 : index
  %index_77 = arith.constant 77 : index
  %index_78 = arith.constant 78 : index
  %i8_m5 = arith.constant -5 : i8
  %i8_5 = arith.constant 5 : i8
  %index_79 = arith.constant 79 : index
  %i32_31 = arith.constant 31 : i32
  %index_80 = arith.constant 80 : index
  %i32_0 = arith.constant 0 : i32
  %i32_32 = arith.constant 32 : i32
  %index_81 = arith.constant 81 : index
  %i32_8 = arith.constant 8 : i32
  %index_82 = arith.constant 82 : index
  %i8_8 = arith.constant 8 : i8
  %index_83 = arith.constant 83 : index
  // case 0
  %r0 = arith.addi %i8_127, %i8_1 : i8
  %ok0 = arith.cmpi eq, %r0, %i8_m128 : i8
  func.call @expect(%ok0, %index_0, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 1
  %r1 = arith.subi %i8_m128, %i8_1 : i8
  %ok1 = arith.cmpi eq, %r1, %i8_127 : i8
  func.call @expect(%ok1, %index_1, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 2
  %r2 = arith.muli %i16_300, %i16_300 : i16
  %ok2 = arith.cmpi eq, %r2, %i16_24464 : i16
  func.call @expect(%ok2, %index_2, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 3
  %r3 = arith.divsi %i32_m7, %i32_2 : i32
  %ok3 = arith.cmpi eq, %r3, %i32_m3 : i32
  func.call @expect(%ok3, %index_3, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 4
  %r4 = arith.divui %i32_m7, %i32_2 : i32
  %ok4 = arith.cmpi eq, %r4, %i32_2147483644 : i32
  func.call @expect(%ok4, %index_4, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 5
  %r5 = arith.remsi %i32_m7, %i32_2 : i32
  %ok5 = arith.cmpi eq, %r5, %i32_m1 : i32
  func.call @expect(%ok5, %index_5, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 6
  %r6 = arith.remui %i32_m7, %i32_2 : i32
  %ok6 = arith.cmpi eq, %r6, %i32_1 : i32
  func.call @expect(%ok6, %index_6, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 7
  %r7 = arith.ceildivsi %i32_m7, %i32_2 : i32
  %ok7 = arith.cmpi eq, %r7, %i32_m3 : i32
  func.call @expect(%ok7, %index_7, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 8
  %r8 = arith.ceildivsi %i32_7, %i32_2 : i32
  %ok8 = arith.cmpi eq, %r8, %i32_4 : i32
  func.call @expect(%ok8, %index_8, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 9
  %r9 = arith.ceildivsi %i32_7, %i32_m2 : i32
  %ok9 = arith.cmpi eq, %r9, %i32_m3 : i32
  func.call @expect(%ok9, %index_9, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 10
  %r10 = arith.ceildivui %i32_7, %i32_2 : i32
  %ok10 = arith.cmpi eq, %r10, %i32_4 : i32
  func.call @expect(%ok10, %index_10, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 11
  %r11 = arith.ceildivui %i8_m1, %i8_2 : i8
  %ok11 = arith.cmpi eq, %r11, %i8_m128 : i8
  func.call @expect(%ok11, %index_11, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 12
  %r12 = arith.floordivsi %i32_m7, %i32_2 : i32
  %ok12 = arith.cmpi eq, %r12, %i32_m4 : i32
  func.call @expect(%ok12, %index_12, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 13
  %r13 = arith.floordivsi %i32_7, %i32_m2 : i32
  %ok13 = arith.cmpi eq, %r13, %i32_m4 : i32
  func.call @expect(%ok13, %index_13, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 14
  %r14 = arith.floordivsi %i64_7, %i64_2 : i64
  %ok14 = arith.cmpi eq, %r14, %i64_3 : i64
  func.call @expect(%ok14, %index_14, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 15
  %r15 = arith.andi %i8_m1, %i8_12 : i8
  %ok15 = arith.cmpi eq, %r15, %i8_12 : i8
  func.call @expect(%ok15, %index_15, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 16
  %r16 = arith.ori %i8_m128, %i8_1 : i8
  %ok16 = arith.cmpi eq, %r16, %i8_m127 : i8
  func.call @expect(%ok16, %index_16, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 17
  %r17 = arith.xori %i8_m1, %i8_1 : i8
  %ok17 = arith.cmpi eq, %r17, %i8_m2 : i8
  func.call @expect(%ok17, %index_17, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 18
  %r18 = arith.shli %i8_1, %i8_7 : i8
  %ok18 = arith.cmpi eq, %r18, %i8_m128 : i8
  func.call @expect(%ok18, %index_18, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 19
  %r19 = arith.shrsi %i8_m128, %i8_7 : i8
  %ok19 = arith.cmpi eq, %r19, %i8_m1 : i8
  func.call @expect(%ok19, %index_19, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 20
  %r20 = arith.shrui %i8_m128, %i8_7 : i8
  %ok20 = arith.cmpi eq, %r20, %i8_1 : i8
  func.call @expect(%ok20, %index_20, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 21
  %r21 = arith.shrui %i32_m1, %i32_28 : i32
  %ok21 = arith.cmpi eq, %r21, %i32_15 : i32
  func.call @expect(%ok21, %index_21, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 22
  %r22 = arith.maxsi %i8_m1, %i8_1 : i8
  %ok22 = arith.cmpi eq, %r22, %i8_1 : i8
  func.call @expect(%ok22, %index_22, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 23
  %r23 = arith.maxui %i8_m1, %i8_1 : i8
  %ok23 = arith.cmpi eq, %r23, %i8_m1 : i8
  func.call @expect(%ok23, %index_23, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 24
  %r24 = arith.minsi %i8_m1, %i8_1 : i8
  %ok24 = arith.cmpi eq, %r24, %i8_m1 : i8
  func.call @expect(%ok24, %index_24, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 25
  %r25 = arith.minui %i8_m1, %i8_1 : i8
  %ok25 = arith.cmpi eq, %r25, %i8_1 : i8
  func.call @expect(%ok25, %index_25, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 26
  %r26 = arith.addi %index_1099511627776, %index_3 : index
  %ok26 = arith.cmpi eq, %r26, %index_1099511627779 : index
  func.call @expect(%ok26, %index_26, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 27
  %r27 = arith.extsi %i1_1 : i1 to i32
  %ok27 = arith.cmpi eq, %r27, %i32_m1 : i32
  func.call @expect(%ok27, %index_27, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 28
  %r28 = arith.extui %i1_1 : i1 to i32
  %ok28 = arith.cmpi eq, %r28, %i32_1 : i32
  func.call @expect(%ok28, %index_28, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 29
  %r29 = arith.extsi %i8_m128 : i8 to i32
  %ok29 = arith.cmpi eq, %r29, %i32_m128 : i32
  func.call @expect(%ok29, %index_29, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 30
  %r30 = arith.extui %i8_m1 : i8 to i32
  %ok30 = arith.cmpi eq, %r30, %i32_255 : i32
  func.call @expect(%ok30, %index_30, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 31
  %r31 = arith.extsi %i32_m1 : i32 to i64
  %ok31 = arith.cmpi eq, %r31, %i64_m1 : i64
  func.call @expect(%ok31, %index_31, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 32
  %r32 = arith.extui %i32_m1 : i32 to i64
  %ok32 = arith.cmpi eq, %r32, %i64_4294967295 : i64
  func.call @expect(%ok32, %index_32, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 33
  %r33 = arith.trunci %i32_300 : i32 to i8
  %ok33 = arith.cmpi eq, %r33, %i8_44 : i8
  func.call @expect(%ok33, %index_33, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 34
  %r34 = arith.trunci %i32_200 : i32 to i8
  %ok34 = arith.cmpi eq, %r34, %i8_m56 : i8
  func.call @expect(%ok34, %index_34, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 35
  %r35 = arith.trunci %i64_4294967301 : i64 to i32
  %ok35 = arith.cmpi eq, %r35, %i32_5 : i32
  func.call @expect(%ok35, %index_35, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 36
  %r36 = arith.trunci %i8_3 : i8 to i1
  %ok36 = arith.cmpi eq, %r36, %i1_1 : i1
  func.call @expect(%ok36, %index_36, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 37
  %r37 = arith.index_cast %i32_m1 : i32 to index
  %ok37 = arith.cmpi eq, %r37, %index_m1 : index
  func.call @expect(%ok37, %index_37, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 38
  %r38 = arith.index_castui %i32_m1 : i32 to index
  %ok38 = arith.cmpi eq, %r38, %index_4294967295 : index
  func.call @expect(%ok38, %index_38, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 39
  %r39 = arith.index_cast %index_4294967301 : index to i32
  %ok39 = arith.cmpi eq, %r39, %i32_5 : i32
  func.call @expect(%ok39, %index_39, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 40
  %r40 = arith.cmpi eq, %i8_m1, %i8_1 : i8
  %ok40 = arith.cmpi eq, %r40, %i1_0 : i1
  func.call @expect(%ok40, %index_40, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 41
  %r41 = arith.cmpi ne, %i8_m1, %i8_1 : i8
  %ok41 = arith.cmpi eq, %r41, %i1_1 : i1
  func.call @expect(%ok41, %index_41, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 42
  %r42 = arith.cmpi slt, %i8_m1, %i8_1 : i8
  %ok42 = arith.cmpi eq, %r42, %i1_1 : i1
  func.call @expect(%ok42, %index_42, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 43
  %r43 = arith.cmpi sle, %i8_m1, %i8_1 : i8
  %ok43 = arith.cmpi eq, %r43, %i1_1 : i1
  func.call @expect(%ok43, %index_43, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 44
  %r44 = arith.cmpi sgt, %i8_m1, %i8_1 : i8
  %ok44 = arith.cmpi eq, %r44, %i1_0 : i1
  func.call @expect(%ok44, %index_44, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 45
  %r45 = arith.cmpi sge, %i8_m1, %i8_1 : i8
  %ok45 = arith.cmpi eq, %r45, %i1_0 : i1
  func.call @expect(%ok45, %index_45, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 46
  %r46 = arith.cmpi ult, %i8_m1, %i8_1 : i8
  %ok46 = arith.cmpi eq, %r46, %i1_0 : i1
  func.call @expect(%ok46, %index_46, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 47
  %r47 = arith.cmpi ule, %i8_m1, %i8_1 : i8
  %ok47 = arith.cmpi eq, %r47, %i1_0 : i1
  func.call @expect(%ok47, %index_47, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 48
  %r48 = arith.cmpi ugt, %i8_m1, %i8_1 : i8
  %ok48 = arith.cmpi eq, %r48, %i1_1 : i1
  func.call @expect(%ok48, %index_48, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 49
  %r49 = arith.cmpi uge, %i8_m1, %i8_1 : i8
  %ok49 = arith.cmpi eq, %r49, %i1_1 : i1
  func.call @expect(%ok49, %index_49, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 50
  %r50 = arith.select %i1_1, %i32_3, %i32_4 : i32
  %ok50 = arith.cmpi eq, %r50, %i32_3 : i32
  func.call @expect(%ok50, %index_50, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 51
  %r51 = index.add %index_5, %index_m7
  %ok51 = arith.cmpi eq, %r51, %index_m2 : index
  func.call @expect(%ok51, %index_51, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 52
  %r52 = index.sub %index_5, %index_7
  %ok52 = arith.cmpi eq, %r52, %index_m2 : index
  func.call @expect(%ok52, %index_52, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 53
  %r53 = index.mul %index_6, %index_m7
  %ok53 = arith.cmpi eq, %r53, %index_m42 : index
  func.call @expect(%ok53, %index_53, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 54
  %r54 = index.divs %index_m7, %index_2
  %ok54 = arith.cmpi eq, %r54, %index_m3 : index
  func.call @expect(%ok54, %index_54, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 55
  %r55 = index.divu %index_7, %index_2
  %ok55 = arith.cmpi eq, %r55, %index_3 : index
  func.call @expect(%ok55, %index_55, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 56
  %r56 = index.rems %index_m7, %index_2
  %ok56 = arith.cmpi eq, %r56, %index_m1 : index
  func.call @expect(%ok56, %index_56, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 57
  %r57 = index.remu %index_7, %index_2
  %ok57 = arith.cmpi eq, %r57, %index_1 : index
  func.call @expect(%ok57, %index_57, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 58
  %r58 = index.ceildivs %index_m7, %index_2
  %ok58 = arith.cmpi eq, %r58, %index_m3 : index
  func.call @expect(%ok58, %index_58, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 59
  %r59 = index.ceildivs %index_7, %index_2
  %ok59 = arith.cmpi eq, %r59, %index_4 : index
  func.call @expect(%ok59, %index_59, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 60
  %r60 = index.ceildivu %index_7, %index_2
  %ok60 = arith.cmpi eq, %r60, %index_4 : index
  func.call @expect(%ok60, %index_60, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 61
  %r61 = index.floordivs %index_m7, %index_2
  %ok61 = arith.cmpi eq, %r61, %index_m4 : index
  func.call @expect(%ok61, %index_61, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 62
  %r62 = index.shl %index_1, %index_5
  %ok62 = arith.cmpi eq, %r62, %index_32 : index
  func.call @expect(%ok62, %index_62, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 63
  %r63 = index.shrs %index_m64, %index_3
  %ok63 = arith.cmpi eq, %r63, %index_m8 : index
  func.call @expect(%ok63, %index_63, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 64
  %r64 = index.shru %index_64, %index_3
  %ok64 = arith.cmpi eq, %r64, %index_8 : index
  func.call @expect(%ok64, %index_64, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 65
  %r65 = index.and %index_12, %index_10
  %ok65 = arith.cmpi eq, %r65, %index_8 : index
  func.call @expect(%ok65, %index_65, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 66
  %r66 = index.or %index_12, %index_10
  %ok66 = arith.cmpi eq, %r66, %index_14 : index
  func.call @expect(%ok66, %index_66, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 67
  %r67 = index.xor %index_12, %index_10
  %ok67 = arith.cmpi eq, %r67, %index_6 : index
  func.call @expect(%ok67, %index_67, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 68
  %r68 = index.maxs %index_m1, %index_1
  %ok68 = arith.cmpi eq, %r68, %index_1 : index
  func.call @expect(%ok68, %index_68, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 69
  %r69 = index.maxu %index_m1, %index_1
  %ok69 = arith.cmpi eq, %r69, %index_m1 : index
  func.call @expect(%ok69, %index_69, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 70
  %r70 = index.mins %index_m1, %index_1
  %ok70 = arith.cmpi eq, %r70, %index_m1 : index
  func.call @expect(%ok70, %index_70, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 71
  %r71 = index.minu %index_m1, %index_1
  %ok71 = arith.cmpi eq, %r71, %index_1 : index
  func.call @expect(%ok71, %index_71, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 72
  %r72 = index.casts %i32_m1 : i32 to index
  %ok72 = arith.cmpi eq, %r72, %index_m1 : index
  func.call @expect(%ok72, %index_72, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 73
  %r73 = index.castu %i32_m1 : i32 to index
  %ok73 = arith.cmpi eq, %r73, %index_4294967295 : index
  func.call @expect(%ok73, %index_73, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 74
  %r74 = index.casts %index_300 : index to i8
  %ok74 = arith.cmpi eq, %r74, %i8_44 : i8
  func.call @expect(%ok74, %index_74, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 75
  %r75 = index.cmp slt(%index_m1, %index_1)
  %ok75 = arith.cmpi eq, %r75, %i1_1 : i1
  func.call @expect(%ok75, %index_75, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 76
  %r76 = index.cmp ult(%index_m1, %index_1)
  %ok76 = arith.cmpi eq, %r76, %i1_0 : i1
  func.call @expect(%ok76, %index_76, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 77
  %r77 = index.constant 42
  %ok77 = arith.cmpi eq, %r77, %index_42 : index
  func.call @expect(%ok77, %index_77, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 78
  %r78 = index.bool.constant true
  %ok78 = arith.cmpi eq, %r78, %i1_1 : i1
  func.call @expect(%ok78, %index_78, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 79
  %r79 = math.absi %i8_m5 : i8
  %ok79 = arith.cmpi eq, %r79, %i8_5 : i8
  func.call @expect(%ok79, %index_79, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 80
  %r80 = math.ctlz %i32_1 : i32
  %ok80 = arith.cmpi eq, %r80, %i32_31 : i32
  func.call @expect(%ok80, %index_80, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 81
  %r81 = math.ctlz %i32_0 : i32
  %ok81 = arith.cmpi eq, %r81, %i32_32 : i32
  func.call @expect(%ok81, %index_81, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 82
  %r82 = math.cttz %i32_8 : i32
  %ok82 = arith.cmpi eq, %r82, %i32_3 : i32
  func.call @expect(%ok82, %index_82, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  // case 83
  %r83 = math.ctpop %i8_m1 : i8
  %ok83 = arith.cmpi eq, %r83, %i8_8 : i8
  func.call @expect(%ok83, %index_83, %out, %sem) : (i1, index, memref<128xi64>, !reg) -> ()
  return
}
