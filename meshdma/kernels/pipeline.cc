#include "meshdma/kernels/pipeline.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "meshdma/base/checked_math.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/symmetric_memory.h"
#include "meshdma/kernels/internal/pipeline_runner.h"

namespace meshdma {
namespace kernels_internal {
namespace {

thread_local GridScope* current_grid = nullptr;

std::string Label(bool output, int i, const std::vector<std::string>* names) {
  std::string s = absl::StrCat(output ? "output " : "input ", i);
  if (names != nullptr && i < static_cast<int>(names->size()) &&
      !(*names)[i].empty()) {
    absl::StrAppend(&s, " ('", (*names)[i], "')");
  }
  return s;
}

std::string Tuple(std::span<const int64_t> v) {
  return absl::StrCat("(", absl::StrJoin(v, ", "), ")");
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

GridScope::GridScope(const std::vector<int64_t>* grid, int batch_axes)
    : grid_(grid), batch_axes_(batch_axes), prev_(current_grid) {
  current_grid = this;
}
GridScope::~GridScope() { current_grid = prev_; }

std::string AccessSite(absl::string_view what) {
  const GridScope* g = current_grid;
  if (g == nullptr || g->index_ == nullptr) return std::string(what);
  return absl::StrCat(
      what, " at grid point ",
      Tuple({g->index_ + g->batch_axes_,
             g->grid_->size() - static_cast<size_t>(g->batch_axes_)}));
}

namespace {

using Operand = PipelineRunner::Operand;

// The operands' shapes with the vmap batch axes taken out: the shapes the
// kernel's own specs were written for.
struct Unbatched {
  std::vector<std::vector<int64_t>> shapes;        // Inputs, then outputs.
  const std::vector<BatchAxes>* layers = nullptr;  // Outermost vmap first.
  std::vector<int64_t> batch_sizes;                // Per layer.
  // axis_of[layer][operand]: mapped dimension or -1.
  std::vector<std::vector<int>> axis_of;
};

// The spec counts fit the operands (unless both are empty: default specs)
// and no grid dimension is negative.
absl::Status CheckRequest(const PipelineRequest& req, int n_in, int n_out,
                          bool default_specs) {
  const std::string& name = *req.name;
  if (!default_specs && (static_cast<int>(req.in_specs->size()) != n_in ||
                         static_cast<int>(req.out_specs->size()) != n_out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel '", name, "': ", req.in_specs->size(),
                     " in_specs and ", req.out_specs->size(), " out_specs for ",
                     n_in, " inputs and ", n_out, " outputs"));
  }
  for (int64_t g : req.grid) {
    if (g < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("kernel '", name, "': negative grid ", Tuple(req.grid)));
    }
  }
  return absl::OkStatus();
}

// The operands' shapes without the batch axes, outermost vmap first; an
// error names the vmap axis and operand that do not fit.
absl::StatusOr<Unbatched> StripBatchAxes(const PipelineRequest& req,
                                         std::span<const ArrayRef> inputs,
                                         std::span<const ArrayRef> outputs) {
  const std::string& name = *req.name;
  const int n_in = static_cast<int>(inputs.size());
  const int n_out = static_cast<int>(outputs.size());
  // Step 1: every operand's shape, inputs then outputs.
  Unbatched u;
  std::vector<std::vector<int64_t>>& shapes = u.shapes;
  for (const ArrayRef& a : inputs)
    shapes.emplace_back(a.shape().begin(), a.shape().end());
  for (const ArrayRef& a : outputs)
    shapes.emplace_back(a.shape().begin(), a.shape().end());
  static const auto* const kNoBatching = new std::vector<BatchAxes>();
  u.layers = req.batching != nullptr ? req.batching : kNoBatching;
  const std::vector<BatchAxes>& layers = *u.layers;
  std::vector<int64_t>& batch_sizes = u.batch_sizes;
  batch_sizes.resize(layers.size());
  std::vector<std::vector<int>>& axis_of = u.axis_of;
  axis_of.resize(layers.size());
  // Step 2: the vmap layers, outermost first: each names one axis per
  // operand (or none), of one size, which its shape then loses.
  for (int l = static_cast<int>(layers.size()) - 1; l >= 0; --l) {
    const BatchAxes& b = layers[l];
    if (static_cast<int>(b.in_axes.size()) != n_in ||
        (!b.out_axes.empty() && static_cast<int>(b.out_axes.size()) != n_out)) {
      return absl::InvalidArgumentError(
          absl::StrCat("kernel '", name, "': vmap with ", b.in_axes.size(),
                       " in_axes and ", b.out_axes.size(), " out_axes for ",
                       n_in, " inputs and ", n_out, " outputs"));
    }
    int64_t size = -1;
    for (int i = 0; i < n_in + n_out; ++i) {
      int ax = -1;
      if (i < n_in) {
        ax = b.in_axes[i].has_value() ? *b.in_axes[i] : -1;
      } else {
        ax = b.out_axes.empty() ? 0 : b.out_axes[i - n_in];
      }
      axis_of[l].push_back(ax);
      if (ax < 0) continue;
      const std::string label =
          Label(i >= n_in, i < n_in ? i : i - n_in,
                i < n_in ? req.input_names : req.output_names);
      if (ax >= static_cast<int>(shapes[i].size())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "kernel '", name, "': vmap axis ", ax, " of ", label, " of shape [",
            absl::StrJoin(shapes[i], ","), "] is out of range"));
      }
      if (size >= 0 && shapes[i][ax] != size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "kernel '", name, "': vmap batch size ", shapes[i][ax], " of ",
            label, " (axis ", ax, ") differs from ", size));
      }
      size = shapes[i][ax];
      shapes[i].erase(shapes[i].begin() + ax);
    }
    if (size < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("kernel '", name, "': vmap maps no operand"));
    }
    batch_sizes[l] = size;
  }
  return u;
}

// The optional `out_shape` must describe the unbatched outputs.
absl::Status CheckOutShape(const PipelineRequest& req,
                           std::span<const ArrayRef> outputs,
                           const Unbatched& u) {
  const std::string& name = *req.name;
  const int n_out = static_cast<int>(outputs.size());
  const int n_in = static_cast<int>(u.shapes.size()) - n_out;
  const std::vector<std::vector<int64_t>>& shapes = u.shapes;
  const std::vector<BatchAxes>& layers = *u.layers;
  if (req.out_shape != nullptr && !req.out_shape->empty()) {
    if (static_cast<int>(req.out_shape->size()) != n_out) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kernel '", name, "': out_shape lists ", req.out_shape->size(),
          " outputs, ", n_out, " were given"));
    }
    for (int i = 0; i < n_out; ++i) {
      const ShapeDtype& want = (*req.out_shape)[i];
      const std::vector<int64_t>& got = shapes[n_in + i];
      if (want.dtype != outputs[i].dtype() || want.shape != got) {
        return absl::InvalidArgumentError(absl::StrCat(
            "kernel '", name, "': ", Label(true, i, req.output_names), " is ",
            outputs[i].ToString(), ", out_shape says ", DTypeName(want.dtype),
            "[", absl::StrJoin(want.shape, ","), "]",
            layers.empty() ? "" : " (per batch element)"));
      }
    }
  }
  return absl::OkStatus();
}

// Whether `array`'s blocks of shape `block` are laid out as `mode` asks to
// reach the body in place: its rows unit-stride and disjoint (kStridedRows), or
// every whole block one contiguous run (kContiguous; the strides are the same
// at every block position).
bool BlocksInPlace(InPlace mode, const ArrayRef& array,
                   const std::vector<int64_t>& block) {
  if (mode == InPlace::kNever) return false;
  if (mode == InPlace::kStridedRows) {
    // Unit-stride rows that do not overlap (a broadcast view is staged).
    const int r = array.rank();
    if (r == 0) return true;
    const bool unit_rows = array.dim(r - 1) <= 1 || array.strides()[r - 1] == 1;
    const bool disjoint_rows = r == 1 || array.dim(r - 2) <= 1 ||
                               array.strides()[r - 2] >= array.dim(r - 1);
    return unit_rows && disjoint_rows;
  }
  for (size_t d = 0; d < block.size(); ++d) {
    if (block[d] > array.dim(static_cast<int>(d))) return false;
  }
  const std::vector<int64_t> origin(block.size(), 0);
  absl::StatusOr<ArrayRef> first = array.Block(origin, block);
  return first.ok() && first->is_contiguous();
}

// Sets which of `op`'s blocks `spec` lets the body read or write in place;
// InvalidArgument for a value outside InPlace.
absl::Status SetInPlaceBlocks(const std::string& name, const BlockSpec& spec,
                              Operand& op) {
  const InPlace mode = spec.in_place;
  if (mode != InPlace::kNever && mode != InPlace::kContiguous &&
      mode != InPlace::kStridedRows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel '", name, "': ", op.label, " has in_place ",
        static_cast<int>(mode),
        ", not one of kNever (0), kContiguous (1), kStridedRows (2)"));
  }
  op.in_place_blocks = BlocksInPlace(mode, op.array, op.block);
  op.partial_in_place = op.in_place_blocks && mode == InPlace::kStridedRows;
  return absl::OkStatus();
}

// Operand `i` (inputs, then outputs) with its spec resolved against its
// unbatched shape (block, squeezed dimensions, index map), then lifted over
// the batch layers onto the full grid. ANY operands get no block.
absl::StatusOr<Operand> ResolveOperand(const PipelineRequest& req,
                                       std::span<const ArrayRef> inputs,
                                       std::span<const ArrayRef> outputs,
                                       const Unbatched& u, bool default_specs,
                                       int i) {
  const std::string& name = *req.name;
  const int n_in = static_cast<int>(inputs.size());
  const std::vector<std::vector<int64_t>>& shapes = u.shapes;
  const std::vector<BatchAxes>& layers = *u.layers;
  const std::vector<std::vector<int>>& axis_of = u.axis_of;
  const bool out = i >= n_in;
  const int idx = out ? i - n_in : i;
  // Step 1: the operand and its BlockSpec.
  Operand op;
  op.is_output = out;
  op.index = idx;
  op.label = Label(out, idx, out ? req.output_names : req.input_names);
  op.array = out ? outputs[idx] : inputs[i];
  BlockSpec spec;
  if (!default_specs) spec = out ? (*req.out_specs)[idx] : (*req.in_specs)[i];
  op.space = spec.memory_space;
  const std::vector<int64_t>& shape = shapes[i];
  const int rank = static_cast<int>(shape.size());
  // Step 2: an operand in ANY memory stays where it is: no blocks.
  if (op.space == MemorySpace::kAny) {
    for (size_t l = 0; l < layers.size(); ++l) {
      if (axis_of[l][i] >= 0) {
        return absl::UnimplementedError(absl::StrCat(
            "kernel '", name, "': ", op.label,
            " is in ANY memory and mapped by vmap; map only VMEM operands"));
      }
    }
    return op;
  }
  // Step 3: its block shape, checked against the operand's.
  std::vector<int64_t> block = spec.block_shape;
  if (block.empty()) block = shape;
  if (static_cast<int>(block.size()) != rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel '", name, "': block shape [", absl::StrJoin(block, ","),
        "] of ", op.label, " has rank ", block.size(), " but the operand is ",
        DTypeName(op.array.dtype()), "[", absl::StrJoin(shape, ","), "]"));
  }
  std::vector<bool> squeezed(rank, false);
  for (int d = 0; d < rank; ++d) {
    if (block[d] == kSqueezed) {
      squeezed[d] = true;
      block[d] = 1;
    } else if (block[d] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("kernel '", name, "': block shape [",
                       absl::StrJoin(spec.block_shape, ","), "] of ", op.label,
                       " has a non-positive dimension ", d));
    }
    if (!req.allow_partial_blocks && shape[d] % block[d] != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kernel '", name, "': block shape [",
          absl::StrJoin(spec.block_shape, ","), "] does not tile ", op.label,
          " of shape [", absl::StrJoin(shape, ","), "] (dimension ", d, ": ",
          shape[d], " is not a multiple of ", block[d],
          "); this kernel needs divisible shapes"));
    }
  }
  // Step 4: its index map (the first block where none is given).
  IndexMap map = spec.index_map;
  if (!map) {
    map = [rank](std::span<const int64_t>) {
      return std::vector<int64_t>(rank, 0);
    };
  }
  // Step 5: the batch layers, innermost first: each prepends a grid axis
  // and, for a mapped operand, a squeezed block dimension indexed by it.
  for (size_t l = 0; l < layers.size(); ++l) {
    const int ax = axis_of[l][i];
    if (ax >= 0) {
      block.insert(block.begin() + ax, 1);
      squeezed.insert(squeezed.begin() + ax, true);
      map = [inner = std::move(map), ax](std::span<const int64_t> g) {
        std::vector<int64_t> r = inner(g.subspan(1));
        r.insert(r.begin() + std::min<size_t>(ax, r.size()), g[0]);
        return r;
      };
    } else {
      map = [inner = std::move(map)](std::span<const int64_t> g) {
        return inner(g.subspan(1));
      };
    }
  }
  // Step 6: the resolved operand.
  op.block = std::move(block);
  op.squeezed = std::move(squeezed);
  for (size_t d = 0; d < op.block.size(); ++d) {
    if (!op.squeezed[d]) op.view_shape.push_back(op.block[d]);
  }
  op.map = std::move(map);
  // Step 7: which of its blocks the body may read or write in place.
  MESHDMA_RETURN_IF_ERROR(SetInPlaceBlocks(name, spec, op));
  return op;
}

// Every staged operand's block index at every one of the `steps` points of
// `grid`, checked against the number of blocks; outputs must not come back
// to a block they left.
absl::Status ScheduleBlocks(const std::string& name,
                            const std::vector<int64_t>& grid, int64_t steps,
                            std::vector<Operand>& ops) {
  const int grank = static_cast<int>(grid.size());
  std::vector<int64_t> gidx(grank, 0);
  for (Operand& op : ops) {
    if (op.space == MemorySpace::kAny) continue;
    op.schedule.resize(static_cast<size_t>(steps) * op.block.size());
    op.ever_staged = !op.in_place_blocks;  // Partial blocks set it below.
  }
  std::vector<std::set<std::vector<int64_t>>> finished(ops.size());
  for (int64_t s = 0; s < steps; ++s) {
    for (size_t o = 0; o < ops.size(); ++o) {
      Operand& op = ops[o];
      if (op.space == MemorySpace::kAny) continue;
      const int rank = static_cast<int>(op.block.size());
      std::vector<int64_t> b = op.map(gidx);
      if (static_cast<int>(b.size()) != rank) {
        return absl::InvalidArgumentError(absl::StrCat(
            "kernel '", name, "': the index map of ", op.label, " returned ",
            b.size(), " block indices ", Tuple(b), " at grid point ",
            Tuple(gidx), " for a rank-", rank, " operand"));
      }
      for (int d = 0; d < rank; ++d) {
        const int64_t nb = CeilDiv(op.array.dim(d), op.block[d]);
        if (b[d] < 0 || b[d] >= std::max<int64_t>(nb, 1)) {
          return absl::OutOfRangeError(absl::StrCat(
              "kernel '", name, "': the index map of ", op.label,
              " returned block ", Tuple(b), " at grid point ", Tuple(gidx),
              "; dimension ", d, " of ", op.array.ToString(), " has ", nb,
              " blocks of ", op.block[d]));
        }
      }
      if (op.in_place_blocks && !op.partial_in_place && !op.ever_staged) {
        for (int d = 0; d < rank; ++d) {
          if ((b[d] + 1) * op.block[d] > op.array.dim(d)) op.ever_staged = true;
        }
      }
      int64_t* dst = op.schedule.data() + s * rank;
      const bool changed = s > 0 && !std::equal(b.begin(), b.end(), dst - rank);
      if (changed) op.ever_changes = true;
      if (op.is_output && changed) {
        finished[o].insert(std::vector<int64_t>(dst - rank, dst));
        if (finished[o].count(b) > 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "kernel '", name, "': ", op.label, " block ", Tuple(b),
              " is revisited at grid point ", Tuple(gidx),
              " after other blocks were written; the grid points that write "
              "one output block must be consecutive"));
        }
      }
      std::copy(b.begin(), b.end(), dst);
    }
    for (int d = grank - 1; d >= 0; --d) {
      if (++gidx[d] < grid[d]) break;
      gidx[d] = 0;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PipelineRunner> PipelineRunner::Plan(
    const PipelineRequest& req, std::span<const ArrayRef> inputs,
    std::span<const ArrayRef> outputs) {
  PipelineRunner p;
  p.name_ = *req.name;
  p.stats_ = req.stats;
  const int n_in = static_cast<int>(inputs.size());
  const int n_out = static_cast<int>(outputs.size());
  const bool default_specs = req.in_specs->empty() && req.out_specs->empty();

  // 1. Check the spec counts and the grid.
  MESHDMA_RETURN_IF_ERROR(CheckRequest(req, n_in, n_out, default_specs));

  // 2. Strip the batch axes (outermost vmap first) to get the shapes the
  //    kernel's own specs were written for, and check `out_shape` on them.
  MESHDMA_ASSIGN_OR_RETURN(Unbatched u, StripBatchAxes(req, inputs, outputs));
  MESHDMA_RETURN_IF_ERROR(CheckOutShape(req, outputs, u));

  // 3. Resolve each operand's spec against its unbatched shape and lift it
  //    over the batch layers.
  for (int i = 0; i < n_in + n_out; ++i) {
    MESHDMA_ASSIGN_OR_RETURN(
        Operand op, ResolveOperand(req, inputs, outputs, u, default_specs, i));
    p.ops_.push_back(std::move(op));
  }

  // 4. The full grid: batch axes (outermost first), then the kernel's own.
  p.grid_ = req.grid;
  for (size_t l = 0; l < u.layers->size(); ++l) {
    p.grid_.insert(p.grid_.begin(), u.batch_sizes[l]);
  }
  p.batch_axes_ = static_cast<int>(u.layers->size());
  const std::optional<int64_t> steps = base_internal::CheckedProduct(p.grid_);
  if (!steps.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel '", p.name_, "': grid ", Tuple(p.grid_),
                     " has more points than fit in int64"));
  }
  p.steps_ = *steps;

  // 5. Every staged operand's block index at every grid point.
  MESHDMA_RETURN_IF_ERROR(ScheduleBlocks(p.name_, p.grid_, p.steps_, p.ops_));
  return p;
}

// Staging state of one VMEM/SMEM operand.
struct PipelineRunner::Stage {
  ArrayRef buf[2];
  ArrayRef view[2];
  SemaphoreArray sems;
  int nbuf = 1;
  int cur = 0;
  bool pending[2] = {false, false};
  AsyncCopyDescriptor desc[2];
  std::vector<int64_t> valid_view;
};

// One run of the grid loop: the body's arguments, the staging buffers, and
// the block copies between them and the operands.
class PipelineRunner::StepLoop {
 public:
  StepLoop(const PipelineRunner& runner, Scratch scratch);

  // Staging buffers (two when the block index ever changes, so the next
  // block's copy overlaps the body on the current one) and one DMA semaphore
  // per buffer; ANY operands are bound as they are.
  absl::Status AllocateStages();
  // Every grid point in order: bind its blocks, run the body, write back
  // and advance.
  absl::Status RunGrid(const KernelBody& body);
  // Waits for every copy still in flight (also after an error, so no DMA
  // outlives its buffers and every semaphore returns to 0); keeps the first
  // error in `status`.
  void Drain(absl::Status& status);

 private:
  // The array region (`starts_`, `valid_full_`) of `op`'s block at step `s`;
  // true when the block is partial.
  bool Region(const Operand& op, int64_t s);
  // Whether the body reads or writes `op`'s block (partial or not) in the
  // array.
  static bool InPlaceBlock(const Operand& op, bool partial);
  // Whether `op`'s block index at step `s` differs from step s - 1's.
  bool Changed(const Operand& op, int64_t s) const;
  absl::Status Fetch(size_t o, int64_t s, int slot);
  absl::Status WriteBack(size_t o, int64_t s, int slot);
  absl::Status WaitSlot(Stage& st, int slot);
  // Steps 3a/3b: this step's block of every staged operand, in the body's
  // arguments.
  absl::Status BindBlocks(int64_t s, bool last);
  // Step 5: write back output blocks that the next step leaves (or all at
  // the end); advance input buffers whose next block was prefetched.
  absl::Status FinishStep(int64_t s, bool last);

  const PipelineRunner& runner_;
  const std::vector<Operand>& ops_;
  PipelineStats* const stats_;
  KernelArgs args_;
  std::vector<Stage> stages_;
  std::vector<int64_t> starts_, valid_full_, zeros_;
};

PipelineRunner::StepLoop::StepLoop(const PipelineRunner& runner,
                                   Scratch scratch)
    : runner_(runner), ops_(runner.ops_), stats_(runner.stats_) {
  args_.name_ = &runner.name_;
  args_.scratch_ = std::move(scratch);
  int n_in = 0, n_out = 0;
  for (const Operand& op : ops_) (op.is_output ? n_out : n_in)++;
  args_.inputs_.resize(n_in);
  args_.outputs_.resize(n_out);
  args_.in_valid_.resize(n_in);
  args_.out_valid_.resize(n_out);
  if (stats_ != nullptr) {
    stats_->input_copies.assign(n_in, 0);
    stats_->input_in_place.assign(n_in, 0);
    stats_->output_copies.assign(n_out, 0);
    stats_->output_in_place.assign(n_out, 0);
    stats_->grid_steps = runner.steps_;
  }
  stages_.resize(ops_.size());
}

absl::Status PipelineRunner::StepLoop::AllocateStages() {
  int64_t vmem_bytes = 0;
  for (size_t o = 0; o < ops_.size(); ++o) {
    const Operand& op = ops_[o];
    Stage& st = stages_[o];
    auto& valid =
        op.is_output ? args_.out_valid_[op.index] : args_.in_valid_[op.index];
    if (op.space == MemorySpace::kAny) {
      (op.is_output ? args_.outputs_[op.index] : args_.inputs_[op.index]) =
          op.array;
      valid.assign(op.array.shape().begin(), op.array.shape().end());
      continue;
    }
    if (!op.ever_staged) continue;  // Every block is used in place.
    st.nbuf = op.ever_changes ? 2 : 1;
    for (int b = 0; b < st.nbuf; ++b) {
      MESHDMA_ASSIGN_OR_RETURN(st.buf[b],
                               AllocateSymmetric(op.array.dtype(), op.block));
      MESHDMA_ASSIGN_OR_RETURN(st.view[b], st.buf[b].Reshape(op.view_shape));
      vmem_bytes += st.buf[b].size_bytes();
    }
    MESHDMA_ASSIGN_OR_RETURN(
        st.sems,
        AllocateSemaphoreArray(SemaphoreType::kDma, st.nbuf,
                               absl::StrCat(runner_.name_, " ", op.label)));
  }
  for (const auto& s : args_.scratch_) {
    if (const ArrayRef* a = std::get_if<ArrayRef>(&s))
      vmem_bytes += a->size_bytes();
  }
  if (stats_ != nullptr) stats_->vmem_bytes = vmem_bytes;
  return absl::OkStatus();
}

bool PipelineRunner::StepLoop::Region(const Operand& op, int64_t s) {
  const int rank = static_cast<int>(op.block.size());
  const int64_t* b = op.schedule.data() + s * rank;
  starts_.assign(rank, 0);
  valid_full_.assign(rank, 0);
  zeros_.assign(rank, 0);
  bool partial = false;
  for (int d = 0; d < rank; ++d) {
    starts_[d] = b[d] * op.block[d];
    valid_full_[d] = std::min(op.block[d], op.array.dim(d) - starts_[d]);
    if (valid_full_[d] < op.block[d]) partial = true;
  }
  return partial;
}

bool PipelineRunner::StepLoop::InPlaceBlock(const Operand& op, bool partial) {
  return op.in_place_blocks && (!partial || op.partial_in_place);
}

bool PipelineRunner::StepLoop::Changed(const Operand& op, int64_t s) const {
  const size_t r = op.block.size();
  const int64_t* b = op.schedule.data() + s * r;
  return !std::equal(b, b + r, b - r);
}

absl::Status PipelineRunner::StepLoop::Fetch(size_t o, int64_t s, int slot) {
  const Operand& op = ops_[o];
  Stage& st = stages_[o];
  if (InPlaceBlock(op, Region(op, s))) {
    if (stats_ != nullptr) ++stats_->input_in_place[op.index];
    return absl::OkStatus();  // BindBlocks hands the body the array's block.
  }
  if (Region(op, s)) {
    std::memset(st.buf[slot].data(), 0, st.buf[slot].size_bytes());
  }
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef src, op.array.Block(starts_, valid_full_));
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef dst,
                           st.buf[slot].Block(zeros_, valid_full_));
  st.desc[slot] = make_async_copy(src, dst, st.sems[slot]);
  MESHDMA_RETURN_IF_ERROR(st.desc[slot].start());
  st.pending[slot] = true;
  if (stats_ != nullptr) ++stats_->input_copies[op.index];
  return absl::OkStatus();
}

absl::Status PipelineRunner::StepLoop::WriteBack(size_t o, int64_t s,
                                                 int slot) {
  const Operand& op = ops_[o];
  Stage& st = stages_[o];
  Region(op, s);
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef src,
                           st.buf[slot].Block(zeros_, valid_full_));
  MESHDMA_ASSIGN_OR_RETURN(ArrayRef dst, op.array.Block(starts_, valid_full_));
  st.desc[slot] = make_async_copy(src, dst, st.sems[slot]);
  MESHDMA_RETURN_IF_ERROR(st.desc[slot].start());
  st.pending[slot] = true;
  if (stats_ != nullptr) ++stats_->output_copies[op.index];
  return absl::OkStatus();
}

absl::Status PipelineRunner::StepLoop::WaitSlot(Stage& st, int slot) {
  if (!st.pending[slot]) return absl::OkStatus();
  st.pending[slot] = false;
  return st.desc[slot].wait();
}

absl::Status PipelineRunner::StepLoop::BindBlocks(int64_t s, bool last) {
  for (size_t o = 0; o < ops_.size(); ++o) {
    const Operand& op = ops_[o];
    if (op.space == MemorySpace::kAny) continue;
    Stage& st = stages_[o];
    if (!op.is_output) {
      // Step 3a: wait for this step's input block, then start the next
      // step's copy into the other buffer if its index changes.
      MESHDMA_RETURN_IF_ERROR(WaitSlot(st, st.cur));
      if (!last && Changed(op, s + 1)) {
        MESHDMA_RETURN_IF_ERROR(Fetch(o, s + 1, st.cur ^ 1));
      }
    } else if (s > 0 && Changed(op, s)) {
      // Step 3b: a new output block goes to the other buffer, once its
      // previous write-back has finished.
      st.cur ^= 1;
      MESHDMA_RETURN_IF_ERROR(WaitSlot(st, st.cur));
    }
    const bool partial = Region(op, s);
    st.valid_view.clear();
    for (size_t d = 0; d < op.block.size(); ++d) {
      if (!op.squeezed[d]) st.valid_view.push_back(valid_full_[d]);
    }
    (op.is_output ? args_.out_valid_ : args_.in_valid_)[op.index] =
        st.valid_view;
    ArrayRef& arg = (op.is_output ? args_.outputs_ : args_.inputs_)[op.index];
    if (InPlaceBlock(op, partial)) {
      MESHDMA_ASSIGN_OR_RETURN(ArrayRef block,
                               op.array.Block(starts_, valid_full_));
      MESHDMA_ASSIGN_OR_RETURN(arg, block.Squeeze(op.squeezed));
    } else {
      arg = st.view[st.cur];
    }
  }
  return absl::OkStatus();
}

absl::Status PipelineRunner::StepLoop::FinishStep(int64_t s, bool last) {
  for (size_t o = 0; o < ops_.size(); ++o) {
    const Operand& op = ops_[o];
    if (op.space == MemorySpace::kAny) continue;
    Stage& st = stages_[o];
    const bool leaves = last || Changed(op, s + 1);
    if (op.is_output && leaves && InPlaceBlock(op, Region(op, s))) {
      if (stats_ != nullptr) ++stats_->output_in_place[op.index];
    } else if (op.is_output && leaves) {
      MESHDMA_RETURN_IF_ERROR(WriteBack(o, s, st.cur));
    } else if (!op.is_output && !last && Changed(op, s + 1)) {
      st.cur ^= 1;
    }
  }
  return absl::OkStatus();
}

absl::Status PipelineRunner::StepLoop::RunGrid(const KernelBody& body) {
  const std::vector<int64_t>& grid = runner_.grid_;
  const int64_t steps = runner_.steps_;
  GridScope grid_scope(&grid, runner_.batch_axes_);
  std::vector<int64_t> gidx(grid.size(), 0);
  grid_scope.set_index(gidx.data());
  if (steps == 0) return absl::OkStatus();
  // Step 2 (prologue): start the first block of every input.
  for (size_t o = 0; o < ops_.size(); ++o) {
    if (ops_[o].space != MemorySpace::kAny && !ops_[o].is_output) {
      MESHDMA_RETURN_IF_ERROR(Fetch(o, 0, 0));
    }
  }
  for (int64_t s = 0; s < steps; ++s) {
    const bool last = s + 1 == steps;
    // Step 3: this step's blocks.
    MESHDMA_RETURN_IF_ERROR(BindBlocks(s, last));
    // Step 4: the body.
    absl::Status status = body(args_);
    if (!status.ok()) {
      return absl::Status(
          status.code(),
          absl::StrCat("kernel '", runner_.name_, "' failed at grid point ",
                       Tuple(gidx), ": ", status.message()));
    }
    // Step 5: write back and advance.
    MESHDMA_RETURN_IF_ERROR(FinishStep(s, last));
    for (int d = static_cast<int>(grid.size()) - 1; d >= 0; --d) {
      if (++gidx[d] < grid[d]) break;
      gidx[d] = 0;
    }
  }
  return absl::OkStatus();
}

void PipelineRunner::StepLoop::Drain(absl::Status& status) {
  for (Stage& st : stages_) {
    for (int b = 0; b < 2; ++b) {
      absl::Status w = WaitSlot(st, b);
      if (status.ok()) status = w;
    }
  }
}

absl::Status PipelineRunner::Run(const KernelBody& body, Scratch scratch) {
  StepLoop loop(*this, std::move(scratch));
  // Step 1: staging buffers and their semaphores.
  MESHDMA_RETURN_IF_ERROR(loop.AllocateStages());
  // Steps 2-5: every grid point.
  absl::Status status = loop.RunGrid(body);
  // Step 6: drain every copy still in flight.
  loop.Drain(status);
  return status;
}

}  // namespace kernels_internal

int64_t program_id(int axis) {
  const kernels_internal::GridScope* g = kernels_internal::current_grid;
  if (g == nullptr || g->index_ == nullptr || axis < 0) return -1;
  const size_t a = static_cast<size_t>(axis + g->batch_axes_);
  if (a >= g->grid_->size()) return -1;
  return g->index_[a];
}

int64_t num_programs(int axis) {
  const kernels_internal::GridScope* g = kernels_internal::current_grid;
  if (g == nullptr || axis < 0) return 0;
  const size_t a = static_cast<size_t>(axis + g->batch_axes_);
  if (a >= g->grid_->size()) return 0;
  return (*g->grid_)[a];
}

absl::Status emit_pipeline(const EmitPipelineParams& params,
                           const KernelBody& body,
                           std::span<const ArrayRef> inputs,
                           std::span<const ArrayRef> outputs) {
  kernels_internal::PipelineRequest req;
  req.name = &params.name;
  req.grid = params.grid;
  req.in_specs = &params.in_specs;
  req.out_specs = &params.out_specs;
  req.input_names = &params.input_names;
  req.output_names = &params.output_names;
  req.batching = nullptr;
  req.allow_partial_blocks = params.allow_partial_blocks;
  req.stats = params.stats;
  MESHDMA_ASSIGN_OR_RETURN(auto runner, kernels_internal::PipelineRunner::Plan(
                                            req, inputs, outputs));
  return run_scoped([&]() { return runner.Run(body, {}); });
}

}  // namespace meshdma
