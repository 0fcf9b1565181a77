// The pipeline engine shared by `pallas_call` and `emit_pipeline`: resolves
// specs against operand shapes (including `vmap` batch axes), precomputes
// every operand's block schedule (so bad index maps and output revisits fail
// before the body runs), and runs the double-buffered grid loop.
#ifndef MESHDMA_KERNELS_INTERNAL_PIPELINE_RUNNER_H_
#define MESHDMA_KERNELS_INTERNAL_PIPELINE_RUNNER_H_

#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "meshdma/kernels/pallas_call.h"

namespace meshdma::kernels_internal {

struct PipelineRequest {
  const std::string* name;
  std::vector<int64_t> grid;
  const std::vector<BlockSpec>* in_specs;
  const std::vector<BlockSpec>* out_specs;
  const std::vector<std::string>* input_names;
  const std::vector<std::string>* output_names;
  const std::vector<BatchAxes>* batching;              // May be null.
  const std::vector<ShapeDtype>* out_shape = nullptr;  // Unbatched; optional.
  bool allow_partial_blocks = true;
  PipelineStats* stats = nullptr;
};

class PipelineRunner {
 public:
  using Scratch =
      std::vector<std::variant<ArrayRef, Semaphore, SemaphoreArray>>;

  // Steps 1-2: resolve and schedule. Allocates nothing.
  static absl::StatusOr<PipelineRunner> Plan(const PipelineRequest& request,
                                             std::span<const ArrayRef> inputs,
                                             std::span<const ArrayRef> outputs);
  // Steps 3-4: allocate staging buffers in the current allocation scope and
  // run `body` at every grid point. `scratch` is passed to the body as is.
  absl::Status Run(const KernelBody& body, Scratch scratch);

  struct Operand {
    bool is_output = false;
    int index = 0;
    std::string label;  // "input 1 ('k')".
    ArrayRef array;
    MemorySpace space = MemorySpace::kVmem;
    std::vector<int64_t> block;  // Full rank, squeezed dims are 1.
    std::vector<bool> squeezed;
    std::vector<int64_t> view_shape;  // Block without squeezed dims.
    IndexMap map;                     // Over the full (batched) grid.
    std::vector<int64_t> schedule;    // [steps][rank] block indices.
    bool ever_changes = false;
    // `in_place` asked for, and a whole block is laid out as it asks:
    // every whole block is read or written in place, and every partial one
    // too where `partial_in_place` (kStridedRows).
    bool in_place_blocks = false;
    bool partial_in_place = false;
    bool ever_staged = true;  // Some step's block needs a staging buffer.
  };

 private:
  struct Stage;
  class StepLoop;

  std::string name_;
  std::vector<int64_t> grid_;
  int batch_axes_ = 0;
  int64_t steps_ = 0;
  std::vector<Operand> ops_;
  PipelineStats* stats_ = nullptr;
};

// Pushes a grid position for `program_id` (restored on destruction).
class GridScope {
 public:
  GridScope(const std::vector<int64_t>* grid, int batch_axes);
  ~GridScope();
  void set_index(const int64_t* index) { index_ = index; }

 private:
  // Parenthesised: clang reads `int64_t ::meshdma::f` as `int64_t::meshdma::f`.
  friend int64_t(::meshdma::program_id)(int);
  friend int64_t(::meshdma::num_programs)(int);
  friend std::string AccessSite(absl::string_view what);
  const std::vector<int64_t>* grid_;
  int batch_axes_;
  const int64_t* index_ = nullptr;
  GridScope* prev_;
};

}  // namespace meshdma::kernels_internal

#endif  // MESHDMA_KERNELS_INTERNAL_PIPELINE_RUNNER_H_
