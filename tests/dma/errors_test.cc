// Bad input and broken contracts return errors that name the device, operand,
// shape or semaphore (docs/semantics.md §5-6): never a crash, a hang, or wrong
// data.
#include <dirent.h>
#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <limits>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/async_copy.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/semaphore.h"
#include "meshdma/dma/symmetric_memory.h"
#include "tests/dma/runtime_test_util.h"

namespace meshdma {
namespace {

using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::HasSubstr;

class ErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RuntimeOptions o = testing::TierOptions(DmaMode::kAsync);
    o.wait_timeout = absl::Seconds(2);
    auto rt = Runtime::Create(o);
    ASSERT_TRUE(rt.ok()) << rt.status();
    rt_ = std::move(*rt);
    mesh_ = std::make_unique<Mesh>(*rt_->MakeMesh1D("x"));
    n_ = rt_->num_devices();
    local_ = testing::LocalDevices(*rt_);
  }
  bool HoldsDevice(int g) const {
    return std::find(local_.begin(), local_.end(), g) != local_.end();
  }
  // Runs `body` on every device; each device records the status its body
  // returned (the errors under test), and the Run itself must succeed.
  std::vector<absl::Status> RunCollect(
      std::function<absl::Status(int me)> body) {
    std::vector<absl::Status> out(n_);
    absl::Status s = rt_->Run(*mesh_, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
      out[me] = body(me);
      return absl::OkStatus();
    });
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<Mesh> mesh_;
  int n_ = 0;
  std::vector<int> local_;
};

TEST(RuntimeLifecycleTest, VerbsOutsideRunAreErrors) {
  auto sem = AllocateSemaphore(SemaphoreType::kRegular);
  EXPECT_EQ(sem.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(sem.status().message(), HasSubstr("outside Runtime::Run"));
  EXPECT_FALSE(semaphore_signal(Semaphore(0, SemaphoreType::kRegular)).ok());
  EXPECT_FALSE(axis_index("x").ok());
  EXPECT_FALSE(device_barrier().ok());
}

TEST(RuntimeLifecycleTest, DoubleCreateAndRunAfterShutdown) {
  auto rt = Runtime::Create(testing::TierOptions(DmaMode::kEager));
  ASSERT_TRUE(rt.ok()) << rt.status();
  auto second = Runtime::Create(testing::TierOptions(DmaMode::kEager));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("already alive"));
  auto mesh = (*rt)->MakeMesh1D();
  ASSERT_TRUE(mesh.ok());
  ASSERT_TRUE((*rt)->Shutdown().ok());
  absl::Status s = (*rt)->Run(*mesh, [] { return absl::OkStatus(); });
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("after Shutdown"));
}

// This process's rank from the launcher's environment (Open MPI or MPICH)
// when it started two or more processes, else -1. Runtime options differ by
// rank before any runtime (and MPI) exists.
int LauncherRankOfTwoOrMore() {
  for (auto [rank_var, size_var] :
       {std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
        std::pair{"PMI_RANK", "PMI_SIZE"}}) {
    const char* rank = std::getenv(rank_var);
    const char* size = std::getenv(size_var);
    if (rank != nullptr && size != nullptr && std::atoi(size) >= 2) {
      return std::atoi(rank);
    }
  }
  return -1;
}

// Heap sizes are agreed at start-up on every path (shared memory and MPI):
// ranks with different sizes get an error naming each rank's size, not a
// peer's DMA past the end of a smaller heap.
TEST(RuntimeLifecycleTest, HeapSizesMustAgree) {
  const int rank = LauncherRankOfTwoOrMore();
  if (rank < 0) GTEST_SKIP() << "needs two processes under mpirun";
  RuntimeOptions o = testing::TierOptions(DmaMode::kEager);
  if (rank == 1) o.heap_bytes = 32ll << 20;
  auto rt = Runtime::Create(o);
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rt.status().message(), HasSubstr("heap sizes differ"));
  EXPECT_THAT(rt.status().message(), HasSubstr("rank 1: 33554432"));
  EXPECT_THAT(rt.status().message(), HasSubstr("rank 0: 67108864"));
  // The failure is collective: a runtime can be created afterwards.
  auto again = Runtime::Create(testing::TierOptions(DmaMode::kEager));
  EXPECT_TRUE(again.ok()) << again.status();
}

// Checked mode is agreed at start-up too: its clocks travel with every signal
// and DMA, so ranks in different modes get an error naming each rank's mode.
TEST(RuntimeLifecycleTest, CheckedModesMustAgree) {
  const int rank = LauncherRankOfTwoOrMore();
  if (rank < 0) GTEST_SKIP() << "needs two processes under mpirun";
  RuntimeOptions o = testing::TierOptions(DmaMode::kEager);
  o.check = rank == 1 ? CheckMode::kRaces : CheckMode::kOff;
  auto rt = Runtime::Create(o);
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rt.status().message(), HasSubstr("checked mode differs"));
  EXPECT_THAT(rt.status().message(), HasSubstr("rank 0: off"));
  EXPECT_THAT(rt.status().message(), HasSubstr("rank 1: races"));
  // The failure is collective: a runtime in one mode can be created next.
  o.check = CheckMode::kRaces;
  auto again = Runtime::Create(o);
  EXPECT_TRUE(again.ok()) << again.status();
}

// Shared-memory segments are private to the job and never outlive it: the
// names are gone as soon as the runtime is up, whatever happens later.
TEST(RuntimeLifecycleTest, NoSharedMemoryNamesLeftBehind) {
  auto names = [] {
    std::set<std::string> out;
    if (DIR* d = opendir("/dev/shm")) {
      while (dirent* e = readdir(d)) {
        const std::string name = e->d_name;
        if (name.rfind("meshdma-", 0) == 0) out.insert(name);
      }
      closedir(d);
    }
    return out;
  };
  // Names that appeared since `before` and are still there after up to 2 s:
  // another job on the machine may hold a name for the moment its own peers
  // take to map it, but never longer.
  auto lasting = [&](const std::set<std::string>& before) {
    std::vector<std::string> added;
    for (int attempt = 0; attempt < 40; ++attempt) {
      added.clear();
      for (const std::string& n : names()) {
        if (!before.count(n)) added.push_back(n);
      }
      if (added.empty()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return added;
  };
  // Every process looks at the same moment: between two barriers no peer is
  // half-way through start-up.
  auto sync = [] {
    if (LaunchedByMpi()) MPI_Barrier(MPI_COMM_WORLD);
  };
  sync();
  const std::set<std::string> before = names();
  sync();
  auto rt = Runtime::Create(testing::TierOptions(DmaMode::kAsync));
  ASSERT_TRUE(rt.ok()) << rt.status();
  sync();
  EXPECT_THAT(lasting(before), ::testing::IsEmpty());
  ASSERT_TRUE((*rt)->Shutdown().ok());
  EXPECT_THAT(lasting(before), ::testing::IsEmpty());
}

TEST(RuntimeLifecycleTest, NestedRunIsAnError) {
  auto rt = Runtime::Create(testing::TierOptions(DmaMode::kEager));
  ASSERT_TRUE(rt.ok()) << rt.status();
  auto mesh = (*rt)->MakeMesh1D();
  std::atomic<int> refused{0};
  absl::Status s = (*rt)->Run(*mesh, [&]() -> absl::Status {
    absl::Status inner = (*rt)->Run(*mesh, [] { return absl::OkStatus(); });
    if (inner.code() == absl::StatusCode::kFailedPrecondition &&
        inner.message().find("inside Run") != absl::string_view::npos) {
      ++refused;
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(refused.load(), (*rt)->num_local_devices());
}

TEST(RuntimeLifecycleTest, BadOptions) {
  RuntimeOptions o = testing::TierOptions(DmaMode::kAsync);
  o.heap_bytes = 100;
  auto rt = Runtime::Create(o);
  EXPECT_EQ(rt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rt.status().message(), HasSubstr("heap size 100"));

  RuntimeOptions spin = testing::TierOptions(DmaMode::kAsync);
  spin.remote_spin_ns = -1;
  rt = Runtime::Create(spin);
  EXPECT_EQ(rt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rt.status().message(), HasSubstr("remote_spin_ns -1"));

  RuntimeOptions pieced = testing::TierOptions(DmaMode::kAsync);
  pieced.mpi_pieced_bytes = int64_t{1} << 31;
  rt = Runtime::Create(pieced);
  EXPECT_EQ(rt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rt.status().message(),
              HasSubstr("mpi_pieced_bytes 2147483648 must lie in [0, "));

  setenv(kMpiPiecedBytesEnv, "-5", 1);
  rt = Runtime::Create(testing::TierOptions(DmaMode::kAsync));
  unsetenv(kMpiPiecedBytesEnv);
  EXPECT_EQ(rt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rt.status().message(), HasSubstr("MESHDMA_MPI_PIECED_BYTES"));

  setenv(kRemoteSpinNsEnv, "soon", 1);
  rt = Runtime::Create(testing::TierOptions(DmaMode::kAsync));
  unsetenv(kRemoteSpinNsEnv);
  EXPECT_EQ(rt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rt.status().message(), HasSubstr("MESHDMA_REMOTE_SPIN_NS"));
}

// The enums of RuntimeOptions hold one of their enumerators, and a heap size
// out of range names where it came from (the option or the variable).
TEST(RuntimeLifecycleTest, OptionEnumsAndHeapSizeAreNamed) {
  RuntimeOptions mode = testing::TierOptions(DmaMode::kAsync);
  mode.dma_mode = static_cast<DmaMode>(9);
  auto rt = Runtime::Create(mode);
  EXPECT_EQ(rt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rt.status().message(),
              HasSubstr("RuntimeOptions::dma_mode 9 is not one of kAsync"));
  RuntimeOptions remote = testing::TierOptions(DmaMode::kAsync);
  remote.remote_transport = static_cast<RemoteTransport>(-3);
  rt = Runtime::Create(remote);
  EXPECT_THAT(rt.status().message(),
              HasSubstr("RuntimeOptions::remote_transport -3 is not one of"));
  RuntimeOptions check = testing::TierOptions(DmaMode::kAsync);
  check.check = static_cast<CheckMode>(2);
  rt = Runtime::Create(check);
  EXPECT_THAT(rt.status().message(),
              HasSubstr("RuntimeOptions::check 2 is not one of kOff"));

  for (const char* bad : {"1", "0", "2199023255553", "lots"}) {
    setenv(kHeapBytesEnv, bad, 1);
    RuntimeOptions o = testing::TierOptions(DmaMode::kAsync);
    o.heap_bytes.reset();
    rt = Runtime::Create(o);
    EXPECT_EQ(rt.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(rt.status().message(),
                HasSubstr(absl::StrCat("MESHDMA_HEAP_BYTES='", bad, "'")));
  }
  unsetenv(kHeapBytesEnv);
  // A variable that only the collectives read is checked at Create too.
  setenv(kChannelProtocolEnv, "bogus", 1);
  rt = Runtime::Create(testing::TierOptions(DmaMode::kAsync));
  unsetenv(kChannelProtocolEnv);
  EXPECT_THAT(rt.status().message(),
              HasSubstr("MESHDMA_CHANNEL_PROTOCOL='bogus' is not one of auto"));
  // So is a TCP congestion control the kernel refuses, without TCP.
  setenv(kTcpCongestionEnv, "meshdma-none", 1);
  rt = Runtime::Create(testing::TierOptions(DmaMode::kAsync));
  EXPECT_THAT(
      rt.status().message(),
      HasSubstr("MESHDMA_TCP_CONGESTION=meshdma-none: the kernel refused it"));
  setenv(kTcpCongestionEnv, "system", 1);
  rt = Runtime::Create(testing::TierOptions(DmaMode::kAsync));
  EXPECT_TRUE(rt.ok()) << rt.status();
  rt = absl::InternalError("released");
  unsetenv(kTcpCongestionEnv);
  RuntimeOptions small = testing::TierOptions(DmaMode::kAsync);
  small.heap_bytes = kMinHeapBytes - 1;
  rt = Runtime::Create(small);
  EXPECT_THAT(rt.status().message(),
              HasSubstr("(RuntimeOptions::heap_bytes) is outside [16384, "));
}

// MESHDMA_WAIT_TIMEOUT_S=inf (or an infinite option) means no timeout: a wait
// on the slow path must not fail at once because its deadline overflowed.
// NaN, non-positive and absurd values are rejected naming the variable.
TEST(RuntimeLifecycleTest, WaitTimeoutInfinityAndAbsurdValues) {
  for (const char* bad : {"nan", "1e30", "-1", "0", "soon"}) {
    setenv(kWaitTimeoutEnv, bad, 1);
    RuntimeOptions o = testing::TierOptions(DmaMode::kAsync);
    o.wait_timeout.reset();
    auto rt = Runtime::Create(o);
    EXPECT_EQ(rt.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(rt.status().message(),
                AllOf(HasSubstr("MESHDMA_WAIT_TIMEOUT_S"), HasSubstr(bad)));
  }
  unsetenv(kWaitTimeoutEnv);
  RuntimeOptions absurd = testing::TierOptions(DmaMode::kAsync);
  absurd.wait_timeout = absl::Hours(24 * 365 * 1000);
  auto rt = Runtime::Create(absurd);
  EXPECT_EQ(rt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rt.status().message(), HasSubstr("wait_timeout"));

  for (bool from_env : {true, false}) {
    SCOPED_TRACE(from_env ? "MESHDMA_WAIT_TIMEOUT_S=inf"
                          : "wait_timeout = InfiniteDuration");
    RuntimeOptions o = testing::TierOptions(DmaMode::kAsync);
    o.spin_ns = 0;  // Straight to the deadline loop.
    o.remote_spin_ns = 0;
    if (from_env) {
      o.wait_timeout.reset();  // The option would win over the environment.
      setenv(kWaitTimeoutEnv, "inf", 1);
    } else {
      o.wait_timeout = absl::InfiniteDuration();
    }
    auto inf = Runtime::Create(o);
    unsetenv(kWaitTimeoutEnv);
    ASSERT_TRUE(inf.ok()) << inf.status();
    EXPECT_EQ((*inf)->wait_timeout(), absl::InfiniteDuration());
    auto mesh = (*inf)->MakeMesh1D("x");
    ASSERT_TRUE(mesh.ok());
    const int n = (*inf)->num_devices();
    absl::Status s = (*inf)->Run(*mesh, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
      MESHDMA_ASSIGN_OR_RETURN(auto sem,
                               AllocateSemaphore(SemaphoreType::kRegular));
      if (n < 2) return absl::OkStatus();
      // Device 0 waits (on the slow path) for a signal sent 50 ms later.
      if (me == 0) return semaphore_wait(sem, 1);
      if (me == 1) {
        absl::SleepFor(absl::Milliseconds(50));
        return semaphore_signal(sem, 1, DeviceId(0));
      }
      return absl::OkStatus();
    });
    EXPECT_TRUE(s.ok()) << s;
  }
}

TEST_F(ErrorsTest, ShapeDtypeAndSemaphoreTypeMismatches) {
  auto results = RunCollect([&](int me) -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(auto f, AllocateSymmetric<float>({4, 8}));
    MESHDMA_ASSIGN_OR_RETURN(auto g, AllocateSymmetric<float>({8, 4}));
    MESHDMA_ASSIGN_OR_RETURN(auto i, AllocateSymmetric<int32_t>({4, 8}));
    MESHDMA_ASSIGN_OR_RETURN(auto dma,
                             AllocateSemaphore(SemaphoreType::kDma, "d"));
    MESHDMA_ASSIGN_OR_RETURN(auto reg,
                             AllocateSemaphore(SemaphoreType::kRegular, "r"));
    absl::Status s = make_async_remote_copy(f, g, dma, dma, me).start();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), AllOf(HasSubstr("f32[4,8]"), HasSubstr("f32[8,4]"),
                                   HasSubstr("shape"),
                                   HasSubstr(absl::StrCat("device ", me))));
    s = make_async_copy(f, i, dma).start();
    EXPECT_THAT(s.message(), AllOf(HasSubstr("i32[4,8]"), HasSubstr("dtype")));
    s = make_async_copy(f, f, reg).start();
    EXPECT_THAT(s.message(),
                AllOf(HasSubstr("REGULAR"), HasSubstr("DMA semaphores")));
    s = semaphore_wait(dma, 1);
    EXPECT_THAT(s.message(),
                AllOf(HasSubstr("'d'"), HasSubstr("DMA semaphore")));
    s = semaphore_signal(dma, 1);
    EXPECT_THAT(s.message(), HasSubstr("only DMAs add to it"));
    s = semaphore_signal(reg, 0);
    EXPECT_THAT(s.message(), HasSubstr("increment 0"));
    s = semaphore_wait(reg, 0);
    EXPECT_THAT(s.message(), HasSubstr("value 0"));
    s = make_async_copy(f, f, dma).wait_send();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(s.message(), HasSubstr("local copy"));
    s = semaphore_signal(Semaphore(), 1);
    EXPECT_THAT(s.message(), HasSubstr("never allocated"));
    // A non-symmetric destination cannot be reached by a peer.
    std::vector<float> host(32);
    MESHDMA_ASSIGN_OR_RETURN(auto h,
                             ArrayRef::FromPointer(host.data(), DType::kF32,
                                                   std::vector<int64_t>{4, 8}));
    s = make_async_remote_copy(f, h, dma, dma, me).start();
    EXPECT_THAT(s.message(), HasSubstr("not in the symmetric heap"));
    return absl::OkStatus();
  });
  for (int g : local_) EXPECT_TRUE(results[g].ok()) << results[g];
}

TEST_F(ErrorsTest, OutOfRangeIdsSlicesAndHeapExhaustion) {
  auto results = RunCollect([&](int me) -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(auto f, AllocateSymmetric<float>({4, 8}));
    MESHDMA_ASSIGN_OR_RETURN(auto sem,
                             AllocateSemaphore(SemaphoreType::kRegular));
    absl::Status s = semaphore_signal(sem, 1, DeviceId(n_ + 3));
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(s.message(),
                AllOf(HasSubstr(absl::StrCat(n_ + 3)), HasSubstr("{x: ")));
    s = semaphore_signal(sem, 1, DeviceId::Coords({0, 0}));
    EXPECT_THAT(s.message(), HasSubstr("{x: "));
    s = semaphore_signal(sem, 1, DeviceId::Partial({{{"y"}, 0}}));
    EXPECT_THAT(s.message(), HasSubstr("'y'"));
    auto slice = f.Slice(0, 2, 3);
    EXPECT_EQ(slice.status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_THAT(slice.status().message(),
                AllOf(HasSubstr("[2, 5)"), HasSubstr("f32[4,8]")));
    auto huge = AllocateSymmetric<double>({1 << 20, 1 << 10});
    EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(huge.status().message(),
                AllOf(HasSubstr("f64[1048576,1024]"), HasSubstr("bytes left")));
    auto arr = AllocateSemaphoreArray(SemaphoreType::kRegular, 2, "pair");
    EXPECT_TRUE(arr.ok());
    EXPECT_EQ(arr->at(2).status().code(), absl::StatusCode::kOutOfRange);
    return absl::OkStatus();
  });
  for (int g : local_) EXPECT_TRUE(results[g].ok()) << results[g];
}

// Sizes are computed with overflow checks: a huge shape, slice or stride is
// an error naming the operand, never a wrapped size that passes a bounds
// check.
TEST_F(ErrorsTest, SizeArithmeticOverflowIsAnError) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t k32 = int64_t{1} << 32;
  auto results = RunCollect([&](int me) -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(auto f, AllocateSymmetric<float>({4, 8}));
    auto slice = f.Slice(0, kMax, 1);
    EXPECT_EQ(slice.status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_THAT(slice.status().message(),
                AllOf(HasSubstr("dimension 0"), HasSubstr("f32[4,8]")));
    slice = f.Slice(1, 1, kMax);
    EXPECT_EQ(slice.status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(f.At(kMax).status().code(), absl::StatusCode::kOutOfRange);
    const int64_t starts[] = {kMax, kMax};
    const int64_t sizes[] = {2, 2};
    EXPECT_EQ(f.Block(starts, sizes).status().code(),
              absl::StatusCode::kOutOfRange);

    auto huge = AllocateSymmetric(DType::kF32, {k32, k32});
    EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(
        huge.status().message(),
        AllOf(HasSubstr("AllocateSymmetric"),
              HasSubstr(absl::StrCat("device ", me)),
              HasSubstr("f32[4294967296,4294967296]"), HasSubstr("overflows")));
    // Bytes overflow although the element count fits.
    huge = AllocateSymmetric(DType::kF64, {kMax / 4});
    EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
    // Zero-sized arrays with huge other dimensions are fine.
    EXPECT_TRUE(AllocateSymmetric(DType::kF32, {0, kMax}).ok());

    auto reshaped = f.Reshape({k32, k32, 2});
    EXPECT_EQ(reshaped.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(reshaped.status().message(), HasSubstr("f32[4,8]"));

    // Squeeze drops size-1 dimensions and keeps strides and the heap offset.
    const int64_t col_start[] = {0, 3}, col_size[] = {4, 1};
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef col, f.Block(col_start, col_size));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef squeezed, col.Squeeze({false, true}));
    EXPECT_EQ(squeezed.ToString(), "f32[4]{strides 8}");
    EXPECT_EQ(squeezed.heap_offset(), col.heap_offset());
    EXPECT_EQ(squeezed.data(), col.data());
    auto bad = f.Squeeze({true, false});
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(bad.status().message(),
                AllOf(HasSubstr("f32[4,8]"), HasSubstr("dimension 0")));
    EXPECT_EQ(f.Squeeze({true}).status().code(),
              absl::StatusCode::kInvalidArgument);

    std::vector<float> host(4);
    auto view = ArrayRef::FromPointer(host.data(), DType::kF32,
                                      std::vector<int64_t>{k32, k32});
    EXPECT_EQ(view.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(
        view.status().message(),
        AllOf(HasSubstr("f32[4294967296,4294967296]"), HasSubstr("overflows")));
    view = ArrayRef::FromPointer(host.data(), DType::kF32,
                                 std::vector<int64_t>{4, 4},
                                 std::vector<int64_t>{kMax / 2, 1});
    EXPECT_EQ(view.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(view.status().message(), HasSubstr("strides"));
    return absl::OkStatus();
  });
  for (int g : local_) EXPECT_TRUE(results[g].ok()) << results[g];
}

// Handles are validated where they enter: a semaphore or symmetric view forged
// at a reserved offset, a cast enum, or a handle of the wrong type is an
// error, and counts saturate instead of wrapping.
TEST_F(ErrorsTest, ForgedHandlesAndBadEnumsAreErrors) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  auto results = RunCollect([&](int me) -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(auto reg,
                             AllocateSemaphore(SemaphoreType::kRegular, "r"));
    MESHDMA_ASSIGN_OR_RETURN(auto dma,
                             AllocateSemaphore(SemaphoreType::kDma, "d"));
    const std::string device = absl::StrCat("device ", me);
    absl::Status s = semaphore_signal(Semaphore(0, SemaphoreType::kRegular));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), AllOf(HasSubstr("@0"), HasSubstr("reserved"),
                                   HasSubstr(device)));
    s = semaphore_signal(Semaphore(0, SemaphoreType::kBarrier), 1, me);
    EXPECT_THAT(s.message(), HasSubstr("reserved device-barrier cell"));
    s = semaphore_signal(
        Semaphore(reg.heap_offset(), static_cast<SemaphoreType>(7)));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("invalid type 7"));
    EXPECT_EQ(AllocateSemaphore(static_cast<SemaphoreType>(7)).status().code(),
              absl::StatusCode::kInvalidArgument);
    // The REGULAR semaphore's offset used as a DMA semaphore.
    MESHDMA_ASSIGN_OR_RETURN(auto f, AllocateSymmetric<float>({4}));
    s = make_async_copy(f, f, Semaphore(reg.heap_offset(), SemaphoreType::kDma))
            .start();
    EXPECT_THAT(s.message(), AllOf(HasSubstr("'r'"), HasSubstr("REGULAR")));
    // Not a semaphore at all: data.
    s = semaphore_signal(Semaphore(f.heap_offset(), SemaphoreType::kRegular));
    EXPECT_THAT(s.message(), HasSubstr("not a live semaphore"));
    auto bad_dtype = AllocateSymmetric(static_cast<DType>(42), {4});
    EXPECT_EQ(bad_dtype.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(bad_dtype.status().message(), HasSubstr("invalid dtype 42"));
    // A DeviceIdType outside the enum is an error, not a MESH id.
    s = semaphore_signal(reg, 1, DeviceId(me), static_cast<DeviceIdType>(5));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(),
                HasSubstr("device id type (DeviceIdType) 5 of device id"));
    // A symmetric view forged at offset 0 (the barrier cells) cannot be a
    // DMA's destination, on this device or a peer.
    MESHDMA_ASSIGN_OR_RETURN(
        auto base, ArrayRef::FromPointer(f.data() - f.heap_offset(),
                                         DType::kF32, std::vector<int64_t>{4}));
    MESHDMA_ASSIGN_OR_RETURN(auto forged,
                             ArrayRef::Symmetric(base.data(), 0, DType::kF32,
                                                 std::vector<int64_t>{4}));
    s = make_async_remote_copy(f, forged, dma, dma, me).start();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), AllOf(HasSubstr("dst"), HasSubstr("user part")));
    // Counts saturate: INT64_MAX twice does not wrap negative.
    EXPECT_TRUE(semaphore_signal(reg, kMax).ok());
    EXPECT_TRUE(semaphore_signal(reg, kMax).ok());
    auto count = semaphore_read(reg);
    EXPECT_EQ(*count, kMax);
    EXPECT_TRUE(semaphore_wait(reg, kMax).ok());
    return absl::OkStatus();
  });
  for (int g : local_) EXPECT_TRUE(results[g].ok()) << results[g];
}

// A descriptor started again skips the checks it passed only while nothing
// they depend on has changed: once the kernel that allocated its semaphore
// has returned, the same descriptor is an error naming the dead semaphore,
// not a DMA into freed memory; and a descriptor that failed its checks still
// fails them when started again.
TEST_F(ErrorsTest, DescriptorStartedAgainIsCheckedAgainAfterItsScopeCloses) {
  auto results = RunCollect([&](int me) -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(auto src, AllocateSymmetric<float>({4}));
    MESHDMA_ASSIGN_OR_RETURN(auto dst, AllocateSymmetric<float>({4}));
    MESHDMA_ASSIGN_OR_RETURN(auto from_peer, AllocateSymmetric<float>({4}));
    AsyncCopyDescriptor local, remote;
    MESHDMA_RETURN_IF_ERROR(
        RunKernel({.name = "scoped"}, [&]() -> absl::Status {
          MESHDMA_ASSIGN_OR_RETURN(
              auto sems, AllocateSemaphoreArray(SemaphoreType::kDma, 2, "d"));
          local = make_async_copy(src, dst, sems[0]);
          remote = make_async_remote_copy(src, from_peer, sems[0], sems[1],
                                          (me + 1) % n_);
          for (int i = 0; i < 3; ++i) {  // Checked once, started 3 times.
            MESHDMA_RETURN_IF_ERROR(local.start());
            MESHDMA_RETURN_IF_ERROR(local.wait());
            MESHDMA_RETURN_IF_ERROR(remote.start());
            MESHDMA_RETURN_IF_ERROR(remote.wait());
            // The peer's next copy into `from_peer` after this one landed.
            MESHDMA_RETURN_IF_ERROR(device_barrier());
          }
          return absl::OkStatus();
        }));
    for (AsyncCopyDescriptor* copy : {&local, &remote}) {
      const absl::Status s = copy->start();
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_THAT(s.message(), AllOf(HasSubstr("not a live semaphore"),
                                     HasSubstr(absl::StrCat("device ", me))));
    }
    // A REGULAR semaphore where a DMA one belongs fails every start.
    MESHDMA_ASSIGN_OR_RETURN(auto reg,
                             AllocateSemaphore(SemaphoreType::kRegular, "r"));
    AsyncCopyDescriptor wrong = make_async_copy(
        src, dst, Semaphore(reg.heap_offset(), SemaphoreType::kDma));
    for (int i = 0; i < 2; ++i) {
      EXPECT_THAT(wrong.start().message(), HasSubstr("REGULAR"));
    }
    return absl::OkStatus();
  });
  for (int g : local_) EXPECT_TRUE(results[g].ok()) << results[g];
}

// §5 exit contract: an over-signalled semaphore is reported at kernel exit
// with the device, the semaphore's name and its count.
TEST_F(ErrorsTest, OverSignalIsAnExitContractError) {
  auto results = RunCollect([&](int me) -> absl::Status {
    return RunKernel({.name = "over_signal"}, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(
          auto sem, AllocateSemaphore(SemaphoreType::kRegular, "ready"));
      MESHDMA_RETURN_IF_ERROR(semaphore_signal(sem, 2, (me + 1) % n_));
      MESHDMA_RETURN_IF_ERROR(semaphore_wait(sem, 1));
      return device_barrier();  // Both signals have landed everywhere.
    });
  });
  for (int g : local_) {
    EXPECT_EQ(results[g].code(), absl::StatusCode::kFailedPrecondition)
        << results[g];
    EXPECT_THAT(
        results[g].message(),
        AllOf(HasSubstr("over_signal"), HasSubstr(absl::StrCat("device ", g)),
              HasSubstr("'ready'"), HasSubstr("is 1, expected 0")));
  }
}

// §5: a DMA that is started but never waited leaves its semaphores counted at
// exit: the sender's send semaphore and the receiver's recv semaphore.
TEST_F(ErrorsTest, NeverWaitedDmaIsReported) {
  auto results = RunCollect([&](int me) -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(auto buf, AllocateSymmetric<int32_t>({256}));
    MESHDMA_ASSIGN_OR_RETURN(auto out, AllocateSymmetric<int32_t>({256}));
    return RunKernel({.name = "forgetful"}, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(auto send,
                               AllocateSemaphore(SemaphoreType::kDma, "send"));
      MESHDMA_ASSIGN_OR_RETURN(auto recv,
                               AllocateSemaphore(SemaphoreType::kDma, "recv"));
      MESHDMA_RETURN_IF_ERROR(
          make_async_remote_copy(buf, out, send, recv, (me + 1) % n_).start());
      // Only the receive side is waited; the send side is forgotten.
      MESHDMA_RETURN_IF_ERROR(
          make_async_remote_copy(buf, out, send, recv, (me + 1) % n_)
              .wait_recv());
      return device_barrier();
    });
  });
  for (int g : local_) {
    EXPECT_EQ(results[g].code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(results[g].message(),
                AllOf(HasSubstr("'send'"), HasSubstr("is 1024, expected 0")));
  }
}

// §6: waiting for more than ever arrives fails after the timeout with a
// diagnostic instead of hanging; the other devices are not left hanging
// either (their waits are aborted).
TEST_F(ErrorsTest, OverWaitTimesOutWithDiagnostic) {
  absl::Status s = rt_->Run(*mesh_, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    return RunKernel({.name = "over_wait"}, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(
          auto sem, AllocateSemaphore(SemaphoreType::kRegular, "token"));
      MESHDMA_RETURN_IF_ERROR(semaphore_signal(sem, 1, (me + 1) % n_));
      return semaphore_wait(sem, 2);  // Only one signal ever comes.
    });
  });
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("Run on mesh {x: "));
  // Root causes come first: a timeout with expected and current counts and a
  // picture of what the local devices were doing.
  EXPECT_THAT(s.message(),
              AnyOf(HasSubstr("timed out after 2s"), HasSubstr("abandoned")));
  if (s.code() == absl::StatusCode::kDeadlineExceeded) {
    EXPECT_THAT(
        s.message(),
        AllOf(HasSubstr("'token'"), HasSubstr("expected >= 2, current 1"),
              HasSubstr("DMAs in flight"), HasSubstr("Local devices:")));
  }
}

// A body that fails on one device makes waits elsewhere end with Aborted,
// naming the failed device, well before the timeout.
TEST_F(ErrorsTest, FailureOnOneDeviceAbortsTheOthers) {
  if (n_ < 2) GTEST_SKIP() << "needs two devices";
  const absl::Time start = absl::Now();
  absl::Status s = rt_->Run(*mesh_, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    return RunKernel({.name = "one_fails"}, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(auto sem,
                               AllocateSemaphore(SemaphoreType::kRegular));
      if (me == 0) return absl::InternalError("device zero gives up");
      return semaphore_wait(sem, 1);  // Nobody signals.
    });
  });
  EXPECT_FALSE(s.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  if (HoldsDevice(0)) {
    EXPECT_THAT(s.message(), HasSubstr("device zero gives up"));
  } else {
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
    EXPECT_THAT(s.message(), HasSubstr("device 0"));
  }
}

// Devices whose symmetric allocations land at different offsets fail at the
// next device barrier (here the kernel's entry barrier) with an error naming
// the first allocation that differs and its shape, on every device, never
// a hang or a write into the wrong bytes.
TEST_F(ErrorsTest, DifferentAllocationSizesFailAtTheEntryBarrier) {
  if (n_ < 2) GTEST_SKIP() << "needs two devices";
  const absl::Time start = absl::Now();
  absl::Status s = rt_->Run(*mesh_, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    MESHDMA_RETURN_IF_ERROR(
        AllocateSymmetric<float>({me == 0 ? 1024 : 2048}).status());
    MESHDMA_RETURN_IF_ERROR(AllocateSymmetric<float>({16}).status());
    return RunKernel({.name = "after_uneven"},
                     []() -> absl::Status { return absl::OkStatus(); });
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("symmetric allocations differ"),
                    HasSubstr("allocation #0 is f32["), HasSubstr("device ")));
  const bool holds_both = HoldsDevice(0) && HoldsDevice(1);
  if (HoldsDevice(0)) {
    EXPECT_THAT(s.message(), HasSubstr("f32[1024]"));
  }
  if (!HoldsDevice(0) || holds_both) {
    EXPECT_THAT(s.message(), HasSubstr("f32[2048]"));
  }
}

// `device_barrier_compare`: true on every device when all pass the same
// value, false on every device when one differs (the barriers stay in step:
// a plain barrier follows), and differing allocations are still the
// allocation error.
TEST_F(ErrorsTest, DeviceBarrierCompareTellsEveryDevice) {
  if (n_ < 2) GTEST_SKIP() << "needs two devices";
  absl::Status s = rt_->Run(*mesh_, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    for (int round = 0; round < 3; ++round) {
      MESHDMA_ASSIGN_OR_RETURN(bool same, device_barrier_compare(42 + round));
      if (!same) return absl::InternalError("equal values compared unequal");
      MESHDMA_ASSIGN_OR_RETURN(
          bool differ,
          device_barrier_compare(me == n_ - 1 ? uint64_t{1} << 40 : 42));
      if (differ) return absl::InternalError("a different value went unseen");
      MESHDMA_RETURN_IF_ERROR(device_barrier());
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  s = rt_->Run(*mesh_, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    MESHDMA_RETURN_IF_ERROR(
        AllocateSymmetric<float>({me == 0 ? 1024 : 2048}).status());
    MESHDMA_RETURN_IF_ERROR(AllocateSymmetric<float>({16}).status());
    return device_barrier_compare(5).status();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("symmetric allocations differ"));
}

// A device in `device_barrier` meeting devices that compare a value fails
// naming both kinds of barrier; the others learn that the values differ.
TEST_F(ErrorsTest, DeviceBarrierAgainstCompareFails) {
  if (n_ < 2) GTEST_SKIP() << "needs two devices";
  absl::Status s = rt_->Run(*mesh_, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    if (me == 0) return device_barrier();
    MESHDMA_ASSIGN_OR_RETURN(bool same, device_barrier_compare(9));
    if (same) return absl::InternalError("a plain barrier went unseen");
    return absl::OkStatus();
  });
  if (HoldsDevice(0)) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(s.message(), HasSubstr("compares its call at entry"));
  } else {
    EXPECT_TRUE(s.ok()) << s;
  }
}

// The same order of sizes but semaphores and arrays swapped: the offsets
// agree, the kinds do not. `device_barrier` checks too.
TEST_F(ErrorsTest, SwappedAllocationKindsFailAtDeviceBarrier) {
  if (n_ < 2) GTEST_SKIP() << "needs two devices";
  absl::Status s = rt_->Run(*mesh_, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    return RunKernel(
        {.name = "swapped", .entry_barrier = false}, [&]() -> absl::Status {
          if (me == 0) {
            MESHDMA_RETURN_IF_ERROR(
                AllocateSemaphore(SemaphoreType::kDma, "s").status());
          }
          MESHDMA_RETURN_IF_ERROR(AllocateSymmetric<float>({16}).status());
          if (me != 0) {
            MESHDMA_RETURN_IF_ERROR(
                AllocateSemaphore(SemaphoreType::kDma, "s").status());
          }
          return device_barrier();
        });
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("symmetric allocations differ"),
                                 HasSubstr("allocation #")));
  if (HoldsDevice(0) && HoldsDevice(1)) {
    EXPECT_THAT(s.message(), AllOf(HasSubstr("1 DMA semaphore at heap offset"),
                                   HasSubstr("f32[16] at heap offset")));
  }
}

// Shapes that differ but occupy the same padded bytes keep every later
// offset symmetric: not an error.
TEST_F(ErrorsTest, SamePaddedSizeIsNotAMismatch) {
  absl::Status s = rt_->Run(*mesh_, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, axis_index("x"));
    MESHDMA_RETURN_IF_ERROR(
        AllocateSymmetric(me == 0 ? DType::kF32 : DType::kI32, {me + 1})
            .status());
    MESHDMA_RETURN_IF_ERROR(AllocateSymmetric<float>({16}).status());
    return device_barrier();
  });
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace meshdma
