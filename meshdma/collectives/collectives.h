// meshdma's collectives: `ppermute`, `all_gather`, `psum_scatter`
// (reduce-scatter), `psum` / `pmax` / `pmin` / `pmean` (all-reduce) and
// `all_to_all`, over any axes of the current mesh.
//
// They are kernels written with the same API users have (dma/kernel.h,
// dma/async_copy.h, dma/semaphore.h), not calls into MPI: read them as
// examples. Each is called SPMD from inside `Runtime::Run` by every device of
// the mesh, runs one `RunKernel` (whose entry barrier keeps consecutive calls
// apart: nobody pushes into a peer still inside the previous call), and
// returns an error, never a hang, for bad arguments: unknown axes, shapes or
// dtypes that do not fit, non-symmetric outputs, reductions of u8, and (with
// `CollectiveOptions::check_peers`) a neighbour making a different call.
#ifndef MESHDMA_COLLECTIVES_COLLECTIVES_H_
#define MESHDMA_COLLECTIVES_COLLECTIVES_H_

#include "meshdma/collectives/all_gather.h"
#include "meshdma/collectives/all_reduce.h"
#include "meshdma/collectives/all_to_all.h"
#include "meshdma/collectives/options.h"
#include "meshdma/collectives/ppermute.h"
#include "meshdma/collectives/reduce_scatter.h"

#endif  // MESHDMA_COLLECTIVES_COLLECTIVES_H_
