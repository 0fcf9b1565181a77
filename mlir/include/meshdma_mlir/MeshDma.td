// The meshdma dialect: the Pallas TPU distributed programming model (remote
// async DMA, REGULAR/DMA/BARRIER semaphores, a named-axis device mesh and
// collectives) on plain memrefs. The ops mirror Mosaic's `tpu` communication
// ops; their semantics are those of the meshdma runtime.
#ifndef MESHDMA_MLIR_MESHDMA_TD
#define MESHDMA_MLIR_MESHDMA_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/BuiltinAttributes.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def MeshDma_Dialect : Dialect {
  let name = "meshdma";
  let cppNamespace = "::meshdma::ir";
  let summary = "Remote DMA, semaphores and collectives over a device mesh";
  let description = [{
    A kernel is a `func.func` carrying the unit attribute `meshdma.kernel`
    and `meshdma.mesh = @m`, the symbol of a `mesh.mesh` whose axes are named
    by `meshdma.axes = ["x", ...]`. It runs SPMD on every device of the mesh.
    Allocations (`sem_alloc`, `alloc`) are symmetric: the k-th allocation of
    a call names the same object on every device.
  }];
  let useDefaultTypePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    static constexpr ::llvm::StringLiteral kKernelAttr = "meshdma.kernel";
    static constexpr ::llvm::StringLiteral kMeshAttr = "meshdma.mesh";
    static constexpr ::llvm::StringLiteral kAxesAttr = "meshdma.axes";
    static constexpr ::llvm::StringLiteral kEntryBarrierAttr =
        "meshdma.entry_barrier";
    static constexpr ::llvm::StringLiteral kCollectiveIdAttr =
        "meshdma.collective_id";
    static constexpr ::llvm::StringLiteral kIterationBoundsAttr =
        "meshdma.iteration_bounds";
    static constexpr ::llvm::StringLiteral kWindowParamsAttr =
        "meshdma.window_params";
    static constexpr ::llvm::StringLiteral kDimensionSemanticsAttr =
        "meshdma.dimension_semantics";
  }];
}

//===----------------------------------------------------------------------===//
// Enums and types
//===----------------------------------------------------------------------===//

def MeshDma_SemaphoreKind : I32EnumAttr<"SemaphoreKind", "semaphore kind", [
    I32EnumAttrCase<"regular", 0>,
    I32EnumAttrCase<"dma", 1>,
    I32EnumAttrCase<"barrier", 2>]> {
  let cppNamespace = "::meshdma::ir";
  let genSpecializedAttr = 0;
}

def MeshDma_ReductionKind : I32EnumAttr<"ReductionKind", "reduction", [
    I32EnumAttrCase<"sum", 0>,
    I32EnumAttrCase<"max", 1>,
    I32EnumAttrCase<"min", 2>,
    I32EnumAttrCase<"mean", 3>]> {
  let cppNamespace = "::meshdma::ir";
}

class MeshDma_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<MeshDma_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

def MeshDma_SemaphoreType : MeshDma_Type<"Semaphore", "semaphore"> {
  let summary = "a REGULAR, DMA or BARRIER semaphore";
  let description = [{
    A handle to a semaphore of this device (symmetric: a remote signal or DMA
    names the same semaphore on the target). REGULAR semaphores count
    signals, DMA semaphores count bytes, and the BARRIER semaphore of a
    kernel's collective id outlives the call.
  }];
  let parameters = (ins EnumParameter<MeshDma_SemaphoreKind>:$kind);
  let assemblyFormat = "`<` $kind `>`";
}

def MeshDma_SemaphoreArrayType
    : MeshDma_Type<"SemaphoreArray", "semaphore_array"> {
  let summary = "a fixed-size array of REGULAR or DMA semaphores";
  let description = [{
    `size` semaphores of one kind, allocated together by `sem_alloc_array`
    (the runtime's `AllocateSemaphoreArray`, Mosaic's semaphore memrefs) and
    named one at a time by `sem_index` with a computed index.
  }];
  let parameters = (ins EnumParameter<MeshDma_SemaphoreKind>:$kind,
                        "int64_t":$size);
  let assemblyFormat = "`<` $kind `,` $size `>`";
}

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

class MeshDma_Op<string mnemonic, list<Trait> traits = []>
    : Op<MeshDma_Dialect, mnemonic, traits>;

// Element types the runtime moves: u8 (as i8), i32, i64, f16, bf16, f32, f64.
def MeshDma_MemRef : MemRefOf<[I8, I32, I64, F16, BF16, F32, F64]>;

def MeshDma_DeviceIdOp : MeshDma_Op<"device_id", [Pure]> {
  let summary = "this device's LOGICAL id (row-major over the mesh)";
  let results = (outs I32:$result);
  let assemblyFormat = "attr-dict";
}

def MeshDma_AxisIndexOp : MeshDma_Op<"axis_index", [Pure]> {
  let summary = "this device's coordinate along a named mesh axis";
  let arguments = (ins StrAttr:$axis);
  let results = (outs I32:$result);
  let assemblyFormat = "$axis attr-dict";
  let hasVerifier = 1;
}

def MeshDma_AxisSizeOp : MeshDma_Op<"axis_size", [Pure]> {
  let summary = "the size of a named mesh axis";
  let arguments = (ins StrAttr:$axis);
  let results = (outs I32:$result);
  let assemblyFormat = "$axis attr-dict";
  let hasVerifier = 1;
}

def MeshDma_ProgramIdOp : MeshDma_Op<"program_id", [Pure]> {
  let summary = "the grid index along one dimension of the kernel's grid";
  let arguments = (ins I64Attr:$dimension);
  let results = (outs Index:$result);
  let assemblyFormat = "$dimension attr-dict";
  let hasVerifier = 1;
}

def MeshDma_NumProgramsOp : MeshDma_Op<"num_programs", [Pure]> {
  let summary = "the size of one dimension of the kernel's grid";
  let arguments = (ins I64Attr:$dimension);
  let results = (outs Index:$result);
  let assemblyFormat = "$dimension attr-dict";
  let hasVerifier = 1;
}

def MeshDma_SemAllocOp : MeshDma_Op<"sem_alloc", [
    MemoryEffects<[MemAlloc<DefaultResource>]>]> {
  let summary = "allocates a REGULAR or DMA semaphore (symmetric, zero)";
  let results = (outs MeshDma_SemaphoreType:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def MeshDma_SemAllocArrayOp : MeshDma_Op<"sem_alloc_array", [
    MemoryEffects<[MemAlloc<DefaultResource>]>]> {
  let summary = "allocates an array of REGULAR or DMA semaphores (symmetric, "
                "zero)";
  let results = (outs MeshDma_SemaphoreArrayType:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def MeshDma_SemIndexOp : MeshDma_Op<"sem_index", [Pure]> {
  let summary = "semaphore `index` of an array (0 <= index < size)";
  let arguments = (ins MeshDma_SemaphoreArrayType:$array, Index:$index);
  let results = (outs MeshDma_SemaphoreType:$result);
  let assemblyFormat = [{
    $array `[` $index `]` attr-dict `:` type($array) `->` type($result)
  }];
  let hasVerifier = 1;
}

def MeshDma_BarrierSemaphoreOp : MeshDma_Op<"barrier_semaphore"> {
  let summary = "the BARRIER semaphore of the kernel's collective id";
  let results = (outs MeshDma_SemaphoreType:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def MeshDma_AllocOp : MeshDma_Op<"alloc", [
    MemoryEffects<[MemAlloc<DefaultResource>]>]> {
  let summary = "allocates symmetric scratch (a remote DMA target)";
  let results = (outs MeshDma_MemRef:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def MeshDma_SemSignalOp : MeshDma_Op<"sem_signal"> {
  let summary = "adds `amount` to a REGULAR or BARRIER semaphore, maybe remote";
  let description = [{
    Without `device`, signals this device's semaphore. With `device(...)`,
    signals the same (symmetric) semaphore on that device: by default a MESH
    id, one i32 coordinate per mesh axis; with `logical`, one LOGICAL id.
  }];
  let arguments = (ins MeshDma_SemaphoreType:$semaphore, I32:$amount,
                       Variadic<I32>:$device_id, UnitAttr:$logical);
  let assemblyFormat = [{
    $semaphore `,` $amount (`device` `(` $device_id^ `)`)? (`logical` $logical^)?
    attr-dict `:` type($semaphore)
  }];
  let hasVerifier = 1;
}

def MeshDma_SemWaitOp : MeshDma_Op<"sem_wait"> {
  let summary = "waits until a local semaphore >= amount, then subtracts it";
  let arguments = (ins MeshDma_SemaphoreType:$semaphore, I32:$amount);
  let assemblyFormat = "$semaphore `,` $amount attr-dict `:` type($semaphore)";
  let hasVerifier = 1;
}

def MeshDma_SemReadOp : MeshDma_Op<"sem_read"> {
  let summary = "a snapshot of a local semaphore's count";
  let arguments = (ins MeshDma_SemaphoreType:$semaphore);
  let results = (outs I32:$result);
  let assemblyFormat = "$semaphore attr-dict `:` type($semaphore)";
}

def MeshDma_DmaStartOp : MeshDma_Op<"dma_start", [AttrSizedOperandSegments]> {
  let summary = "starts an async copy, local or into another device's buffer";
  let description = [{
    Local (no `device`): copies `source` into `target` and adds the byte size
    to `target_semaphore` when done. Remote: copies into `target` on the
    given device; `source_semaphore` (this device) grows when the source has
    been read, `target_semaphore` (on the target device) when the target has
    been written. Both are DMA semaphores; shapes and element types match.
  }];
  let arguments = (ins MeshDma_MemRef:$source, MeshDma_MemRef:$target,
                       MeshDma_SemaphoreType:$target_semaphore,
                       Optional<MeshDma_SemaphoreType>:$source_semaphore,
                       Variadic<I32>:$device_id, UnitAttr:$logical);
  let assemblyFormat = [{
    $source `:` type($source) `->` $target `:` type($target) `,`
    `recv` $target_semaphore `:` type($target_semaphore)
    (`,` `send` $source_semaphore^ `:` type($source_semaphore))?
    (`device` `(` $device_id^ `)`)? (`logical` $logical^)? attr-dict
  }];
  let hasVerifier = 1;
}

class MeshDma_DmaWaitOp<string mnemonic, string what>
    : MeshDma_Op<mnemonic> {
  let summary = "waits for " # what # " bytes of `ref`'s size, then subtracts";
  let arguments = (ins MeshDma_SemaphoreType:$semaphore, MeshDma_MemRef:$ref);
  let assemblyFormat = [{
    $semaphore `,` $ref attr-dict `:` type($semaphore) `,` type($ref)
  }];
  let hasVerifier = 1;
}

def MeshDma_DmaWaitRecvOp : MeshDma_DmaWaitOp<"dma_wait_recv", "received">;
def MeshDma_DmaWaitSendOp : MeshDma_DmaWaitOp<"dma_wait_send", "sent">;

def MeshDma_DeviceBarrierOp : MeshDma_Op<"device_barrier"> {
  let summary = "blocks until every device of the mesh has reached it as often";
  let assemblyFormat = "attr-dict";
}

//===----------------------------------------------------------------------===//
// Collectives on memrefs (the runtime's collectives/)
//===----------------------------------------------------------------------===//

class MeshDma_CollectiveOp<string mnemonic, list<Trait> traits = []>
    : MeshDma_Op<mnemonic, traits> {
  let hasVerifier = 1;
}

def MeshDma_PpermuteOp : MeshDma_CollectiveOp<"ppermute"> {
  let summary = "each source sends `input` to its destination's `output`";
  let description = [{
    Over the group along `axes`: either explicit (source, destination) pairs
    of positions (`perm`, flattened), or a shift by `offset` positions
    (`rotate`: modulo the group size; otherwise the ends receive nothing).
    A device that is no pair's destination gets zeros.
  }];
  let arguments = (ins MeshDma_MemRef:$input, MeshDma_MemRef:$output,
                       StrArrayAttr:$axes,
                       OptionalAttr<DenseI64ArrayAttr>:$perm,
                       OptionalAttr<I64Attr>:$offset, UnitAttr:$rotate);
  let assemblyFormat = [{
    $input `,` $output attr-dict `:` type($input) `,` type($output)
  }];
}

def MeshDma_AllGatherOp : MeshDma_CollectiveOp<"all_gather"> {
  let summary = "gathers the group's inputs in group order (dim 0 if tiled)";
  let arguments = (ins MeshDma_MemRef:$input, MeshDma_MemRef:$output,
                       StrArrayAttr:$axes, UnitAttr:$tiled);
  let assemblyFormat = [{
    $input `,` $output attr-dict `:` type($input) `,` type($output)
  }];
}

def MeshDma_AllReduceOp : MeshDma_CollectiveOp<"all_reduce"> {
  let summary = "element-wise reduction over the group, on every member";
  let arguments = (ins MeshDma_ReductionKind:$reduction, MeshDma_MemRef:$input,
                       MeshDma_MemRef:$output, StrArrayAttr:$axes);
  let assemblyFormat = [{
    $reduction $input `,` $output attr-dict `:` type($input) `,` type($output)
  }];
}

def MeshDma_ReduceScatterOp : MeshDma_CollectiveOp<"reduce_scatter"> {
  let summary = "reduction over the group; member i keeps segment i";
  let arguments = (ins MeshDma_ReductionKind:$reduction, MeshDma_MemRef:$input,
                       MeshDma_MemRef:$output, StrArrayAttr:$axes);
  let assemblyFormat = [{
    $reduction $input `,` $output attr-dict `:` type($input) `,` type($output)
  }];
}

def MeshDma_AllToAllOp : MeshDma_CollectiveOp<"all_to_all"> {
  let summary = "block j of `split_axis` goes to member j, along `concat_axis`";
  let arguments = (ins MeshDma_MemRef:$input, MeshDma_MemRef:$output,
                       StrArrayAttr:$axes, I64Attr:$split_axis,
                       I64Attr:$concat_axis);
  let assemblyFormat = [{
    $input `,` $output attr-dict `:` type($input) `,` type($output)
  }];
}

#endif  // MESHDMA_MLIR_MESHDMA_TD
