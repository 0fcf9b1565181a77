// All-to-all over mesh axes (`jax.lax.all_to_all` with tiled blocks).
//
// `input` is split along `split_axis` into n blocks, block j being rows
// [S*j/n, S*(j+1)/n) of that dimension (S its size; S need not divide by n);
// block j goes to the member at position j, which concatenates the blocks it
// receives from positions 0..n-1 along `concat_axis`. So the output of the
// member at position r has the input's shape except: dimension `split_axis`
// is the size of block r, and dimension `concat_axis` is n times what it was
// (times block r's size when the two axes are the same). Each member may
// allocate exactly its own output shape (`AllToAllOutputShape`): the call
// pads the heap to the end of the largest member's output, so its own
// scratch and what the caller allocates next land at the same offset
// everywhere (docs/semantics.md §1).
//
// `output` must be symmetric (peers write their blocks straight into it)
// unless the group has one device; `input` may be any memory, `output`
// included (in place, as MPI_IN_PLACE: pass the same buffer viewed with the
// input's and the output's shapes). Any element type, u8 included. Each
// block is one DMA, from its place in `input` to its place in the
// receiver's `output` (strided views, single copy); on one host (kDirect)
// the sender stores it through a peer view. In place, where the blocks are
// byte ranges at the same place in input and output (split and concatenated
// along one axis that the group divides, no dimension above 1 before it),
// kDirect swaps them pairwise: member r's block j trades places with member
// j's block r, and a member's own block stays where it is. Every other
// in-place call reads a private copy of its input, made before the kernel's
// entry barrier. Where kDirect runs, members of one call run all in place or
// all out of place (a mix fails at the kernel's entry, naming both calls). With
// `CollectiveAlgorithm::kHierarchical` requested, on a group spread over
// several hosts with the same number m > 1 of its devices on each, blocks go
// through the member of the sender's host that shares the receiver's local
// index: one DMA per other host instead of m
// (collectives/internal/hierarchy.h); kAuto does not choose it.
#ifndef MESHDMA_COLLECTIVES_ALL_TO_ALL_H_
#define MESHDMA_COLLECTIVES_ALL_TO_ALL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "meshdma/collectives/options.h"
#include "meshdma/dma/array_ref.h"

namespace meshdma {

absl::Status all_to_all(const ArrayRef& input, const ArrayRef& output,
                        const std::vector<std::string>& axes, int split_axis,
                        int concat_axis, const CollectiveOptions& options = {});

// The output shape of position `index` of a group of `group_size`.
std::vector<int64_t> AllToAllOutputShape(std::span<const int64_t> input_shape,
                                         int split_axis, int concat_axis,
                                         int group_size, int index);

}  // namespace meshdma

#endif  // MESHDMA_COLLECTIVES_ALL_TO_ALL_H_
