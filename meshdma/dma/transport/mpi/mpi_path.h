// The runtime's entry points into MPI, declared without <mpi.h> so that only
// the files of this folder depend on MPI's headers (docs/architecture.md).
#ifndef MESHDMA_DMA_TRANSPORT_MPI_MPI_PATH_H_
#define MESHDMA_DMA_TRANSPORT_MPI_MPI_PATH_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "meshdma/dma/transport/transport.h"
#include "meshdma/topology/process_group.h"

namespace meshdma::dma_internal {

// The processes of an mpirun launch over a private duplicate of
// MPI_COMM_WORLD. Initialises MPI at MPI_THREAD_MULTIPLE when nobody has
// (once per process: it is finalised at exit, so later runtimes reuse it);
// fails when MPI is already finalised, offers a lower thread level, or a
// peer was lost earlier in this process.
absl::StatusOr<std::unique_ptr<ProcessGroup>> ConnectMpiProcesses();

// Whether this MPI moves a message between two processes of one machine
// through shared memory, read from its control variables (MPI_T): false when
// Open MPI's `btl` list leaves out its shared-memory component (`vader`, or
// `sm` from Open MPI 5) while its `pml` is not UCX, or MPICH's
// `MPIR_CVAR_NOLOCAL` is set; true otherwise, and for MPIs that expose
// neither. After `ConnectMpiProcesses`.
bool MpiUsesSharedMemoryWithinMachine();

// The transport to devices of other hosts, on a duplicate of `processes`'s
// communicator (collective). `processes` must come from
// `ConnectMpiProcesses` and outlive the transport. `pieced_bytes[r]`: puts to
// rank r of more than 60 KiB and at most this many bytes leave in pieces of
// at most 60 KiB (`RuntimeOptions::mpi_pieced_bytes`).
std::unique_ptr<Transport> MakeMpiTransport(TransportHost* host,
                                            ProcessGroup& processes,
                                            std::vector<int64_t> pieced_bytes);

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_TRANSPORT_MPI_MPI_PATH_H_
