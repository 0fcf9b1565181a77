#include "meshdma/dma/transport/mpi/mpi_process_group.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/transport/mpi/mpi_path.h"
#include "meshdma/dma/transport/mpi/mpi_status.h"

namespace meshdma::dma_internal {
namespace {

// Byte counts travel as int64 and are checked against MPI's int counts.
absl::StatusOr<int> MpiCount(size_t bytes, absl::string_view what) {
  if (bytes > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", bytes, " bytes exceed one MPI message"));
  }
  return static_cast<int>(bytes);
}

// Offsets of `lens` laid end to end; fails past one MPI message.
absl::StatusOr<std::vector<int>> Displacements(const std::vector<int64_t>& lens,
                                               absl::string_view what) {
  std::vector<int> displs(lens.size());
  int64_t total = 0;
  for (size_t r = 0; r < lens.size(); ++r) {
    MESHDMA_ASSIGN_OR_RETURN(displs[r], MpiCount(total, what));
    total += lens[r];
  }
  MESHDMA_RETURN_IF_ERROR(MpiCount(total, what).status());
  return displs;
}

std::vector<std::string> Split(const std::string& all,
                               const std::vector<int64_t>& lens,
                               const std::vector<int>& displs) {
  std::vector<std::string> out(lens.size());
  for (size_t r = 0; r < lens.size(); ++r) out[r] = all.substr(displs[r], lens[r]);
  return out;
}

}  // namespace

MpiProcessGroup::MpiProcessGroup(MPI_Comm comm, bool owns_mpi)
    : comm_(comm), owns_mpi_(owns_mpi) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiProcessGroup::~MpiProcessGroup() {
  MPI_Comm_free(&comm_);
  if (owns_mpi_) MPI_Finalize();
}

absl::StatusOr<std::vector<std::string>> MpiProcessGroup::AllGather(
    absl::string_view mine) {
  int64_t len = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lens(size_);
  MESHDMA_MPI_CALL(MPI_Allgather(&len, 1, MPI_INT64_T, lens.data(), 1,
                                 MPI_INT64_T, comm_));
  MESHDMA_ASSIGN_OR_RETURN(std::vector<int> displs,
                           Displacements(lens, "AllGather"));
  std::vector<int> counts(lens.begin(), lens.end());
  std::string all(displs.empty() ? 0 : displs.back() + lens.back(), '\0');
  MESHDMA_MPI_CALL(MPI_Allgatherv(mine.data(), static_cast<int>(len), MPI_CHAR,
                                  all.data(), counts.data(), displs.data(),
                                  MPI_CHAR, comm_));
  return Split(all, lens, displs);
}

absl::StatusOr<std::vector<std::string>> MpiProcessGroup::Gather(
    absl::string_view mine, int root) {
  int64_t len = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lens(size_);
  MESHDMA_MPI_CALL(MPI_Gather(&len, 1, MPI_INT64_T, lens.data(), 1,
                              MPI_INT64_T, root, comm_));
  std::vector<int> displs(size_), counts(size_);
  std::string all;
  if (rank_ == root) {
    MESHDMA_ASSIGN_OR_RETURN(displs, Displacements(lens, "Gather"));
    counts.assign(lens.begin(), lens.end());
    all.resize(displs.back() + lens.back());
  }
  MESHDMA_ASSIGN_OR_RETURN(int count, MpiCount(mine.size(), "Gather"));
  MESHDMA_MPI_CALL(MPI_Gatherv(mine.data(), count, MPI_CHAR, all.data(),
                               counts.data(), displs.data(), MPI_CHAR, root,
                               comm_));
  if (rank_ != root) return std::vector<std::string>{};
  return Split(all, lens, displs);
}

absl::Status MpiProcessGroup::Broadcast(std::string& bytes, int root) {
  int64_t len = static_cast<int64_t>(bytes.size());
  MESHDMA_MPI_CALL(MPI_Bcast(&len, 1, MPI_INT64_T, root, comm_));
  MESHDMA_ASSIGN_OR_RETURN(int count, MpiCount(len, "Broadcast"));
  bytes.resize(len);
  MESHDMA_MPI_CALL(MPI_Bcast(bytes.data(), count, MPI_CHAR, root, comm_));
  return absl::OkStatus();
}

absl::Status MpiProcessGroup::Barrier(absl::string_view what,
                                      absl::Duration timeout) {
  MPI_Request request;
  MESHDMA_MPI_CALL(MPI_Ibarrier(comm_, &request));
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    int done = 0;
    MESHDMA_MPI_CALL(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return absl::OkStatus();
    if (absl::Now() > deadline) {
      // The request cannot be cancelled; the process is expected to exit.
      return absl::DeadlineExceededError(
          absl::StrCat(what, " on rank ", rank_,
                       ": not every process reached it within ",
                       absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Microseconds(20));
  }
}

absl::StatusOr<std::unique_ptr<ProcessGroup>> ConnectMpiProcesses() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) {
    return absl::FailedPreconditionError(
        "MPI has been finalised in this process: a meshdma runtime cannot "
        "be created again after the one that owned MPI shut down");
  }
  int provided = 0;
  bool owns_mpi = false;
  if (!initialized) {
    MESHDMA_MPI_CALL(
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    owns_mpi = true;
  } else {
    MESHDMA_MPI_CALL(MPI_Query_thread(&provided));
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    if (owns_mpi) MPI_Finalize();
    return absl::FailedPreconditionError(absl::StrCat(
        "MPI provides thread level ", provided,
        "; meshdma needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE, ")"));
  }
  MPI_Comm comm = MPI_COMM_NULL;
  MESHDMA_MPI_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  return std::unique_ptr<ProcessGroup>(new MpiProcessGroup(comm, owns_mpi));
}

}  // namespace meshdma::dma_internal
