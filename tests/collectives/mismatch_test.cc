// Devices of a group that disagree about a collective (which one, its size,
// its element type) get an error naming both calls at once, on every path,
// never the wait timeout; collectives whose members' outputs differ in size
// by design work without padding.
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "collectives_test_util.h"
#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/collectives.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"
#include "meshdma/topology/launch.h"

namespace meshdma {
namespace {

// A mismatch must be reported before any wait reaches this.
constexpr int kTimeoutSeconds = 10;

// A runtime with 3 threads alone, the launch's devices under mpirun, and a
// short wait timeout.
absl::StatusOr<std::unique_ptr<Runtime>> FreshRuntime() {
  RuntimeOptions o = testing::OptionsFor(LaunchedByMpi() ? 0 : 3);
  o.wait_timeout = absl::Seconds(kTimeoutSeconds);
  return Runtime::Create(o);
}

// Runs `fn` on every device of a fresh runtime's 1-D mesh.
absl::Status RunFresh(const std::function<absl::Status()>& fn) {
  MESHDMA_ASSIGN_OR_RETURN(auto rt, FreshRuntime());
  MESHDMA_ASSIGN_OR_RETURN(Mesh mesh, rt->MakeMesh1D("x"));
  return rt->Run(mesh, fn);
}

// `fn` fails before any wait times out, with every needle in the message
// ("a|b": either).
void ExpectPromptError(const std::function<absl::Status()>& fn,
                       std::vector<std::string> needles) {
  auto rt = FreshRuntime();
  ASSERT_TRUE(rt.ok()) << rt.status();
  auto mesh = (*rt)->MakeMesh1D("x");
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  const absl::Time start = absl::Now();
  absl::Status s = (*rt)->Run(*mesh, fn);
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(took, absl::Seconds(kTimeoutSeconds)) << s;
  EXPECT_FALSE(absl::StrContains(s.message(), "timed out")) << s;
  for (const std::string& needle : needles) {
    bool found = false;
    for (absl::string_view either : absl::StrSplit(needle, '|')) {
      found = found || absl::StrContains(s.message(), either);
    }
    EXPECT_TRUE(found) << "wanted '" << needle << "' in: " << s;
  }
}

CollectiveOptions OneShot() {
  CollectiveOptions o;
  o.algorithm = CollectiveAlgorithm::kOneShot;
  return o;
}

// --- The one-shot path (inputs above the channel's row size). Every device
// allocates the same arrays, so only the calls differ.

TEST(OneShotMismatch, PsumAgainstAllGather) {
  ExpectPromptError(
      []() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
        MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
        MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({8192}));
        MESHDMA_ASSIGN_OR_RETURN(auto o, AllocateSymmetric<float>({8192 * n}));
        if (me == 0) return psum(a, a, {"x"}, OneShot());
        return all_gather(a, o, {"x"}, /*tiled=*/true);
      },
      {"this device calls", "psum of 8192 f32", "all_gather of 8192 f32"});
}

// Sizes in these tests stay on one side of the channel's largest row (16 KiB
// on one host, 4 KiB there for ppermute, all_gather and all_to_all; 256 KiB
// across hosts): a size mismatch that straddles it sends one member through
// the channel and the other through a kernel, which the call notes find
// (ChannelMismatch.SizesOnBothSidesOfTheChannel).
TEST(OneShotMismatch, ElementCount) {
  ExpectPromptError(
      []() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
        MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({32768}));
        MESHDMA_ASSIGN_OR_RETURN(auto in,
                                 a.Slice(0, 0, me == 0 ? 16384 : 32768));
        return psum(in, in, {"x"}, OneShot());
      },
      {"psum of 16384 f32", "psum of 32768 f32"});
}

TEST(OneShotMismatch, ElementType) {
  ExpectPromptError(
      []() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
        MESHDMA_ASSIGN_OR_RETURN(auto d, AllocateSymmetric<double>({16384}));
        MESHDMA_ASSIGN_OR_RETURN(auto f, AllocateSymmetric<float>({16384}));
        const ArrayRef& a = me == 0 ? d : f;
        return psum(a, a, {"x"}, OneShot());
      },
      {"psum of 16384 f64", "psum of 16384 f32"});
}

TEST(OneShotMismatch, ReduceScatterElementCount) {
  ExpectPromptError(
      []() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
        MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
        const int64_t count = (me == 0 ? 16384 : 32768) * n;
        MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({32768 * n}));
        MESHDMA_ASSIGN_OR_RETURN(auto o, AllocateSymmetric<float>({32768}));
        MESHDMA_ASSIGN_OR_RETURN(auto in, a.Slice(0, 0, count));
        MESHDMA_ASSIGN_OR_RETURN(auto out, o.Slice(0, 0, count / n));
        return psum_scatter(in, out, {"x"}, OneShot());
      },
      {"this device calls psum_scatter of", "psum_scatter of"});
}

// Each device allocated its own input size: the psum kernel's own
// allocations land at different offsets. The neighbour check, which uses no
// allocation, names both calls; a device whose mismatched peer is not its
// ring neighbour may instead find that peer's row without a signature (its
// data landed elsewhere) and say so.
TEST(OneShotMismatch, ElementCountOwnAllocations) {
  ExpectPromptError(
      []() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
        MESHDMA_ASSIGN_OR_RETURN(
            auto a, AllocateSymmetric<float>({me == 0 ? 16384 : 32768}));
        return psum(a, a, {"x"}, OneShot());
      },
      {"psum of 16384 f32|carries no call signature",
       "psum of 32768 f32|carries no call signature"});
}

// --- Plans that differ (the kernel's algorithm, the pieces its rings cut,
// ppermute's permutation): the call signature carries the plan, so the
// kernel's entry names both plans at once.

CollectiveOptions Algorithm(CollectiveAlgorithm a, int64_t chunk_bytes) {
  CollectiveOptions o;
  o.algorithm = a;
  o.chunk_bytes = chunk_bytes;
  return o;
}

TEST(PlanMismatch, Algorithm) {
  ExpectPromptError(
      []() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
        MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({65536}));
        // Kernels on every launch (a one-shot this size takes the channel
        // across hosts).
        return psum(a, a, {"x"},
                    Algorithm(me == 0 ? CollectiveAlgorithm::kRing
                                      : CollectiveAlgorithm::kBidirectionalRing,
                              256 << 10));
      },
      {"psum of 65536 f32", "elements (sum, ring", "bidirectional_ring"});
}

TEST(PlanMismatch, ChunkBytes) {
  ExpectPromptError(
      []() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
        MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({65536}));
        return psum(a, a, {"x"},
                    Algorithm(CollectiveAlgorithm::kRing,
                              me == 0 ? 16 << 10 : 64 << 10));
      },
      {"psum of 65536 f32", "in pieces #"});
}

// 128 KiB and 256 KiB pieces had one 3-bit hash (the signature's before it
// had 4 bits); they differ in the 4-bit hash.
TEST(PlanMismatch, ChunkBytesOnceOneHash) {
  ExpectPromptError(
      []() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
        MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({65536}));
        return psum(a, a, {"x"},
                    Algorithm(CollectiveAlgorithm::kRing,
                              me == 0 ? 128 << 10 : 256 << 10));
      },
      {"psum of 65536 f32", "in pieces #"});
}

// 128 KiB and 512 KiB pieces have one 4-bit hash: a kernel over the whole
// mesh compares the sizes themselves at its entry.
TEST(PlanMismatch, ChunkBytesOfOneHash) {
  ExpectPromptError(
      []() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
        MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({65536}));
        return psum(a, a, {"x"},
                    Algorithm(CollectiveAlgorithm::kRing,
                              me == 0 ? 128 << 10 : 512 << 10));
      },
      {"psum of 65536 f32", "plans cut different pieces",
       "chunk_bytes 131072, num_buffers 2|chunk_bytes 524288, num_buffers 2"});
}

// The same over part of the mesh (a mesh {x: 2, y: 2} of 4 threads, psum
// over x): the calls' signatures agree, and the ring's pieces differ (2 MiB
// parts in pieces of 128 KiB against 512 KiB). The call notes carry the
// pieces themselves, so a wait blocked for a while names both devices'.
// Threads only: the notes are compared where they are readable, and the
// mpirun layouts of this binary have no 4 devices on one host.
TEST(PlanMismatch, ChunkBytesOfOneHashOverPartOfTheMesh) {
  if (LaunchedByMpi()) GTEST_SKIP() << "a mesh of 4 threads";
  RuntimeOptions o = testing::OptionsFor(4);
  o.wait_timeout = absl::Seconds(kTimeoutSeconds);
  auto rt = Runtime::Create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  auto mesh = (*rt)->MakeMesh({{"x", 2}, {"y", 2}});
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  const absl::Time start = absl::Now();
  absl::Status s = (*rt)->Run(*mesh, []() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
    MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({1 << 20}));
    return psum(
        a, a, {"x"},
        Algorithm(CollectiveAlgorithm::kRing, me == 0 ? 128 << 10 : 512 << 10));
  });
  ASSERT_FALSE(s.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(kTimeoutSeconds)) << s;
  EXPECT_FALSE(absl::StrContains(s.message(), "timed out")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "plans cut different pieces"))
      << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "chunk_bytes 131072") &&
              absl::StrContains(s.message(), "chunk_bytes 524288"))
      << s;
}

// A kernel's ppermute: every member shifts by one, device 0 without the
// pair that wraps around.
TEST(PlanMismatch, PpermutePermutation) {
  ExpectPromptError(
      []() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
        MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
        MESHDMA_ASSIGN_OR_RETURN(auto in, AllocateSymmetric<float>({65536}));
        MESHDMA_ASSIGN_OR_RETURN(auto out, AllocateSymmetric<float>({65536}));
        std::vector<std::pair<int, int>> perm;
        for (int i = 0; i < (me == 0 ? n - 1 : n); ++i) {
          perm.emplace_back(i, (i + 1) % n);
        }
        CollectiveOptions o;
        o.algorithm = CollectiveAlgorithm::kRing;  // A kernel at any size.
        return ppermute(in, out, {"x"}, perm, o);
      },
      {"ppermute of 65536 f32", "permutation #"});
}

// --- A device that skips a call: its next call is the others' current one,
// so the calls match until it reaches the end of its Run while the others
// still enter a kernel. The check at the end of the Run meets that kernel's
// entry and names both calls with their numbers.

// Device 1 skips the first of `calls` psums (ring kernels on every launch).
absl::Status SkipFirstPsum(int calls) {
  MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
  MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({65536}));
  for (int call = me == 1 ? 1 : 0; call < calls; ++call) {
    MESHDMA_RETURN_IF_ERROR(
        psum(a, a, {"x"}, Algorithm(CollectiveAlgorithm::kRing, 256 << 10)));
  }
  return absl::OkStatus();
}

TEST(SkippedCall, Psum) {
  ExpectPromptError([] { return SkipFirstPsum(3); },
                    {"psum of 65536 f32", "collective kernel #3",
                     "end of its Run after 2 collective kernels"});
}

// The same program without the skip: the check at the end of every Run
// passes, Run after Run.
TEST(SkippedCall, NoneSkippedPasses) {
  auto rt = FreshRuntime();
  ASSERT_TRUE(rt.ok()) << rt.status();
  auto mesh = (*rt)->MakeMesh1D("x");
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  for (int run = 0; run < 3; ++run) {
    absl::Status s = (*rt)->Run(*mesh, []() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
      MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({65536}));
      for (int64_t i = 0; i < 65536; ++i) a.data_as<float>()[i] = 1;
      for (int call = 0; call < 2; ++call) {
        MESHDMA_RETURN_IF_ERROR(psum(
            a, a, {"x"}, Algorithm(CollectiveAlgorithm::kRing, 256 << 10)));
      }
      const float want = static_cast<float>(n) * n;
      if (a.data_as<float>()[65535] != want) {
        return absl::InternalError(absl::StrCat(
            "psum twice: ", a.data_as<float>()[65535], ", want ", want));
      }
      return absl::OkStatus();
    });
    EXPECT_TRUE(s.ok()) << "run " << run << ": " << s;
  }
}

// A ppermute of 16 f32 over the channel, each device passing
// `perm_of(me, n)`.
absl::Status SmallPpermute(
    const std::function<std::vector<std::pair<int, int>>(int me, int n)>&
        perm_of) {
  MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
  MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
  MESHDMA_ASSIGN_OR_RETURN(auto in, AllocateSymmetric<float>({16}));
  MESHDMA_ASSIGN_OR_RETURN(auto out, AllocateSymmetric<float>({16}));
  return ppermute(in, out, {"x"}, perm_of(me, n));
}

// --- Calls over the channel (small ones): the same checks, from the call
// notes that a wait blocked for a while compares (read in place on one
// host, sent by the slow waits and the ends of Runs across hosts).

// Device 1 skips the first of `calls` psums of 16 f32 (the channel).
absl::Status SkipFirstSmallPsum(int calls) {
  MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
  MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({16}));
  for (int call = me == 1 ? 1 : 0; call < calls; ++call) {
    MESHDMA_RETURN_IF_ERROR(psum(a, a, {"x"}));
  }
  return absl::OkStatus();
}

TEST(SkippedCall, OverTheChannel) {
  ExpectPromptError(
      [] { return SkipFirstSmallPsum(3); },
      {"psum of 16 f32", "end of its Run after 2 calls over this group"});
}

// Device 0's input is 16 f32, which takes the channel; the others' 131072
// f32 (512 KiB, above the largest row on every path) take a kernel, whose
// entry waits for device 0.
TEST(ChannelMismatch, SizesOnBothSidesOfTheChannel) {
  ExpectPromptError(
      []() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
        MESHDMA_ASSIGN_OR_RETURN(auto a, AllocateSymmetric<float>({131072}));
        MESHDMA_ASSIGN_OR_RETURN(auto in, a.Slice(0, 0, me == 0 ? 16 : 131072));
        return psum(in, in, {"x"});
      },
      {"psum of 16 f32", "psum of 131072 f32", "over the group's channel",
       "in a kernel"});
}

// A peer that is only slow (it sleeps before its calls, well past the time
// after which waits compare the notes) is no mismatch, on the channel and
// in kernels, Run after Run; the sums are right.
TEST(CallNotes, SlowPeerIsNoMismatch) {
  auto rt = FreshRuntime();
  ASSERT_TRUE(rt.ok()) << rt.status();
  auto mesh = (*rt)->MakeMesh1D("x");
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  for (int run = 0; run < 2; ++run) {
    absl::Status s = (*rt)->Run(*mesh, []() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
      MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
      MESHDMA_ASSIGN_OR_RETURN(auto small, AllocateSymmetric<float>({16}));
      MESHDMA_ASSIGN_OR_RETURN(auto large, AllocateSymmetric<float>({65536}));
      for (int64_t i = 0; i < 16; ++i) small.data_as<float>()[i] = 1;
      for (int64_t i = 0; i < 65536; ++i) large.data_as<float>()[i] = 1;
      for (int call = 0; call < 2; ++call) {
        if (me == 1) absl::SleepFor(absl::Milliseconds(100));
        MESHDMA_RETURN_IF_ERROR(psum(small, small, {"x"}));
        if (me == 1) absl::SleepFor(absl::Milliseconds(100));
        MESHDMA_RETURN_IF_ERROR(psum(large, large, {"x"}));
      }
      // The slow member ends its Run last.
      if (me == 1) absl::SleepFor(absl::Milliseconds(100));
      const float want = static_cast<float>(n) * n;
      if (small.data_as<float>()[15] != want ||
          large.data_as<float>()[65535] != want) {
        return absl::InternalError(
            absl::StrCat("psum twice: ", small.data_as<float>()[15], " and ",
                         large.data_as<float>()[65535], ", want ", want));
      }
      return absl::OkStatus();
    });
    EXPECT_TRUE(s.ok()) << "run " << run << ": " << s;
  }
}

// A ppermute over the channel whose differing member sends no row: every
// member i > 0 sends to i - 1 (no pair wraps around), device 0 leaves out
// (1, 0) and so expects nothing. Device 0 ends its Run at once while device
// 1's row to it is never consumed: the call notes show the two
// permutations.
TEST(ChannelMismatch, PpermuteWhoseDifferingMemberSendsNothing) {
  ExpectPromptError(
      [] {
        return SmallPpermute([](int me, int n) {
          std::vector<std::pair<int, int>> perm;
          for (int i = me == 0 ? 2 : 1; i < n; ++i) perm.emplace_back(i, i - 1);
          return perm;
        });
      },
      {"ppermute of 16 f32", "permutation #"});
}

// --- Outputs whose size differs per member by design. Each member allocates
// exactly its own output, last; the collective, and what the caller
// allocates after it, must not depend on which member is largest.

// in[row, c] of member `src`.
float AllToAllInput(int src, int64_t row, int64_t c) {
  return static_cast<float>(1000 * src + 16 * row + c);
}

// An all_to_all of f32[rows, 16] with `rows` not divisible by n, then a psum
// on a buffer allocated after it; both checked against a naive reference.
absl::Status UnevenAllToAll(int split_axis, int concat_axis) {
  MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
  MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
  const int64_t rows = 3 * n + 1, cols = 16;
  MESHDMA_ASSIGN_OR_RETURN(auto in, AllocateSymmetric<float>({rows, cols}));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < cols; ++c) {
      in.data_as<float>()[i * cols + c] = AllToAllInput(me, i, c);
    }
  }
  const int64_t in_shape[] = {rows, cols};
  const std::vector<int64_t> shape =
      AllToAllOutputShape(in_shape, split_axis, concat_axis, n, me);
  MESHDMA_ASSIGN_OR_RETURN(auto out, AllocateSymmetric<float>(shape));
  MESHDMA_RETURN_IF_ERROR(all_to_all(in, out, {"x"}, split_axis, concat_axis));
  // Block r of every member is rows [b, b + len) of its input.
  const int64_t b = rows * me / n, len = rows * (me + 1) / n - b;
  for (int src = 0; src < n; ++src) {
    for (int64_t i = 0; i < len; ++i) {
      for (int64_t c = 0; c < cols; ++c) {
        // Output position of (src, i, c): concatenated along `concat_axis`.
        const int64_t at = concat_axis == 0 ? (src * len + i) * cols + c
                                            : i * (n * cols) + src * cols + c;
        const float want = AllToAllInput(src, b + i, c);
        if (out.data_as<float>()[at] != want) {
          return absl::InternalError(
              absl::StrCat("device ", me, ": out[", at, "] is ",
                           out.data_as<float>()[at], ", want ", want));
        }
      }
    }
  }
  // Allocated after the uneven output: the same offset everywhere again.
  MESHDMA_ASSIGN_OR_RETURN(auto after, AllocateSymmetric<float>({8192}));
  for (int64_t i = 0; i < 8192; ++i) after.data_as<float>()[i] = 1;
  MESHDMA_RETURN_IF_ERROR(psum(after, after, {"x"}, OneShot()));
  if (after.data_as<float>()[8191] != n) {
    return absl::InternalError("psum after all_to_all: wrong sum");
  }
  return absl::OkStatus();
}

TEST(UnevenOutputs, AllToAllDirect) {
  absl::Status s = RunFresh([] { return UnevenAllToAll(0, 1); });
  EXPECT_TRUE(s.ok()) << s;
}

TEST(UnevenOutputs, AllToAllSameAxes) {
  absl::Status s = RunFresh([] { return UnevenAllToAll(0, 0); });
  EXPECT_TRUE(s.ok()) << s;
}

// psum_scatter of n * 32 + 1 f32: segments of 32 and 33 elements, whose
// padded sizes differ; each member allocates its own segment.
absl::Status UnevenPsumScatter(CollectiveAlgorithm algorithm) {
  MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
  MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
  const int64_t count = 32 * n + 1;
  MESHDMA_ASSIGN_OR_RETURN(auto in, AllocateSymmetric<float>({count}));
  for (int64_t i = 0; i < count; ++i) {
    in.data_as<float>()[i] = static_cast<float>(i + me);
  }
  const auto [begin, len] = ScatterSegment(count, n, me);
  MESHDMA_ASSIGN_OR_RETURN(auto out, AllocateSymmetric<float>({len}));
  CollectiveOptions o;
  o.algorithm = algorithm;
  MESHDMA_RETURN_IF_ERROR(psum_scatter(in, out, {"x"}, o));
  for (int64_t i = 0; i < len; ++i) {
    // sum over members m of (begin + i + m).
    const float want = static_cast<float>(n * (begin + i) + n * (n - 1) / 2);
    if (out.data_as<float>()[i] != want) {
      return absl::InternalError(absl::StrCat("device ", me, ": out[", i,
                                              "] is ", out.data_as<float>()[i],
                                              ", want ", want));
    }
  }
  MESHDMA_ASSIGN_OR_RETURN(auto after, AllocateSymmetric<float>({64}));
  after.data_as<float>()[0] = 1;
  MESHDMA_RETURN_IF_ERROR(psum(after, after, {"x"}));
  return after.data_as<float>()[0] == n
             ? absl::OkStatus()
             : absl::InternalError("psum after psum_scatter: wrong sum");
}

TEST(UnevenOutputs, PsumScatterRing) {
  absl::Status s =
      RunFresh([] { return UnevenPsumScatter(CollectiveAlgorithm::kRing); });
  EXPECT_TRUE(s.ok()) << s;
}

TEST(UnevenOutputs, PsumScatterOneShot) {
  absl::Status s =
      RunFresh([] { return UnevenPsumScatter(CollectiveAlgorithm::kOneShot); });
  EXPECT_TRUE(s.ok()) << s;
}

TEST(UnevenOutputs, PsumScatterAuto) {
  absl::Status s =
      RunFresh([] { return UnevenPsumScatter(CollectiveAlgorithm::kAuto); });
  EXPECT_TRUE(s.ok()) << s;
}

// A size mismatch that is an error: members allocate and pass inputs of
// different element counts to psum_scatter. The kernel's entry barrier
// names the allocation and its shape at once.
TEST(UnevenOutputs, DifferentInputCountsAreAnError) {
  ExpectPromptError(
      []() -> absl::Status {
        MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
        MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
        const int64_t count = me == 0 ? 64 * n : 64 * n + 1;
        MESHDMA_ASSIGN_OR_RETURN(auto in, AllocateSymmetric<float>({count}));
        MESHDMA_ASSIGN_OR_RETURN(
            auto out,
            AllocateSymmetric<float>({ScatterSegment(count, n, me).second}));
        CollectiveOptions o;
        o.algorithm = CollectiveAlgorithm::kRing;
        return psum_scatter(in, out, {"x"}, o);
      },
      {"symmetric allocations differ", "allocation #0 is f32["});
}

// On a fresh runtime, a psum of 2^16 f32 (above the one-shot size) from
// `input(me, storage)`, filled with 1 + me, into a symmetric output, with
// `options`: where `reads_peers(launch)`, the call fails at once on every
// device, naming psum; elsewhere it gives the sum. `input` makes the same
// symmetric allocations on every device; `storage` is the device's ordinary
// memory, for a private input.
void ExpectPsumFailsWhereReadsPeers(
    const std::function<bool(const Launch&)>& reads_peers,
    const CollectiveOptions& options,
    const std::function<absl::StatusOr<ArrayRef>(
        int me, int64_t count, std::vector<float>& storage)>& input) {
  auto rt = FreshRuntime();
  ASSERT_TRUE(rt.ok()) << rt.status();
  auto mesh = (*rt)->MakeMesh1D("x");
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  const absl::Time start = absl::Now();
  absl::Status s = (*rt)->Run(*mesh, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int me, logical_device_id());
    MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
    const int64_t count = 1 << 16;
    MESHDMA_ASSIGN_OR_RETURN(auto out, AllocateSymmetric<float>({count}));
    std::vector<float> storage;
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef in, input(me, count, storage));
    for (int64_t i = 0; i < count; ++i) in.data_as<float>()[i] = 1.0f + me;
    MESHDMA_RETURN_IF_ERROR(psum(in, out, {"x"}, options));
    const float want = n * (n + 1) / 2.0f;
    for (int64_t i = 0; i < count; ++i) {
      if (out.data_as<float>()[i] != want) {
        return absl::InternalError(
            absl::StrCat("device ", me, ": out[", i, "] is ",
                         out.data_as<float>()[i], ", want ", want));
      }
    }
    return absl::OkStatus();
  });
  if (!reads_peers((*rt)->launch())) {
    EXPECT_TRUE(s.ok()) << s;
    return;
  }
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(kTimeoutSeconds)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "psum")) << s;
}

// The `races` ctest variants turn checked mode on through the environment.
bool CheckedMode() {
  const char* check = std::getenv("MESHDMA_CHECK");
  return check != nullptr && std::string(check) == "races";
}

// An input of `count` f32 at offset 0 (even devices) or 64 elements (odd) of
// one symmetric allocation, the same on every device.
absl::StatusOr<ArrayRef> SymmetricInputsAtTwoOffsets(int me, int64_t count,
                                                     std::vector<float>&) {
  MESHDMA_ASSIGN_OR_RETURN(auto buf, AllocateSymmetric<float>({count + 64}));
  return buf.Slice(0, me % 2 == 0 ? 0 : 64, count);
}

// Whether the single-copy steps of a psum on `launch` read inputs of
// devices in other processes (kDirect on one host of several processes, the
// hierarchy's steps inside hosts that hold several devices in several
// processes), at the reader's own offsets; threads of one process read each
// other's inputs where they are (through boards).
bool ReadsInputsAcrossProcesses(const Launch& launch) {
  if (launch.num_hosts() == 1) return launch.num_processes() > 1;
  return launch.num_devices() / launch.num_hosts() >= 2 &&
         launch.num_processes() > launch.num_hosts();
}

// The hierarchical all-reduce reads its host members' inputs in place (its
// steps inside a host run single-copy), so members whose inputs sit at
// different offsets of one symmetric allocation get an error naming both
// calls, never another part of the buffer. Where no peer reads the input
// (one host: the flat ring; one device per host), or where each host is one
// process (boards), the same call is correct.
TEST(HostDirectMismatch, InputsAtDifferentOffsets) {
  CollectiveOptions o;
  o.algorithm = CollectiveAlgorithm::kHierarchical;
  ExpectPsumFailsWhereReadsPeers(
      [](const Launch& launch) {
        return launch.num_hosts() > 1 && ReadsInputsAcrossProcesses(launch);
      },
      o, SymmetricInputsAtTwoOffsets);
}

// kDirect reads its peers' inputs in place: across processes through peer
// views at the caller's own offset, so members whose symmetric inputs sit at
// different offsets of one allocation get an error naming both calls, never
// another part of the buffer. Threads of one process read each input where
// it is (through boards), and the same call is correct there, as where no
// peer reads an input (checked mode, several hosts: the ring).
TEST(DirectMismatch, InputsAtDifferentOffsets) {
  const bool checked = CheckedMode();
  CollectiveOptions o;
  o.algorithm = CollectiveAlgorithm::kDirect;
  ExpectPsumFailsWhereReadsPeers(
      [checked](const Launch& launch) {
        return !checked && launch.num_hosts() == 1 &&
               ReadsInputsAcrossProcesses(launch);
      },
      o, SymmetricInputsAtTwoOffsets);
}

// A psum whose members' inputs are of different kinds, private on device 0
// and symmetric elsewhere: where peers in other processes read inputs
// (kDirect on one host, the hierarchy's steps inside a host), members with a
// private input copy it for the peers into their outputs, so the members
// would read different buffers; the call is an error naming psum on every
// device, at once. Where no peer reads an input (checked mode, one device
// per host), or where the readers are threads of one process (boards), the
// same call is correct.
TEST(DirectMismatch, PrivateAndSymmetricInputs) {
  const bool checked = CheckedMode();
  ExpectPsumFailsWhereReadsPeers(
      [checked](const Launch& launch) {
        return !checked && ReadsInputsAcrossProcesses(launch);
      },
      CollectiveOptions(),
      [](int me, int64_t count,
         std::vector<float>& storage) -> absl::StatusOr<ArrayRef> {
        MESHDMA_ASSIGN_OR_RETURN(auto symmetric,
                                 AllocateSymmetric<float>({count}));
        if (me != 0) return symmetric;
        storage.resize(count);
        const int64_t shape[] = {count};
        return ArrayRef::FromPointer(storage.data(), DType::kF32, shape);
      });
}

// --- ppermute over the channel: device 0 leaves out the pair that wraps
// around; the member that receives its row finds the other permutation in
// the row's signature.

TEST(ChannelMismatch, PpermutePermutation) {
  ExpectPromptError(
      [] {
        return SmallPpermute([](int me, int n) {
          std::vector<std::pair<int, int>> perm;
          for (int i = 0; i < (me == 0 ? n - 1 : n); ++i) {
            perm.emplace_back(i, (i + 1) % n);
          }
          return perm;
        });
      },
      {"ppermute of 16 f32", "permutation #"});
}

}  // namespace
}  // namespace meshdma
