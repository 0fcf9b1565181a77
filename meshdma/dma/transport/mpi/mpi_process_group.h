// `ProcessGroup` over an MPI communicator: the host collectives that the
// launch description, traces and `shard_map` use under mpirun.
#ifndef MESHDMA_DMA_TRANSPORT_MPI_MPI_PROCESS_GROUP_H_
#define MESHDMA_DMA_TRANSPORT_MPI_MPI_PROCESS_GROUP_H_

#include <mpi.h>

#include <string>
#include <vector>

#include "meshdma/topology/process_group.h"

namespace meshdma::dma_internal {

class MpiProcessGroup : public ProcessGroup {
 public:
  // Takes ownership of `comm` (freed on destruction); with `owns_mpi`, also
  // finalises MPI then.
  MpiProcessGroup(MPI_Comm comm, bool owns_mpi);
  ~MpiProcessGroup() override;

  MPI_Comm comm() const { return comm_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::StatusOr<std::vector<std::string>> AllGather(
      absl::string_view mine) override;
  absl::StatusOr<std::vector<std::string>> Gather(absl::string_view mine,
                                                  int root) override;
  absl::Status Broadcast(std::string& bytes, int root) override;
  absl::Status Barrier(absl::string_view what,
                       absl::Duration timeout) override;

 private:
  MPI_Comm comm_;
  bool owns_mpi_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_TRANSPORT_MPI_MPI_PROCESS_GROUP_H_
