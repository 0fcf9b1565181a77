// The runtime's entry points into MPI, declared without <mpi.h> so that only
// the files of this folder depend on MPI's headers (docs/architecture.md).
#ifndef MESHDMA_DMA_TRANSPORT_MPI_MPI_PATH_H_
#define MESHDMA_DMA_TRANSPORT_MPI_MPI_PATH_H_

#include <cstdint>
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

// The largest message, MPI's own header included, that this MPI sends
// eagerly through shared memory to a process of this machine; a longer one
// waits for the receiver to match it (a rendezvous). Read from Open MPI's
// `btl_vader_eager_limit` (`btl_sm_eager_limit` from Open MPI 5) under its
// ob1 PML; 0 where unknown (MPICH, UCX) or where MPI uses no shared memory.
// After `ConnectMpiProcesses`.
int64_t MpiSharedMemoryEagerBytes();

// The largest payload that this MPI moves on its fastest path through
// shared memory to a process of this machine: 256 bytes under Open MPI's
// ob1 PML with its shared-memory BTL (measured on Open MPI 4.1: a message
// of up to 256 bytes took 0.16-0.21 us one way, one of 288 bytes or more
// 0.31-0.37 us: `mpirun -np 2 mpi-path-probe`); 0 where
// MpiSharedMemoryEagerBytes is 0. After `ConnectMpiProcesses`.
int64_t MpiSharedMemoryFastBytes();

// Whether this MPI yields the core when its progress finds nothing to do:
// Open MPI's `mpi_yield_when_idle`, which mpirun turns on where it places
// more processes than a node has slots (`--oversubscribe`). False where
// unknown (MPICH). After `ConnectMpiProcesses`.
bool MpiYieldsWhenIdle();

// The payload of one message that, with meshdma's header, a view layout and
// room for MPI's own header, stays within `message_bytes` (at least 1 KiB,
// at most 60 KiB).
int64_t MpiPieceBytesWithin(int64_t message_bytes);

// How puts to one rank are cut: puts of more than `piece_bytes` (the most
// payload one message carries, at most 60 KiB) and at most `pieced_bytes`
// leave in pieces of at most `piece_bytes`
// (`RuntimeOptions::mpi_pieced_bytes`). With `fast_bytes` (0: none), a put
// of packed bytes whose message would just pass MPI's fastest path leaves
// as two messages that each stay on it: a payload of more than
// `fast_bytes` less a header, and at most twice that.
struct MpiPeerLimits {
  int64_t pieced_bytes = 0;
  int64_t piece_bytes = 0;
  int64_t fast_bytes = 0;
};

// The transport to devices of other hosts, on a duplicate of `processes`'s
// communicator (collective), cutting puts to rank r by `limits[r]`.
// `processes` must come from `ConnectMpiProcesses` and outlive the
// transport.
std::unique_ptr<PolledTransport> MakeMpiTransport(
    TransportHost* host, ProcessGroup& processes,
    std::vector<MpiPeerLimits> limits);

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_TRANSPORT_MPI_MPI_PATH_H_
