// Everything a meshdma user includes: the runtime and its DMA and semaphore
// verbs, the kernel layer, shard_map, and the collectives. Finer headers are
// listed in docs/architecture.md.
#ifndef MESHDMA_MESHDMA_H_
#define MESHDMA_MESHDMA_H_

#include "meshdma/base/dtype.h"               // IWYU pragma: export
#include "meshdma/base/status_macros.h"       // IWYU pragma: export
#include "meshdma/collectives/collectives.h"  // IWYU pragma: export
#include "meshdma/dma/array_ref.h"            // IWYU pragma: export
#include "meshdma/dma/async_copy.h"           // IWYU pragma: export
#include "meshdma/dma/flagged_copy.h"         // IWYU pragma: export
#include "meshdma/dma/kernel.h"               // IWYU pragma: export
#include "meshdma/dma/peer_view.h"            // IWYU pragma: export
#include "meshdma/dma/runtime.h"              // IWYU pragma: export
#include "meshdma/dma/semaphore.h"            // IWYU pragma: export
#include "meshdma/dma/symmetric_memory.h"     // IWYU pragma: export
#include "meshdma/dma/trace.h"                // IWYU pragma: export
#include "meshdma/kernels/pallas_call.h"      // IWYU pragma: export
#include "meshdma/kernels/vmap.h"             // IWYU pragma: export
#include "meshdma/sharding/shard_map.h"       // IWYU pragma: export
#include "meshdma/topology/mesh.h"            // IWYU pragma: export
#include "meshdma/topology/partition_spec.h"  // IWYU pragma: export

#endif  // MESHDMA_MESHDMA_H_
