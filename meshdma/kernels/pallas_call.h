// `pallas_call`: run a kernel body over a grid on the calling device, with
// its operands' blocks staged into VMEM (Pallas's `pl.pallas_call`).
//
// Called inside `Runtime::Run` (as a Pallas kernel is called inside
// `shard_map`), it acts on this device only; every device of the mesh calls
// it with its own shards (SPMD).
//
// Contract of one call:
//   1. Operands. `inputs` and `outputs` are caller-owned `ArrayRef`s (ordinary
//      memory from `ArrayRef::FromPointer`, or symmetric). If
//      `params.out_shape` is given, each output must match it.
//   2. Specs. Operand i is described by `in_specs[i]` / `out_specs[i]`; empty
//      spec lists mean "whole array in VMEM" for every operand (the no-grid
//      form), an empty `block_shape` means the whole array, an empty
//      `index_map` means block (0, ..., 0). `kSqueezed` in a block shape is a
//      dimension of size 1 that the body does not see (`None` /
//      `pl.Squeezed()`).
//   3. Grid. The body runs once per point of `params.grid`, row-major (last
//      axis fastest); an empty grid runs it once. `program_id(axis)` and
//      `num_programs(axis)` give the body its position.
//   4. Pipelining (kernels/pipeline.h). VMEM and SMEM operands are copied
//      block by block with async copies into double-buffered scratch; an
//      input block is copied only when its index differs from the previous
//      grid point's, and the next block's copy overlaps the body on the
//      current one; an output block is copied back when its index changes and
//      at the end. Revisiting an output block after leaving it is an error
//      (reported before the body first runs). ANY operands are passed
//      through as the whole array, for the body's own DMAs. An operand
//      whose spec sets `in_place` is not copied where its block is laid out
//      as that `InPlace` asks: the body reads or writes it in the array.
//   5. Ragged edges. A block shape need not divide the array: an edge block
//      is partial. Its VMEM buffer keeps the full block shape, the valid part
//      is copied in, the rest of an input buffer reads as zero, and only the
//      valid part of an output buffer is written back (an operand in place
//      with kStridedRows gets its valid part alone). The body asks
//      `KernelArgs::in_valid(i, d)` / `out_valid(i, d)` for the valid extent
//      and masks with `Ref::LoadMasked` / `StoreMasked`. A kernel that needs
//      divisibility sets `allow_partial_blocks = false`.
//   6. Scratch (`scratch_shapes`): VMEM/SMEM buffers and REGULAR or DMA
//      semaphores (single or arrays), allocated once per call, persisting
//      across grid points, freed at the end. Semaphores must be back to 0
//      when the body returns for the last time (the exit contract,
//      dma/kernel.h).
//   7. Kernel scope. The call runs inside `RunKernel`. `entry_barrier` left
//      unset means "when the kernel communicates": the entry barrier runs
//      when the call declares semaphore scratch or a `collective_id`, so a
//      neighbour's DMA for this call cannot land in the previous call's
//      scratch. A pure compute kernel (no semaphores) runs without it.
//      `entry_barrier = false` is the named opt-out for a kernel that does
//      its own handshake; `true` forces the barrier.
//   8. Errors name the kernel and the operand: shape or dtype mismatches,
//      block shapes of the wrong rank or size, index maps out of range,
//      wrong scratch requests, a failing body (with its grid point).
#ifndef MESHDMA_KERNELS_PALLAS_CALL_H_
#define MESHDMA_KERNELS_PALLAS_CALL_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "meshdma/base/dtype.h"
#include "meshdma/dma/array_ref.h"
#include "meshdma/dma/semaphore.h"
#include "meshdma/kernels/ref.h"

namespace meshdma {

enum class MemorySpace {
  kAny,   // Main memory (HBM); the body gets the whole array and copies itself.
  kVmem,  // Blocks staged into fast scratch; the body loads and stores them.
  kSmem,  // Small scalar arrays (block tables, lengths), staged like VMEM.
};
absl::string_view MemorySpaceName(MemorySpace space);

// A block dimension of size 1 that the body does not see.
inline constexpr int64_t kSqueezed = -1;

// Whether an operand's blocks may reach the body where they lie in the array
// instead of through a staging buffer: on a CPU, VMEM is the same memory,
// and the copy costs only time and another core's cache. An input so read
// must be one the body never writes; an output so written is written
// straight into the array (no write-back copy), so the body must write all
// of each block's valid part and may read back only what it wrote. Ignored
// for ANY operands.
enum class InPlace {
  kNever,  // Every block is staged, as in Pallas.
  // A whole block that is one contiguous run of the array; a partial edge
  // block is staged (an input's reads as zero past the edge, an output's
  // padding is never written back).
  kContiguous,
  // Every block, whole or partial, of an array whose rows (last dimension)
  // are unit-stride and do not overlap: the view may be strided, a partial
  // block's covers only its valid part (its shape is `in_valid` / `out_valid`),
  // and the body reads or writes it through `strides()`.
  kStridedRows,
};

// Grid indices -> block indices (one per array dimension, in units of
// blocks).
using IndexMap = std::function<std::vector<int64_t>(std::span<const int64_t>)>;

struct BlockSpec {
  std::vector<int64_t> block_shape;  // Empty: the whole array.
  IndexMap index_map;                // Empty: all zeros.
  MemorySpace memory_space = MemorySpace::kVmem;
  InPlace in_place = InPlace::kNever;
};
// The spec of an operand the body reaches only by DMA (`pl.ANY`).
inline BlockSpec AnySpec() { return BlockSpec{{}, {}, MemorySpace::kAny}; }

struct ShapeDtype {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
};

// Scratch requests (`scratch_shapes`).
struct BufferScratch {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  MemorySpace memory_space = MemorySpace::kVmem;
};
struct SemaphoreScratch {
  SemaphoreType type = SemaphoreType::kRegular;
  int count = 0;  // 0: one semaphore; n > 0: an array of n.
};
using ScratchShape = std::variant<BufferScratch, SemaphoreScratch>;
inline ScratchShape VMEM(std::vector<int64_t> shape, DType dtype) {
  return BufferScratch{dtype, std::move(shape), MemorySpace::kVmem};
}
inline ScratchShape SMEM(std::vector<int64_t> shape, DType dtype) {
  return BufferScratch{dtype, std::move(shape), MemorySpace::kSmem};
}
inline ScratchShape SemaphoreShape(SemaphoreType type, int count = 0) {
  return SemaphoreScratch{type, count};
}

// Counts of the copies a call's pipeline made, per operand (for tests and
// benchmarks).
struct PipelineStats {
  std::vector<int64_t> input_copies;
  // Input blocks read in place (`BlockSpec::in_place`) where a copy
  // would otherwise have been made.
  std::vector<int64_t> input_in_place;
  std::vector<int64_t> output_copies;
  // Output blocks written in place where a write-back would otherwise have
  // been made (counted when the body leaves the block).
  std::vector<int64_t> output_in_place;
  int64_t grid_steps = 0;
  int64_t vmem_bytes = 0;  // Staging buffers plus buffer scratch.
};

// The batch axes one `vmap` added (kernels/vmap.h): per input the mapped
// dimension or none (shared), per output the mapped dimension.
struct BatchAxes {
  std::vector<std::optional<int>> in_axes;
  std::vector<int> out_axes;
};

struct PallasCallParams {
  std::string name = "pallas_call";
  std::vector<int64_t> grid;  // Empty: one invocation.
  std::vector<BlockSpec> in_specs;
  std::vector<BlockSpec> out_specs;
  std::vector<ShapeDtype> out_shape;  // Optional check of `outputs`.
  std::vector<ScratchShape> scratch_shapes;
  // Names used in error messages ("input 1 ('k')"); optional.
  std::vector<std::string> input_names;
  std::vector<std::string> output_names;
  // Unset: on iff the call communicates (semaphore scratch or a
  // `collective_id`); see rule 7 above.
  std::optional<bool> entry_barrier;
  std::optional<int> collective_id;
  bool allow_partial_blocks = true;
  // Set by `vmap`, innermost first.
  std::vector<BatchAxes> batching;
  PipelineStats* stats = nullptr;  // Filled when set. Not owned.
};

namespace kernels_internal {
class PipelineRunner;
}

// What the body sees: refs for inputs, outputs and scratch, positionally as
// in Pallas (`kernel(x_ref, y_ref, o_ref, acc_ref, sem)`), and the valid
// extents of partial edge blocks.
class KernelArgs {
 public:
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  int num_outputs() const { return static_cast<int>(outputs_.size()); }
  int num_scratch() const { return static_cast<int>(scratch_.size()); }
  const ArrayRef& input(int i) const { return inputs_[i]; }
  const ArrayRef& output(int i) const { return outputs_[i]; }

  // Typed views; an error names the kernel and operand on a dtype mismatch.
  template <typename T>
  absl::StatusOr<Ref<T>> in(int i) const {
    return Typed<T>(Operand(true, i), "input", i);
  }
  template <typename T>
  absl::StatusOr<Ref<T>> out(int i) const {
    return Typed<T>(Operand(false, i), "output", i);
  }
  template <typename T>
  absl::StatusOr<Ref<T>> scratch(int i) const {
    auto a = scratch_buffer(i);
    if (!a.ok()) return a.status();
    return Typed<T>(&*a, "scratch", i);
  }
  absl::StatusOr<ArrayRef> scratch_buffer(int i) const;
  absl::StatusOr<Semaphore> semaphore(int i) const;
  absl::StatusOr<SemaphoreArray> semaphores(int i) const;

  // Valid extent of the current block of an operand along dimension `d` of
  // the body's view: the block size, or less at a ragged edge.
  int64_t in_valid(int i, int d) const { return in_valid_[i][d]; }
  int64_t out_valid(int i, int d) const { return out_valid_[i][d]; }
  std::span<const int64_t> in_valid(int i) const { return in_valid_[i]; }
  std::span<const int64_t> out_valid(int i) const { return out_valid_[i]; }

  const std::string& kernel_name() const { return *name_; }

 private:
  friend class kernels_internal::PipelineRunner;
  template <typename T>
  absl::StatusOr<Ref<T>> Typed(const ArrayRef* a, const char* what,
                               int i) const;
  const ArrayRef* Operand(bool input, int i) const;

  std::vector<ArrayRef> inputs_;
  std::vector<ArrayRef> outputs_;
  std::vector<std::variant<ArrayRef, Semaphore, SemaphoreArray>> scratch_;
  std::vector<std::vector<int64_t>> in_valid_;
  std::vector<std::vector<int64_t>> out_valid_;
  const std::string* name_ = nullptr;
};

using KernelBody = std::function<absl::Status(const KernelArgs&)>;

absl::Status pallas_call(const PallasCallParams& params, const KernelBody& body,
                         std::span<const ArrayRef> inputs,
                         std::span<const ArrayRef> outputs);

// The position of the running body in the innermost grid (of `pallas_call`
// or `emit_pipeline`), counted without the batch axes `vmap` added. Outside a
// body, or for an axis outside the grid, `program_id` is -1 and
// `num_programs` 0.
int64_t program_id(int axis);
int64_t num_programs(int axis);

// A kernel as a value: its parameters and body, callable on arrays. `vmap`
// (kernels/vmap.h) and `make_kernel` (kernels/make_kernel.h) take these.
struct Kernel {
  PallasCallParams params;
  KernelBody body;
  absl::Status operator()(std::span<const ArrayRef> inputs,
                          std::span<const ArrayRef> outputs) const {
    return pallas_call(params, body, inputs, outputs);
  }
};

template <typename T>
absl::StatusOr<Ref<T>> KernelArgs::Typed(const ArrayRef* a, const char* what,
                                         int i) const {
  if (a == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel '", *name_, "': the body asked for ", what, " ", i,
                     ", which does not exist"));
  }
  auto r = Ref<T>::Of(*a);
  if (!r.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel '", *name_, "': ", what, " ", i, " is ", a->ToString(),
        ", the body reads it as ", DTypeName(kDTypeOf<T>)));
  }
  return r;
}

}  // namespace meshdma

#endif  // MESHDMA_KERNELS_PALLAS_CALL_H_
