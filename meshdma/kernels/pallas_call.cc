#include "meshdma/kernels/pallas_call.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/symmetric_memory.h"
#include "meshdma/kernels/internal/pipeline_runner.h"

namespace meshdma {
namespace {

// A call communicates when it can receive signals or DMAs from peers: it
// declares semaphore scratch or a barrier semaphore (`collective_id`).
bool Communicates(const PallasCallParams& params) {
  if (params.collective_id.has_value()) return true;
  for (const ScratchShape& s : params.scratch_shapes) {
    if (std::holds_alternative<SemaphoreScratch>(s)) return true;
  }
  return false;
}

}  // namespace

absl::string_view MemorySpaceName(MemorySpace space) {
  switch (space) {
    case MemorySpace::kAny:
      return "ANY";
    case MemorySpace::kVmem:
      return "VMEM";
    case MemorySpace::kSmem:
      return "SMEM";
  }
  return "?";
}

const ArrayRef* KernelArgs::Operand(bool input, int i) const {
  const auto& v = input ? inputs_ : outputs_;
  if (i < 0 || i >= static_cast<int>(v.size())) return nullptr;
  return &v[i];
}

absl::StatusOr<ArrayRef> KernelArgs::scratch_buffer(int i) const {
  if (i < 0 || i >= num_scratch()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel '", *name_, "': scratch ", i, " requested, the kernel has ",
        num_scratch(), " scratch operands"));
  }
  if (const ArrayRef* a = std::get_if<ArrayRef>(&scratch_[i])) return *a;
  return absl::InvalidArgumentError(absl::StrCat(
      "kernel '", *name_, "': scratch ", i, " is a semaphore, not a buffer"));
}

absl::StatusOr<Semaphore> KernelArgs::semaphore(int i) const {
  if (i >= 0 && i < num_scratch()) {
    if (const Semaphore* s = std::get_if<Semaphore>(&scratch_[i])) return *s;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "kernel '", *name_, "': scratch ", i, " is not a single semaphore"));
}

absl::StatusOr<SemaphoreArray> KernelArgs::semaphores(int i) const {
  if (i >= 0 && i < num_scratch()) {
    if (const SemaphoreArray* s = std::get_if<SemaphoreArray>(&scratch_[i])) {
      return *s;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "kernel '", *name_, "': scratch ", i, " is not a semaphore array"));
}

namespace {

using Scratch = kernels_internal::PipelineRunner::Scratch;

// Scratch requests, checked before anything is allocated: VMEM or SMEM
// buffers of valid shape, REGULAR or DMA semaphores.
absl::Status CheckScratchShapes(const PallasCallParams& params) {
  for (size_t i = 0; i < params.scratch_shapes.size(); ++i) {
    const ScratchShape& s = params.scratch_shapes[i];
    if (const auto* b = std::get_if<BufferScratch>(&s)) {
      // kVmem or kSmem; kAny and values outside the enum are not buffers.
      bool bad = (b->memory_space != MemorySpace::kVmem &&
                  b->memory_space != MemorySpace::kSmem) ||
                 b->shape.size() > static_cast<size_t>(kMaxRank);
      for (int64_t d : b->shape) bad = bad || d < 0;
      if (bad) {
        return absl::InvalidArgumentError(
            absl::StrCat("kernel '", params.name, "': scratch ", i, " ",
                         MemorySpaceName(b->memory_space), " ",
                         DTypeName(b->dtype), "[", absl::StrJoin(b->shape, ","),
                         "] is not a valid VMEM/SMEM buffer request"));
      }
    } else {
      const auto& sem = std::get<SemaphoreScratch>(s);
      if (sem.count < 0 || sem.type == SemaphoreType::kBarrier) {
        return absl::InvalidArgumentError(absl::StrCat(
            "kernel '", params.name, "': scratch ", i, " asks for ", sem.count,
            " ", SemaphoreTypeName(sem.type),
            " semaphores; scratch semaphores are REGULAR or DMA, count >= 0 "
            "(barrier semaphores come from collective_id)"));
      }
    }
  }
  return absl::OkStatus();
}

// The scratch operands, allocated inside the kernel in request order.
absl::StatusOr<Scratch> AllocateScratch(const PallasCallParams& params) {
  Scratch scratch;
  for (size_t i = 0; i < params.scratch_shapes.size(); ++i) {
    const ScratchShape& s = params.scratch_shapes[i];
    if (const auto* b = std::get_if<BufferScratch>(&s)) {
      MESHDMA_ASSIGN_OR_RETURN(ArrayRef a,
                               AllocateSymmetric(b->dtype, b->shape));
      scratch.emplace_back(a);
      continue;
    }
    const auto& sem = std::get<SemaphoreScratch>(s);
    const std::string name = absl::StrCat(params.name, " scratch ", i);
    if (sem.count == 0) {
      MESHDMA_ASSIGN_OR_RETURN(Semaphore one,
                               AllocateSemaphore(sem.type, name));
      scratch.emplace_back(one);
    } else {
      MESHDMA_ASSIGN_OR_RETURN(
          SemaphoreArray arr,
          AllocateSemaphoreArray(sem.type, sem.count, name));
      scratch.emplace_back(arr);
    }
  }
  return scratch;
}

}  // namespace

absl::Status pallas_call(const PallasCallParams& params, const KernelBody& body,
                         std::span<const ArrayRef> inputs,
                         std::span<const ArrayRef> outputs) {
  // Step 1: the request, checked before anything is allocated.
  if (!body) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel '", params.name, "': no body"));
  }
  MESHDMA_RETURN_IF_ERROR(CheckScratchShapes(params));
  // Step 2: the pipeline's plan (blocks, grid, vmap layers), checked too.
  kernels_internal::PipelineRequest req;
  req.name = &params.name;
  req.grid = params.grid;
  req.in_specs = &params.in_specs;
  req.out_specs = &params.out_specs;
  req.input_names = &params.input_names;
  req.output_names = &params.output_names;
  req.batching = &params.batching;
  req.out_shape = &params.out_shape;
  req.allow_partial_blocks = params.allow_partial_blocks;
  req.stats = params.stats;
  MESHDMA_ASSIGN_OR_RETURN(auto runner, kernels_internal::PipelineRunner::Plan(
                                            req, inputs, outputs));
  // Step 3: the kernel: its scratch, then the body over the grid.
  KernelOptions kopts;
  kopts.name = params.name;
  kopts.entry_barrier = params.entry_barrier.value_or(Communicates(params));
  kopts.collective_id = params.collective_id;
  return RunKernel(kopts, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(Scratch scratch, AllocateScratch(params));
    return runner.Run(body, std::move(scratch));
  });
}

}  // namespace meshdma
