// Block pipelining (Pallas TPU's software pipeline) and `emit_pipeline`.
//
// `pallas_call` pipelines its VMEM/SMEM operands over its grid (contract in
// kernels/pallas_call.h, item 4). `emit_pipeline` runs the same pipeline
// nested inside a kernel body: over an inner `grid`, blocks of the given
// (usually ANY) arrays are copied into VMEM buffers allocated for that call
// (in a `run_scoped` region), double-buffered, and `body` runs on them. Inside
// `body`, `program_id`/`num_programs` refer to the inner grid; the enclosing
// kernel's position is restored afterwards. Typical use: a reduce-scatter
// step that adds a large HBM block to an accumulator in VMEM-sized pieces.
#ifndef MESHDMA_KERNELS_PIPELINE_H_
#define MESHDMA_KERNELS_PIPELINE_H_

#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "meshdma/kernels/pallas_call.h"

namespace meshdma {

struct EmitPipelineParams {
  std::string name = "emit_pipeline";
  std::vector<int64_t> grid;
  std::vector<BlockSpec> in_specs;  // VMEM specs (an empty list: whole arrays).
  std::vector<BlockSpec> out_specs;
  std::vector<std::string> input_names;
  std::vector<std::string> output_names;
  bool allow_partial_blocks = true;
  PipelineStats* stats = nullptr;
};

// `body` gets the staged blocks as inputs and outputs (no scratch).
absl::Status emit_pipeline(const EmitPipelineParams& params,
                           const KernelBody& body,
                           std::span<const ArrayRef> inputs,
                           std::span<const ArrayRef> outputs);

}  // namespace meshdma

#endif  // MESHDMA_KERNELS_PIPELINE_H_
