// The MPI process group's host collectives against their definitions, with
// contributions of different lengths (empty ones too) moved in rounds far
// smaller than one contribution, as the 64-bit lengths of large traces are.
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshdma/dma/transport/mpi/mpi_process_group.h"

namespace meshdma::dma_internal {
namespace {

// Rank r's contribution: (r * 37) % 101 bytes spelling its rank and index.
std::string Contribution(int r) {
  std::string s((r * 37) % 101, '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(r * 7 + i);
  return s;
}

class ProcessGroupTest : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) GTEST_SKIP() << "needs mpirun";
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    group_ = std::make_unique<MpiProcessGroup>(comm, GetParam());
  }
  std::unique_ptr<MpiProcessGroup> group_;
};

// A root outside the group is an error on every rank before any message,
// and an MPI error on the group's communicator comes back as a code instead
// of ending the job (MPI_ERRORS_RETURN).
TEST_P(ProcessGroupTest, BadRootIsAStatusNotAnAbort) {
  const int n = group_->size();
  for (const int root : {n, -1}) {
    std::string bytes = "x";
    absl::Status s = group_->Broadcast(bytes, root);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()),
                ::testing::HasSubstr(absl::StrCat(
                    "Broadcast: root ", root, " is not a rank of this launch (",
                    n, " processes)")));
    auto gathered = group_->Gather("x", root);
    EXPECT_EQ(gathered.status().code(), absl::StatusCode::kInvalidArgument);
  }
  int64_t word = 0;
  EXPECT_NE(MPI_Bcast(&word, 1, MPI_INT64_T, n, group_->comm()), MPI_SUCCESS);
  // The group still works.
  std::string bytes = group_->rank() == 0 ? "kept" : "";
  ASSERT_TRUE(group_->Broadcast(bytes, 0).ok());
  EXPECT_EQ(bytes, "kept");
}

TEST_P(ProcessGroupTest, AllGatherInRounds) {
  auto all = group_->AllGather(Contribution(group_->rank()));
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), group_->size());
  for (int r = 0; r < group_->size(); ++r) {
    EXPECT_EQ((*all)[r], Contribution(r)) << "rank " << r;
  }
}

TEST_P(ProcessGroupTest, GatherInRounds) {
  const int root = group_->size() - 1;
  auto all = group_->Gather(Contribution(group_->rank()), root);
  ASSERT_TRUE(all.ok()) << all.status();
  if (group_->rank() != root) {
    EXPECT_TRUE(all->empty());
    return;
  }
  ASSERT_EQ(all->size(), group_->size());
  for (int r = 0; r < group_->size(); ++r) {
    EXPECT_EQ((*all)[r], Contribution(r)) << "rank " << r;
  }
}

TEST_P(ProcessGroupTest, BroadcastInRounds) {
  std::string expected(1000, '\0');
  for (size_t i = 0; i < expected.size(); ++i)
    expected[i] = static_cast<char>(i);
  std::string bytes = group_->rank() == 0 ? expected : std::string("stale");
  ASSERT_TRUE(group_->Broadcast(bytes, 0).ok());
  EXPECT_EQ(bytes, expected);
}

// Rounds of 1 and 7 bytes, and the default (one round).
INSTANTIATE_TEST_SUITE_P(ChunkSizes, ProcessGroupTest,
                         ::testing::Values(1, 7, int64_t{1} << 31));

}  // namespace
}  // namespace meshdma::dma_internal
