// A rank-aware GoogleTest main. Launched by mpirun, it initialises MPI, lets
// rank 0 print the usual output, makes other ranks print only their failures
// (prefixed with the rank), and fails a test on every rank when it failed on
// any. Started directly, it is the ordinary gtest main.
#include <mpi.h>

#include <cstdio>
#include <memory>

#include "gtest/gtest.h"
#include "meshdma/topology/launch.h"

namespace {

class RankAwareListener : public ::testing::EmptyTestEventListener {
 public:
  RankAwareListener(::testing::TestEventListener* inner, int rank)
      : inner_(inner), rank_(rank) {}

  void OnTestProgramStart(const ::testing::UnitTest& u) override {
    if (rank_ == 0) inner_->OnTestProgramStart(u);
  }
  void OnTestIterationStart(const ::testing::UnitTest& u, int i) override {
    if (rank_ == 0) inner_->OnTestIterationStart(u, i);
  }
  void OnEnvironmentsSetUpStart(const ::testing::UnitTest& u) override {
    if (rank_ == 0) inner_->OnEnvironmentsSetUpStart(u);
  }
  void OnTestStart(const ::testing::TestInfo& t) override {
    if (rank_ == 0) inner_->OnTestStart(t);
  }
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (rank_ == 0) {
      inner_->OnTestPartResult(r);
    } else if (r.failed()) {
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                   r.file_name() ? r.file_name() : "?", r.line_number(),
                   r.message());
    }
  }
  void OnTestEnd(const ::testing::TestInfo& t) override {
    int failed = t.result()->Failed() ? 1 : 0;
    int any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any_failed && !failed) {
      // Record the remote failure here so the test fails on every rank.
      ADD_FAILURE() << t.test_suite_name() << "." << t.name()
                    << " failed on another rank";
    }
    if (rank_ == 0) inner_->OnTestEnd(t);
  }
  void OnTestIterationEnd(const ::testing::UnitTest& u, int i) override {
    if (rank_ == 0) inner_->OnTestIterationEnd(u, i);
  }
  void OnTestProgramEnd(const ::testing::UnitTest& u) override {
    if (rank_ == 0) inner_->OnTestProgramEnd(u);
  }

 private:
  std::unique_ptr<::testing::TestEventListener> inner_;
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!meshdma::LaunchedByMpi()) return RUN_ALL_TESTS();

  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  auto* printer = listeners.Release(listeners.default_result_printer());
  listeners.Append(new RankAwareListener(printer, rank));

  int local = RUN_ALL_TESTS();
  int global = 0;
  MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return global;
}
