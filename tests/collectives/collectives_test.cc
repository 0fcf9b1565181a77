// Every collective x algorithm x dtype x size against a naive reference that
// each device computes from the inputs' closed form, on 1 to 8 devices as
// threads and, under mpirun, on the launch's processes (shared memory, or MPI
// with MESHDMA_FORCE_INTERHOST=1). Each device checks its own output; a case
// that fails returns an error naming the collective, algorithm, dtype, size
// and device.
#include "meshdma/collectives/collectives.h"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives_test_util.h"
#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/internal/direct.h"
#include "meshdma/collectives/internal/hierarchy.h"
#include "meshdma/collectives/internal/plan.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"
#include "meshdma/topology/launch.h"

namespace meshdma {
namespace {

using testing::CheckArray;
using testing::ForEachRuntime;
using testing::InputValue;
using testing::Store;

// A smaller sweep under mpirun, and in instrumented builds, keeps the whole
// suite within minutes.
bool Small() { return LaunchedByMpi() || testing::kInstrumentedBuild; }

struct Caller {
  int me = 0;  // LOGICAL id.
  std::vector<int> members;
  int pos = 0;
  int n() const { return static_cast<int>(members.size()); }
};

absl::StatusOr<Caller> Who(const std::vector<std::string>& axes) {
  Caller c;
  MESHDMA_ASSIGN_OR_RETURN(c.me, logical_device_id());
  MESHDMA_ASSIGN_OR_RETURN(const Mesh* mesh, current_mesh());
  MESHDMA_ASSIGN_OR_RETURN(c.members, mesh->Group(c.me, axes));
  c.pos = static_cast<int>(std::find(c.members.begin(), c.members.end(), c.me) -
                           c.members.begin());
  return c;
}

// Memory that is not in the symmetric heap, for inputs.
struct HostArray {
  std::vector<double> storage;
  ArrayRef ref;
  HostArray(DType t, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    storage.resize(n * DTypeSize(t) / sizeof(double) + 1);
    ref = *ArrayRef::FromPointer(storage.data(), t, shape);
  }
};

void Fill(const ArrayRef& a, int device) {
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    Store(a, i, InputValue(device, i, a.dtype()));
  }
}

double Reference(ReduceOp op, const std::vector<int>& members, int64_t i,
                 DType t) {
  double acc = InputValue(members[0], i, t);
  for (size_t j = 1; j < members.size(); ++j) {
    const double v = InputValue(members[j], i, t);
    if (op == ReduceOp::kMax) acc = std::max(acc, v);
    if (op == ReduceOp::kMin) acc = std::min(acc, v);
    if (op == ReduceOp::kSum || op == ReduceOp::kMean) acc += v;
  }
  if (op == ReduceOp::kMean) {
    acc /= static_cast<double>(members.size());
    if (!testing::IsFloat(t)) acc = std::trunc(acc);
  }
  return acc;
}

struct ReduceCase {
  CollectiveAlgorithm algorithm;
  DType dtype;
  int64_t count;
  ReduceOp op;
  bool in_place;
  int64_t chunk_bytes;
  int64_t one_shot_max_bytes = CollectiveOptions().one_shot_max_bytes;
  int64_t lane_chunk_bytes = 0;  // 0: chunk_bytes.
  // Out of place, the input in symmetric memory, which kDirect and the
  // hierarchy's steps inside a host read in place; else in private memory.
  bool symmetric_input = false;
  std::string Describe(absl::string_view what,
                       const std::vector<std::string>& axes) const {
    return absl::StrCat(what, " ", ReduceOpName(op), " ", DTypeName(dtype), "[",
                        count, "] ", CollectiveAlgorithmName(algorithm),
                        in_place ? " in place" : "", " chunk ", chunk_bytes,
                        " one_shot_max ", one_shot_max_bytes, " lane chunk ",
                        lane_chunk_bytes > 0 ? lane_chunk_bytes : chunk_bytes,
                        " over {", absl::StrJoin(axes, ","), "}");
  }
};

std::vector<ReduceCase> ReduceCases() {
  std::vector<ReduceCase> cases;
  const std::vector<CollectiveAlgorithm> algorithms = {
      CollectiveAlgorithm::kRing,    CollectiveAlgorithm::kBidirectionalRing,
      CollectiveAlgorithm::kOneShot, CollectiveAlgorithm::kHierarchical,
      CollectiveAlgorithm::kDirect,  CollectiveAlgorithm::kAuto};
  std::vector<DType> dtypes = {DType::kF32, DType::kF64, DType::kBF16,
                               DType::kF16, DType::kI32, DType::kI64};
  std::vector<int64_t> counts = {1, 13, 1003, 40009};
  if (Small()) {
    dtypes = {DType::kF32, DType::kBF16, DType::kI64};
    counts = {13, 1003, 40009};
  }
  for (CollectiveAlgorithm a : algorithms) {
    for (DType t : dtypes) {
      std::vector<ReduceOp> ops = {ReduceOp::kSum};
      if (t == DType::kF32 || t == DType::kI32) {
        ops = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kMean};
      } else if (t == DType::kBF16 || t == DType::kI64) {
        ops = {ReduceOp::kSum, ReduceOp::kMean};
      }
      for (ReduceOp op : ops) {
        for (int64_t count : counts) {
          cases.push_back({a, t, count, op, false, 256 << 10});
          if ((count == 40009 && a == CollectiveAlgorithm::kAuto) ||
              ((count == 13 || count == 40009) &&
               (a == CollectiveAlgorithm::kHierarchical ||
                a == CollectiveAlgorithm::kDirect))) {
            // A symmetric input out of place: kDirect and the hierarchy's
            // steps inside a host read it in place (13: some members' parts
            // are empty); the other cases' private inputs kDirect copies for
            // the peers.
            ReduceCase c{a, t, count, op, false, 256 << 10};
            c.symmetric_input = true;
            cases.push_back(c);
          }
          if (count == 1003) {
            // Many pieces per segment through two slots: the capacity
            // handshake at work; and in place.
            cases.push_back({a, t, count, op, true, 256});
            if (op == ReduceOp::kSum)
              cases.push_back({a, t, count, op, false, 64});
          }
        }
      }
    }
  }
  return cases;
}

absl::Status PsumCase(const ReduceCase& c,
                      const std::vector<std::string>& axes) {
  return run_scoped([&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(Caller who, Who(axes));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef out,
                             AllocateSymmetric(c.dtype, {c.count}));
    HostArray host(c.dtype, {c.count});
    ArrayRef in = c.in_place ? out : host.ref;
    if (!c.in_place && c.symmetric_input) {
      MESHDMA_ASSIGN_OR_RETURN(in, AllocateSymmetric(c.dtype, {c.count}));
    }
    Fill(in, who.me);
    CollectiveOptions o;
    o.algorithm = c.algorithm;
    o.chunk_bytes = c.chunk_bytes;
    o.lane_chunk_bytes =
        c.lane_chunk_bytes > 0 ? c.lane_chunk_bytes : c.chunk_bytes;
    o.one_shot_max_bytes = c.one_shot_max_bytes;
    const std::string what = absl::StrCat(c.Describe("all_reduce", axes),
                                          " on LOGICAL device ", who.me);
    absl::Status s = all_reduce(c.op, in, out, axes, o);
    if (!s.ok())
      return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
    return CheckArray(what, out, [&](int64_t i) {
      return Reference(c.op, who.members, i, c.dtype);
    });
  });
}

absl::Status ReduceScatterCase(const ReduceCase& c,
                               const std::vector<std::string>& axes) {
  return run_scoped([&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(Caller who, Who(axes));
    const auto [begin, len] = ScatterSegment(c.count, who.n(), who.pos);
    HostArray host(c.dtype, {c.count});
    ArrayRef in = host.ref, out;
    if (c.in_place) {
      MESHDMA_ASSIGN_OR_RETURN(in, AllocateSymmetric(c.dtype, {c.count}));
      out = *in.Slice(0, begin, len);
    } else {
      if (c.symmetric_input) {
        MESHDMA_ASSIGN_OR_RETURN(in, AllocateSymmetric(c.dtype, {c.count}));
      }
      // The same allocation on every device (the largest segment), so that
      // later allocations stay symmetric; the output is its prefix.
      MESHDMA_ASSIGN_OR_RETURN(
          out, AllocateSymmetric(c.dtype, {(c.count + who.n() - 1) / who.n()}));
      out = *out.Slice(0, 0, len);
    }
    Fill(in, who.me);
    CollectiveOptions o;
    o.algorithm = c.algorithm;
    o.chunk_bytes = c.chunk_bytes;
    o.one_shot_max_bytes = c.one_shot_max_bytes;
    const std::string what = absl::StrCat(c.Describe("reduce_scatter", axes),
                                          " on LOGICAL device ", who.me);
    absl::Status s = reduce_scatter(c.op, in, out, axes, o);
    if (!s.ok())
      return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
    const int64_t b = begin;
    return CheckArray(what, out, [&](int64_t i) {
      return Reference(c.op, who.members, b + i, c.dtype);
    });
  });
}

void RunOnMesh(Runtime& rt, const Mesh& mesh,
               const std::function<absl::Status()>& fn) {
  absl::Status s = rt.Run(mesh, fn);
  EXPECT_TRUE(s.ok()) << "mesh " << mesh.ToString() << ": " << s;
}

// Runs `fn` on every device of a 1-D mesh "x" of each runtime of the suite.
void RunOnEveryMesh1D(const std::function<absl::Status()>& fn) {
  ForEachRuntime([&](Runtime& rt) {
    auto mesh = rt.MakeMesh1D("x");
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    RunOnMesh(rt, *mesh, fn);
  });
}

// kHierarchical's exchange between hosts as a ring (parts above the one-shot
// size and the ring's scratch bound), many pieces per part.
TEST(Collectives, HierarchicalLaneRing) {
  std::vector<ReduceCase> cases;
  for (DType t : {DType::kF32, DType::kBF16, DType::kI32, DType::kI64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMean}) {
      for (int64_t count : {int64_t{1003}, int64_t{40009}}) {
        cases.push_back({CollectiveAlgorithm::kHierarchical, t, count, op,
                         count == 1003, 256, 0});
      }
      // A symmetric input out of place: read in place inside each host.
      ReduceCase c{
          CollectiveAlgorithm::kHierarchical, t, 40009, op, false, 256, 0};
      c.symmetric_input = true;
      cases.push_back(c);
    }
  }
  RunOnEveryMesh1D([&]() -> absl::Status {
    for (const ReduceCase& c : cases) {
      MESHDMA_RETURN_IF_ERROR(PsumCase(c, {"x"}));
    }
    return absl::OkStatus();
  });
}

// The same with the default pieces: parts past `lane_chunk_bytes` run the
// lane's ring in pieces of that size (several per segment on two hosts), in
// place and not (symmetric inputs: single-copy inside each host).
TEST(Collectives, HierarchicalLaneRingDefaultPieces) {
  // Lanes exist only between hosts, which only an mpirun launch has (forced
  // inter-host, or MESHDMA_HOSTS); devices as threads share one host.
  if (!LaunchedByMpi())
    GTEST_SKIP() << "needs mpirun: the lanes run between (simulated) hosts";
  const CollectiveOptions defaults;
  const int64_t count = (int64_t{1} << 21) + 7;  // 8 MiB of f32.
  std::vector<ReduceCase> cases;
  for (CollectiveAlgorithm a :
       {CollectiveAlgorithm::kHierarchical, CollectiveAlgorithm::kAuto}) {
    for (bool in_place : {false, true}) {
      cases.push_back({a, DType::kF32, count, ReduceOp::kSum, in_place,
                       defaults.chunk_bytes, defaults.one_shot_max_bytes,
                       defaults.lane_chunk_bytes, /*symmetric_input=*/true});
    }
  }
  RunOnEveryMesh1D([&]() -> absl::Status {
    for (const ReduceCase& c : cases) {
      MESHDMA_RETURN_IF_ERROR(PsumCase(c, {"x"}));
    }
    return absl::OkStatus();
  });
}

TEST(Collectives, AllReduce) {
  const std::vector<ReduceCase> cases = ReduceCases();
  RunOnEveryMesh1D([&]() -> absl::Status {
    for (const ReduceCase& c : cases) {
      MESHDMA_RETURN_IF_ERROR(PsumCase(c, {"x"}));
    }
    return absl::OkStatus();
  });
}

// Small calls made again are served from what the device remembered of
// them (channel.h, ChannelCall): more distinct calls than it keeps, in
// place and out of place, over and over in one Run, each checked against
// the closed form with fresh values every round.
TEST(Collectives, RememberedSmallCalls) {
  struct Call {
    ReduceOp op;
    DType dtype;
    int64_t count;
    bool in_place;
  };
  std::vector<Call> calls;
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kMean}) {
    for (DType t : {DType::kF32, DType::kF64, DType::kI32}) {
      calls.push_back({op, t, 7, false});
    }
  }
  calls.push_back({ReduceOp::kSum, DType::kF32, 1000, false});
  calls.push_back({ReduceOp::kSum, DType::kF32, 1, true});
  calls.push_back({ReduceOp::kMax, DType::kI64, 513, true});
  RunOnEveryMesh1D([&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(Caller who, Who({"x"}));
    const int n = who.n();
    // Calls of the same type, count and placement share their arrays, so
    // that only the operation tells them apart.
    std::map<std::tuple<DType, int64_t, bool>, std::pair<ArrayRef, ArrayRef>>
        arrays;
    std::vector<ArrayRef> ins, outs;
    for (const Call& c : calls) {
      auto [it, fresh] = arrays.try_emplace({c.dtype, c.count, c.in_place});
      if (fresh) {
        MESHDMA_ASSIGN_OR_RETURN(it->second.first,
                                 AllocateSymmetric(c.dtype, {c.count}));
        it->second.second = it->second.first;
        if (!c.in_place) {
          MESHDMA_ASSIGN_OR_RETURN(it->second.second,
                                   AllocateSymmetric(c.dtype, {c.count}));
        }
      }
      ins.push_back(it->second.first);
      outs.push_back(it->second.second);
    }
    // Member at position p holds (p + 1) * (i % 50 + 1) + round.
    auto value = [](int p, int64_t i, int round) {
      return static_cast<double>((p + 1) * (i % 50 + 1) + round);
    };
    // Each call twice in a row (the second remembered), the whole list
    // more calls than a device keeps (the first evicted each round).
    for (int step = 0; step < 10 * static_cast<int>(calls.size()); ++step) {
      const size_t k = (step / 2) % calls.size();
      const int round = step;  // Fresh values every call.
      {
        const Call& c = calls[k];
        for (int64_t i = 0; i < c.count; ++i) {
          Store(ins[k], i, value(who.pos, i, round));
        }
        const std::string what =
            absl::StrCat("remembered call ", k, " (", ReduceOpName(c.op),
                         " of ", DTypeName(c.dtype), "[", c.count, "]) round ",
                         round, " on LOGICAL device ", who.me);
        absl::Status s = all_reduce(c.op, ins[k], outs[k], {"x"});
        if (!s.ok()) {
          return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
        }
        MESHDMA_RETURN_IF_ERROR(CheckArray(what, outs[k], [&](int64_t i) {
          double sum = 0;
          for (int p = 0; p < n; ++p) sum += value(p, i, round);
          switch (c.op) {
            case ReduceOp::kMax:
              return value(n - 1, i, round);
            case ReduceOp::kMin:
              return value(0, i, round);
            case ReduceOp::kMean:
              return c.dtype == DType::kI32 ? std::trunc(sum / n) : sum / n;
            default:
              return sum;
          }
        }));
      }
    }
    return absl::OkStatus();
  });
}

// The same for all-gathers (tiled and stacked into outputs of one address)
// and reduce-scatters (sum and max into one output), interleaved.
TEST(Collectives, RememberedSmallGathersAndScatters) {
  RunOnEveryMesh1D([&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(Caller who, Who({"x"}));
    const int n = who.n();
    const int64_t block = 5, total = 3 * n + 1;
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef in, AllocateSymmetric<float>({block}));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef gathered,
                             AllocateSymmetric<float>({n * block}));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef stacked, gathered.Reshape({n, block}));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef whole, AllocateSymmetric<float>({total}));
    const auto [begin, length] = ScatterSegment(total, n, who.pos);
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef segment,
                             AllocateSymmetric<float>({total / n + 1}));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef mine, segment.Slice(0, 0, length));
    auto value = [](int p, int64_t i, int round) {
      return static_cast<double>((p + 1) * (i + 1) + round);
    };
    for (int round = 0; round < 5; ++round) {
      const std::string when =
          absl::StrCat(" round ", round, " on LOGICAL device ", who.me);
      for (int64_t i = 0; i < block; ++i)
        Store(in, i, value(who.pos, i, round));
      for (int64_t i = 0; i < total; ++i) {
        Store(whole, i, value(who.pos, i, round));
      }
      for (bool tiled : {true, false}) {
        MESHDMA_RETURN_IF_ERROR(
            all_gather(in, tiled ? gathered : stacked, {"x"}, tiled));
        MESHDMA_RETURN_IF_ERROR(CheckArray(
            absl::StrCat("all_gather tiled=", tiled, when), gathered,
            [&](int64_t i) {
              return value(static_cast<int>(i / block), i % block, round);
            }));
      }
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        MESHDMA_RETURN_IF_ERROR(reduce_scatter(op, whole, mine, {"x"}));
        MESHDMA_RETURN_IF_ERROR(
            CheckArray(absl::StrCat("reduce_scatter ", ReduceOpName(op), when),
                       mine, [&](int64_t i) {
                         if (op == ReduceOp::kMax)
                           return value(n - 1, begin + i, round);
                         double sum = 0;
                         for (int p = 0; p < n; ++p)
                           sum += value(p, begin + i, round);
                         return sum;
                       }));
      }
      // In place: the output is my segment of the input, which the other
      // segments' pushes read before it is written.
      MESHDMA_ASSIGN_OR_RETURN(ArrayRef own, whole.Slice(0, begin, length));
      MESHDMA_RETURN_IF_ERROR(psum_scatter(whole, own, {"x"}));
      MESHDMA_RETURN_IF_ERROR(CheckArray(
          absl::StrCat("psum_scatter in place", when), own, [&](int64_t i) {
            double sum = 0;
            for (int p = 0; p < n; ++p) sum += value(p, begin + i, round);
            return sum;
          }));
    }
    return absl::OkStatus();
  });
}

// Small ppermutes made again are remembered with their permutation: rounds
// alternate three permutations on the same arrays (shift forward, shift
// back, and one pair whose other members receive zeros), each checked.
TEST(Collectives, RememberedSmallPpermutes) {
  RunOnEveryMesh1D([&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(Caller who, Who({"x"}));
    const int n = who.n();
    const int64_t count = 6;
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef in, AllocateSymmetric<float>({count}));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef out, AllocateSymmetric<float>({count}));
    std::vector<std::pair<int, int>> forward, back, one_pair = {{0, n - 1}};
    for (int i = 0; i < n; ++i) {
      forward.push_back({i, (i + 1) % n});
      back.push_back({i, (i + n - 1) % n});
    }
    const std::vector<std::pair<int, int>>* perms[] = {&forward, &back,
                                                       &one_pair};
    auto value = [](int p, int64_t i, int round) {
      return static_cast<double>(100 * round + 10 * p + i);
    };
    for (int round = 0; round < 9; ++round) {
      const std::vector<std::pair<int, int>>& perm = *perms[round % 3];
      for (int64_t i = 0; i < count; ++i) {
        Store(in, i, value(who.pos, i, round));
      }
      MESHDMA_RETURN_IF_ERROR(ppermute(in, out, {"x"}, perm));
      int source = -1;
      for (const auto& [src, dst] : perm) {
        if (dst == who.pos) source = src;
      }
      MESHDMA_RETURN_IF_ERROR(CheckArray(
          absl::StrCat("ppermute round ", round, " on LOGICAL device ", who.me),
          out, [&](int64_t i) {
            return source < 0 ? 0.0 : value(source, i, round);
          }));
    }
    return absl::OkStatus();
  });
}

// kDirect runs (rather than falling back to the ring) exactly when every
// member is addressable: one host, checked mode off; whatever the input's
// memory (a private input is copied for the peers), above the one-shot size.
TEST(Collectives, DirectRunsWhereEveryMemberIsAddressable) {
  const char* check = std::getenv("MESHDMA_CHECK");
  const bool checked = check != nullptr && std::string(check) == "races";
  ForEachRuntime([&](Runtime& rt) {
    auto mesh = rt.MakeMesh1D("x");
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    const Launch& launch = rt.launch();
    RunOnMesh(rt, *mesh, [&]() -> absl::Status {
      const std::vector<std::string> axes = {"x"};
      MESHDMA_ASSIGN_OR_RETURN(
          collectives_internal::Group g,
          collectives_internal::ResolveGroup("psum", axes));
      bool one_host = true;
      const int my_rank = launch.devices()[g.global_device].rank;
      for (int logical : g.members) {
        one_host &= launch.SameHost(
            my_rank, launch.devices()[mesh->devices()[logical]].rank);
      }
      const CollectiveOptions o;
      // The planner, asking the running launch (LiveTopology).
      collectives_internal::LiveTopology topology;
      auto plans_direct = [&](int64_t bytes) -> absl::StatusOr<bool> {
        MESHDMA_ASSIGN_OR_RETURN(
            const collectives_internal::Plan plan,
            collectives_internal::PlanPath(
                {collectives_internal::CollectiveKind::kAllReduce, "psum", o,
                 bytes, bytes, /*input_symmetric=*/true},
                g, topology));
        return plan.algorithm == CollectiveAlgorithm::kDirect;
      };
      MESHDMA_ASSIGN_OR_RETURN(bool large, plans_direct(1 << 18));
      MESHDMA_ASSIGN_OR_RETURN(bool small, plans_direct(o.one_shot_max_bytes));
      const bool want = g.size() > 1 && one_host && !checked;
      if (large != want || small) {
        return absl::InternalError(
            absl::StrCat("plan: kDirect above the one-shot size ", large,
                         " (want ", want, "), at it ", small));
      }
      return absl::OkStatus();
    });
  });
}

TEST(Collectives, ReduceScatter) {
  const std::vector<ReduceCase> cases = ReduceCases();
  RunOnEveryMesh1D([&]() -> absl::Status {
    for (const ReduceCase& c : cases) {
      MESHDMA_RETURN_IF_ERROR(ReduceScatterCase(c, {"x"}));
    }
    return absl::OkStatus();
  });
}

absl::Status AllGatherCase(CollectiveAlgorithm a, DType t, int64_t count,
                           bool tiled, bool in_place,
                           const std::vector<std::string>& axes) {
  return run_scoped([&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(Caller who, Who(axes));
    const int n = who.n();
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef out,
                             tiled ? AllocateSymmetric(t, {n * count})
                                   : AllocateSymmetric(t, {n, count}));
    HostArray host(t, {count});
    ArrayRef in = host.ref;
    if (in_place) {
      in = tiled ? *out.Slice(0, who.pos * count, count) : *out.At(who.pos);
    }
    Fill(in, who.me);
    CollectiveOptions o;
    o.algorithm = a;
    const std::string what =
        absl::StrCat("all_gather ", DTypeName(t), "[", count, "] ",
                     CollectiveAlgorithmName(a), tiled ? " tiled" : " stacked",
                     in_place ? " in place" : "", " over {",
                     absl::StrJoin(axes, ","), "} on LOGICAL device ", who.me);
    absl::Status s = all_gather(in, out, axes, tiled, o);
    if (!s.ok())
      return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
    return CheckArray(what, out, [&](int64_t i) {
      return InputValue(who.members[i / count], i % count, t);
    });
  });
}

TEST(Collectives, AllGather) {
  RunOnEveryMesh1D([&]() -> absl::Status {
    for (CollectiveAlgorithm a :
         {CollectiveAlgorithm::kRing, CollectiveAlgorithm::kBidirectionalRing,
          CollectiveAlgorithm::kHierarchical, CollectiveAlgorithm::kDirect,
          CollectiveAlgorithm::kAuto}) {
      for (DType t : {DType::kU8, DType::kF32, DType::kF64, DType::kBF16,
                      DType::kF16, DType::kI32, DType::kI64}) {
        for (int64_t count :
             {int64_t{1}, int64_t{7}, int64_t{1001}, int64_t{70001}}) {
          if (Small() && t != DType::kU8 && t != DType::kF32) continue;
          for (bool tiled : {false, true}) {
            MESHDMA_RETURN_IF_ERROR(
                AllGatherCase(a, t, count, tiled, false, {"x"}));
          }
          // In place, also where kDirect stores in chunks (70001).
          if (count == 1001 || (count == 70001 && t == DType::kF64)) {
            MESHDMA_RETURN_IF_ERROR(
                AllGatherCase(a, t, count, true, true, {"x"}));
          }
        }
      }
    }
    return absl::OkStatus();
  });
}

absl::Status AllToAllCase(DType t, int64_t rows, int64_t cols, int split,
                          int concat, const std::vector<std::string>& axes,
                          CollectiveAlgorithm a = CollectiveAlgorithm::kAuto) {
  return run_scoped([&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(Caller who, Who(axes));
    const int n = who.n();
    const int64_t in_shape[] = {rows, cols};
    const std::vector<int64_t> out_shape =
        AllToAllOutputShape(in_shape, split, concat, n, who.pos);
    // Uneven splits give devices different output shapes: allocate the
    // largest on every device (symmetric) and view its prefix.
    int64_t largest = 0;
    for (int q = 0; q < n; ++q) {
      int64_t e = 1;
      for (int64_t d : AllToAllOutputShape(in_shape, split, concat, n, q))
        e *= d;
      largest = std::max(largest, e);
    }
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef flat, AllocateSymmetric(t, {largest}));
    int64_t mine = 1;
    for (int64_t d : out_shape) mine *= d;
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef out,
                             flat.Slice(0, 0, mine)->Reshape(out_shape));
    // Garbage that a missing write would leave behind (outside the inputs'
    // values).
    for (int64_t i = 0; i < mine; ++i)
      Store(out, i, t == DType::kU8 ? 255 : -99);
    HostArray host(t, {rows, cols});
    Fill(host.ref, who.me);
    const std::string what = absl::StrCat(
        "all_to_all ", DTypeName(t), "[", rows, ",", cols, "] split ", split,
        " concat ", concat, " ", CollectiveAlgorithmName(a), " over {",
        absl::StrJoin(axes, ","), "} on LOGICAL device ", who.me);
    CollectiveOptions o;
    o.algorithm = a;
    absl::Status s = all_to_all(host.ref, out, axes, split, concat, o);
    if (!s.ok())
      return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
    const int64_t split_size = split == 0 ? rows : cols;
    const int64_t begin = split_size * who.pos / n;
    const int64_t block = out_shape[concat] / n;
    return CheckArray(what, out, [&](int64_t i) {
      int64_t o[2] = {i / out_shape[1], i % out_shape[1]};
      const int q = static_cast<int>(o[concat] / block);
      o[concat] %= block;
      o[split] += begin;
      return InputValue(who.members[q], o[0] * cols + o[1], t);
    });
  });
}

// kDirect from 8 MiB per device out of place (all-gather: 32 MiB stored,
// all-to-all: 16 MiB): the streaming stores (odd element counts, so that
// segments start unaligned).
TEST(Collectives, DirectStreamingStores) {
  RunOnEveryMesh1D([&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(int n, axis_size("x"));
    // Instrumented builds stream on one device count of the thread sweep
    // (3: segments start unaligned).
    if (testing::kInstrumentedBuild && !LaunchedByMpi() && n != 3)
      return absl::OkStatus();
    const int64_t count = (int64_t{9} << 20) / 4 + 3;
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean}) {
      ReduceCase c{CollectiveAlgorithm::kDirect,
                   DType::kF32,
                   count,
                   op,
                   false,
                   256 << 10};
      // A private input (copied for the peers) and a symmetric one.
      MESHDMA_RETURN_IF_ERROR(PsumCase(c, {"x"}));
      MESHDMA_RETURN_IF_ERROR(ReduceScatterCase(c, {"x"}));
      c.symmetric_input = true;
      MESHDMA_RETURN_IF_ERROR(PsumCase(c, {"x"}));
      MESHDMA_RETURN_IF_ERROR(ReduceScatterCase(c, {"x"}));
    }
    // The all-gather streams from 32 MiB stored per device (in chunks),
    // the all-to-all from 16 MiB.
    const int64_t gathered = (int64_t{33} << 20) / 4;
    MESHDMA_RETURN_IF_ERROR(AllGatherCase(CollectiveAlgorithm::kDirect,
                                          DType::kF32, gathered / n + 1, false,
                                          false, {"x"}));
    const int64_t stored = (int64_t{17} << 20) / 4;
    return AllToAllCase(DType::kF32, stored / 1001 + n, 1001, 0, 0, {"x"});
  });
}

TEST(Collectives, AllToAll) {
  ForEachRuntime([&](Runtime& rt) {
    auto mesh = rt.MakeMesh1D("x");
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    const int n = rt.num_devices();
    RunOnMesh(rt, *mesh, [&]() -> absl::Status {
      for (DType t : {DType::kU8, DType::kF32, DType::kBF16, DType::kI64}) {
        for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
                 {3 * n, 5}, {7, 3}, {1, 4}, {2 * n + 1, 300}}) {
          for (auto [split, concat] : std::vector<std::pair<int, int>>{
                   {0, 1}, {1, 0}, {0, 0}, {1, 1}}) {
            MESHDMA_RETURN_IF_ERROR(
                AllToAllCase(t, rows, cols, split, concat, {"x"}));
          }
        }
      }
      // Blocks above the channel's sizes: the kernel (on one host, stores
      // through peer views; strided blocks by local DMAs), kAuto and every
      // algorithm that can be requested.
      for (CollectiveAlgorithm a :
           {CollectiveAlgorithm::kAuto, CollectiveAlgorithm::kDirect,
            CollectiveAlgorithm::kRing}) {
        for (auto [split, concat] :
             std::vector<std::pair<int, int>>{{0, 0}, {1, 0}, {0, 1}}) {
          MESHDMA_RETURN_IF_ERROR(AllToAllCase(DType::kF32, 40 * n + 1, 301,
                                               split, concat, {"x"}, a));
        }
      }
      return absl::OkStatus();
    });
  });
}

// Whether kHierarchical runs for an all_to_all over the whole 1-D mesh of
// `launch`: the group spans several hosts with the same number m > 1 of its
// devices on each. An error when that is not what the launch sets up
// (MESHDMA_FORCE_INTERHOST: a host per process; MESHDMA_HOSTS=N: N hosts of
// contiguous ranks; else one host), so that the cases that mean to run
// hierarchically do.
absl::StatusOr<bool> AllToAllIsHierarchical(const Launch& launch) {
  const std::vector<std::string> axes = {"x"};
  MESHDMA_ASSIGN_OR_RETURN(collectives_internal::Group g,
                           collectives_internal::ResolveGroup("test", axes));
  MESHDMA_ASSIGN_OR_RETURN(collectives_internal::HostLayout layout,
                           collectives_internal::HostLayoutOf(g));
  const bool applies = layout.Applies() && layout.per_host > 1;
  const int processes = launch.num_processes();
  int hosts = 1;
  if (std::getenv(kForceInterhostEnv) != nullptr) {
    hosts = processes;
  } else if (const char* env = std::getenv(kSimulatedHostsEnv)) {
    hosts = std::min(std::atoi(env), processes);
  }
  const bool want = hosts > 1 && processes % hosts == 0 && g.size() / hosts > 1;
  if (applies != want) {
    return absl::InternalError(absl::StrCat(
        "all_to_all over ", g.size(), " devices, ", processes, " processes on ",
        hosts, " hosts: kHierarchical applies ", applies, ", expected ", want));
  }
  return applies;
}

// all_to_all with kHierarchical requested (and kAuto, which keeps the
// direct kernel, or the channel for small blocks) on groups that span hosts: 2
// simulated hosts x 2 devices (np4.hosts2), x 4 (np4x2.hosts2), 4 hosts x 2
// (np8.hosts4), 3 hosts x 2 (np3x2.interhost). Elsewhere (one host, one device
// per host, uneven hosts) the direct kernel runs instead and must agree. Uneven
// splits, split_axis != concat_axis, blocks below and above the channel's size.
// Small all-to-alls made again (remembered, channel.h): each call allocates
// its output at the same address and fills it with garbage first.
TEST(Collectives, RememberedSmallAllToAll) {
  ForEachRuntime([&](Runtime& rt) {
    auto mesh = rt.MakeMesh1D("x");
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    const int n = rt.num_devices();
    RunOnMesh(rt, *mesh, [&]() -> absl::Status {
      for (int round = 0; round < 4; ++round) {
        for (DType t : {DType::kF32, DType::kU8}) {
          MESHDMA_RETURN_IF_ERROR(AllToAllCase(t, 3 * n + 1, 2, 0, 0, {"x"}));
        }
      }
      return absl::OkStatus();
    });
  });
}

TEST(Collectives, AllToAllHierarchical) {
  ForEachRuntime([&](Runtime& rt) {
    auto mesh = rt.MakeMesh1D("x");
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    const int n = rt.num_devices();
    RunOnMesh(rt, *mesh, [&]() -> absl::Status {
      MESHDMA_RETURN_IF_ERROR(AllToAllIsHierarchical(rt.launch()).status());
      for (CollectiveAlgorithm a :
           {CollectiveAlgorithm::kHierarchical, CollectiveAlgorithm::kAuto}) {
        for (DType t : {DType::kU8, DType::kF32, DType::kBF16, DType::kI64}) {
          for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
                   {2 * n, 5}, {2 * n + 1, 3}, {n - 1, 4}, {2 * n + 1, 3001}}) {
            if (Small() && t != DType::kF32 && cols > 1000) continue;
            for (auto [split, concat] : std::vector<std::pair<int, int>>{
                     {0, 1}, {1, 0}, {0, 0}, {1, 1}}) {
              MESHDMA_RETURN_IF_ERROR(
                  AllToAllCase(t, rows, cols, split, concat, {"x"}, a));
            }
          }
        }
      }
      return absl::OkStatus();
    });
  });
}

// Threads of one process sit on one host: kHierarchical requested runs the
// direct kernel and gets the same result.
TEST(Collectives, AllToAllHierarchicalFallsBackOnOneHost) {
  if (LaunchedByMpi()) GTEST_SKIP() << "one process (threads) only";
  ForEachRuntime([&](Runtime& rt) {
    auto mesh = rt.MakeMesh1D("x");
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    const int n = rt.num_devices();
    RunOnMesh(rt, *mesh, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(const bool hierarchical,
                               AllToAllIsHierarchical(rt.launch()));
      if (hierarchical) {
        return absl::InternalError("kHierarchical applies on one host");
      }
      for (auto [split, concat] :
           std::vector<std::pair<int, int>>{{0, 1}, {1, 0}, {0, 0}}) {
        MESHDMA_RETURN_IF_ERROR(
            AllToAllCase(DType::kF32, 2 * n + 1, 2001, split, concat, {"x"},
                         CollectiveAlgorithm::kHierarchical));
      }
      return absl::OkStatus();
    });
  });
}

absl::Status PpermuteCase(DType t, int64_t count,
                          const std::vector<std::pair<int, int>>& perm,
                          const std::string& perm_name,
                          const std::vector<std::string>& axes) {
  return run_scoped([&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(Caller who, Who(axes));
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef out, AllocateSymmetric(t, {count}));
    // Garbage that a missing write would leave behind.
    for (int64_t i = 0; i < count; ++i) Store(out, i, 99);
    HostArray host(t, {count});
    Fill(host.ref, who.me);
    const std::string what =
        absl::StrCat("ppermute ", perm_name, " ", DTypeName(t), "[", count,
                     "] on LOGICAL device ", who.me);
    absl::Status s = ppermute(host.ref, out, axes, perm);
    if (!s.ok())
      return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
    int source = -1;
    for (auto [src, dst] : perm) {
      if (dst == who.pos) source = src;
    }
    return CheckArray(what, out, [&](int64_t i) {
      return source < 0 ? 0.0 : InputValue(who.members[source], i, t);
    });
  });
}

TEST(Collectives, Ppermute) {
  ForEachRuntime([&](Runtime& rt) {
    auto mesh = rt.MakeMesh1D("x");
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    const int n = rt.num_devices();
    std::vector<std::pair<std::string, std::vector<std::pair<int, int>>>> perms;
    std::vector<std::pair<int, int>> shift, reverse, self, evens;
    for (int i = 0; i < n; ++i) {
      shift.push_back({i, (i + 1) % n});
      reverse.push_back({i, n - 1 - i});
      self.push_back({i, i});
      if (i % 2 == 0 && (i + 2) % n % 2 == 0) evens.push_back({i, (i + 2) % n});
    }
    perms = {{"shift", shift},          {"reverse", reverse}, {"self", self},
             {"partial", {{0, n - 1}}}, {"evens", evens},     {"empty", {}}};
    RunOnMesh(rt, *mesh, [&]() -> absl::Status {
      for (DType t : {DType::kU8, DType::kF32, DType::kI64}) {
        for (int64_t count : {int64_t{1}, int64_t{999}, int64_t{65537}}) {
          for (const auto& [name, perm] : perms) {
            MESHDMA_RETURN_IF_ERROR(PpermuteCase(t, count, perm, name, {"x"}));
          }
        }
      }
      return absl::OkStatus();
    });
  });
}

// Collectives over some axes of a 2-D mesh run one independent group per
// value of the other axes, in Mesh::Group's ring order.
TEST(Collectives, MeshAxes) {
  ForEachRuntime([&](Runtime& rt) {
    const int n = rt.num_devices();
    if (n < 4 || n % 2 != 0) return;  // Needs an even count >= 4.
    auto mesh = rt.MakeMesh({{"a", 2}, {"b", n / 2}});
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    RunOnMesh(rt, *mesh, [&]() -> absl::Status {
      const std::vector<std::vector<std::string>> axes_list = {
          {"b"}, {"a"}, {"a", "b"}, {"b", "a"}};
      for (const auto& axes : axes_list) {
        for (CollectiveAlgorithm a :
             {CollectiveAlgorithm::kRing,
              CollectiveAlgorithm::kBidirectionalRing,
              CollectiveAlgorithm::kOneShot, CollectiveAlgorithm::kHierarchical,
              CollectiveAlgorithm::kDirect}) {
          for (DType t : {DType::kF32, DType::kBF16, DType::kI32}) {
            for (int64_t count : {int64_t{5}, int64_t{4099}}) {
              const ReduceCase c{a, t, count, ReduceOp::kSum, false, 1024};
              MESHDMA_RETURN_IF_ERROR(PsumCase(c, axes));
              MESHDMA_RETURN_IF_ERROR(ReduceScatterCase(c, axes));
              if (a != CollectiveAlgorithm::kOneShot) {
                MESHDMA_RETURN_IF_ERROR(
                    AllGatherCase(a, t, count, true, false, axes));
              }
            }
          }
        }
        MESHDMA_RETURN_IF_ERROR(AllToAllCase(DType::kF32, 9, 4, 0, 1, axes));
        // Hosts in group order need not be contiguous positions ({"b", "a"}).
        for (auto [split, concat] :
             std::vector<std::pair<int, int>>{{0, 1}, {1, 0}, {0, 0}}) {
          MESHDMA_RETURN_IF_ERROR(
              AllToAllCase(DType::kI32, 9, 4100, split, concat, axes,
                           CollectiveAlgorithm::kHierarchical));
        }
        MESHDMA_ASSIGN_OR_RETURN(Caller who, Who(axes));
        std::vector<std::pair<int, int>> shift;
        for (int i = 0; i < who.n(); ++i)
          shift.push_back({i, (i + 1) % who.n()});
        MESHDMA_RETURN_IF_ERROR(
            PpermuteCase(DType::kF32, 333, shift, "shift", axes));
      }
      return absl::OkStatus();
    });
  });
}

// Back-to-back calls with no barrier of the caller's own between them: the
// entry barrier keeps a fast device from pushing into the previous call.
TEST(Collectives, BackToBack) {
  RunOnEveryMesh1D([&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(Caller who, Who({"x"}));
    const int64_t count = 4001;
    MESHDMA_ASSIGN_OR_RETURN(ArrayRef buf,
                             AllocateSymmetric(DType::kF32, {count}));
    CollectiveOptions o;
    o.chunk_bytes = 512;
    o.algorithm = CollectiveAlgorithm::kRing;
    for (int iter = 0; iter < 30; ++iter) {
      for (int64_t i = 0; i < count; ++i) {
        buf.data_as<float>()[i] = static_cast<float>(who.me + iter + i % 5);
      }
      o.algorithm = static_cast<CollectiveAlgorithm>(1 + iter % 4);
      MESHDMA_RETURN_IF_ERROR(psum(buf, buf, {"x"}, o));
      const int n = who.n();
      const double base = n * (n - 1) / 2.0;
      MESHDMA_RETURN_IF_ERROR(
          CheckArray(absl::StrCat("iteration ", iter), buf,
                     [&](int64_t i) { return base + n * (iter + i % 5); }));
    }
    return absl::OkStatus();
  });
}

// kAuto picks kHierarchical above the one-shot size on groups spread evenly
// over hosts; a request for it on one host (or uneven hosts) runs the flat
// ring.
TEST(Collectives, ChooseHierarchical) {
  CollectiveOptions o;
  const int64_t big = o.one_shot_max_bytes + 1;
  EXPECT_EQ(ChooseAllReduceAlgorithm(big, 4, o, "psum", 2),
            CollectiveAlgorithm::kHierarchical);
  EXPECT_EQ(ChooseAllReduceAlgorithm(o.one_shot_max_bytes, 4, o, "psum", 2),
            CollectiveAlgorithm::kOneShot);
  EXPECT_EQ(ChooseAllReduceAlgorithm(big, 4, o, "psum", 1),
            CollectiveAlgorithm::kBidirectionalRing);
  o.algorithm = CollectiveAlgorithm::kHierarchical;
  EXPECT_EQ(ChooseAllReduceAlgorithm(1, 4, o, "psum", 2),
            CollectiveAlgorithm::kHierarchical);
  EXPECT_EQ(ChooseAllReduceAlgorithm(big, 2, o, "psum", 1),
            CollectiveAlgorithm::kRing);
  EXPECT_EQ(ChooseAllReduceAlgorithm(big, 3, o, "psum", 1),
            CollectiveAlgorithm::kBidirectionalRing);
  o.algorithm = CollectiveAlgorithm::kRing;
  EXPECT_EQ(ChooseAllReduceAlgorithm(big, 4, o, "psum", 2),
            CollectiveAlgorithm::kRing);
}

// kAuto picks kDirect above the one-shot size when every member is
// addressable (`direct`); a request for it elsewhere runs the flat ring.
TEST(Collectives, ChooseDirect) {
  CollectiveOptions o;
  const int64_t big = o.one_shot_max_bytes + 1;
  EXPECT_EQ(ChooseAllReduceAlgorithm(big, 4, o, "psum", 1, true),
            CollectiveAlgorithm::kDirect);
  EXPECT_EQ(
      ChooseAllReduceAlgorithm(o.one_shot_max_bytes, 4, o, "psum", 1, true),
      CollectiveAlgorithm::kOneShot);
  o.algorithm = CollectiveAlgorithm::kDirect;
  EXPECT_EQ(ChooseAllReduceAlgorithm(big, 2, o, "psum", 1, false),
            CollectiveAlgorithm::kRing);
  EXPECT_EQ(ChooseAllReduceAlgorithm(big, 4, o, "psum", 2, false),
            CollectiveAlgorithm::kBidirectionalRing);
  EXPECT_EQ(ChooseAllReduceAlgorithm(1, 4, o, "psum", 1, true),
            CollectiveAlgorithm::kDirect);
}

// Under mpirun with one device per process: the MPI library's own collectives
// on the same data are the reference (uniform random f32 for psum, within
// 1e-5 as in the Pallas tutorial; exact integers for the rest).
TEST(Collectives, AgainstMpi) {
  if (!LaunchedByMpi()) GTEST_SKIP() << "runs under mpirun";
  auto rt = Runtime::Create(testing::OptionsFor(0));
  ASSERT_TRUE(rt.ok()) << rt.status();
  if ((*rt)->num_devices() != (*rt)->launch().num_processes()) {
    GTEST_SKIP() << "needs one device per process";
  }
  auto mesh = (*rt)->MakeMesh1D("x");
  ASSERT_TRUE(mesh.ok());
  const Launch& launch = (*rt)->launch();
  absl::Status s = (*rt)->Run(*mesh, [&]() -> absl::Status {
    MESHDMA_ASSIGN_OR_RETURN(Caller who, Who({"x"}));
    const int n = who.n();
    // MPI rank of each group member.
    std::vector<int> rank_of(n);
    for (int q = 0; q < n; ++q) {
      rank_of[q] = launch.devices()[*mesh->GlobalDevice(who.members[q])].rank;
    }
    for (int64_t count : {int64_t{1}, int64_t{1001}, int64_t{3 * 4096}}) {
      MESHDMA_RETURN_IF_ERROR(run_scoped([&]() -> absl::Status {
        // psum of random f32.
        std::mt19937 gen(1234 + launch.rank());
        std::uniform_real_distribution<float> dist(0.0f, 1.0f);
        MESHDMA_ASSIGN_OR_RETURN(ArrayRef buf,
                                 AllocateSymmetric(DType::kF32, {count}));
        std::vector<float> in(count), want(count);
        for (float& v : in) v = dist(gen);
        MPI_Allreduce(in.data(), want.data(), static_cast<int>(count),
                      MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        for (CollectiveAlgorithm a :
             {CollectiveAlgorithm::kRing,
              CollectiveAlgorithm::kBidirectionalRing,
              CollectiveAlgorithm::kOneShot, CollectiveAlgorithm::kHierarchical,
              CollectiveAlgorithm::kDirect, CollectiveAlgorithm::kAuto}) {
          std::copy(in.begin(), in.end(), buf.data_as<float>());
          CollectiveOptions o;
          o.algorithm = a;
          o.chunk_bytes = 1024;
          MESHDMA_RETURN_IF_ERROR(psum(buf, buf, {"x"}, o));
          MESHDMA_RETURN_IF_ERROR(CheckArray(
              absl::StrCat("psum f32[", count, "] ", CollectiveAlgorithmName(a),
                           " vs MPI_Allreduce"),
              buf, [&](int64_t i) { return double{want[i]}; }));
        }
        // pmax of i32.
        std::vector<int32_t> ii(count), iw(count);
        for (int64_t i = 0; i < count; ++i) {
          ii[i] = static_cast<int32_t>(InputValue(who.me, i, DType::kI32));
        }
        MPI_Allreduce(ii.data(), iw.data(), static_cast<int>(count), MPI_INT,
                      MPI_MAX, MPI_COMM_WORLD);
        MESHDMA_ASSIGN_OR_RETURN(ArrayRef ib,
                                 AllocateSymmetric(DType::kI32, {count}));
        std::copy(ii.begin(), ii.end(), ib.data_as<int32_t>());
        MESHDMA_RETURN_IF_ERROR(pmax(ib, ib, {"x"}));
        MESHDMA_RETURN_IF_ERROR(
            CheckArray("pmax i32 vs MPI_Allreduce", ib,
                       [&](int64_t i) { return double{iw[i] * 1.0}; }));
        // all_gather of f64 vs MPI_Allgather (blocks in rank order).
        std::vector<double> gin(count), gall(count * n);
        for (int64_t i = 0; i < count; ++i)
          gin[i] = InputValue(who.me, i, DType::kF64);
        MPI_Allgather(gin.data(), static_cast<int>(count), MPI_DOUBLE,
                      gall.data(), static_cast<int>(count), MPI_DOUBLE,
                      MPI_COMM_WORLD);
        MESHDMA_ASSIGN_OR_RETURN(ArrayRef gout,
                                 AllocateSymmetric(DType::kF64, {n * count}));
        const int64_t shape[] = {count};
        MESHDMA_ASSIGN_OR_RETURN(
            ArrayRef gref,
            ArrayRef::FromPointer(gin.data(), DType::kF64, shape));
        for (CollectiveAlgorithm a :
             {CollectiveAlgorithm::kAuto, CollectiveAlgorithm::kRing,
              CollectiveAlgorithm::kHierarchical}) {
          CollectiveOptions o;
          o.algorithm = a;
          std::fill_n(gout.data_as<double>(), n * count, -1.0);
          MESHDMA_RETURN_IF_ERROR(
              all_gather(gref, gout, {"x"}, /*tiled=*/true, o));
          MESHDMA_RETURN_IF_ERROR(CheckArray(
              absl::StrCat("all_gather f64 ", CollectiveAlgorithmName(a),
                           " vs MPI_Allgather"),
              gout, [&](int64_t i) {
                return gall[rank_of[i / count] * count + i % count];
              }));
        }
        // psum_scatter of i64 vs MPI_Reduce_scatter_block (n divides n*count).
        std::vector<int64_t> rin(n * count), rwant(count);
        for (int64_t i = 0; i < n * count; ++i) {
          rin[i] = static_cast<int64_t>(InputValue(who.me, i, DType::kI64));
        }
        MESHDMA_ASSIGN_OR_RETURN(ArrayRef rbuf,
                                 AllocateSymmetric(DType::kI64, {n * count}));
        std::copy(rin.begin(), rin.end(), rbuf.data_as<int64_t>());
        MESHDMA_ASSIGN_OR_RETURN(ArrayRef rout,
                                 AllocateSymmetric(DType::kI64, {count}));
        // MPI scatters block q to rank q; meshdma to group position q.
        MPI_Reduce_scatter_block(rin.data(), rwant.data(),
                                 static_cast<int>(count), MPI_INT64_T, MPI_SUM,
                                 MPI_COMM_WORLD);
        for (CollectiveAlgorithm a :
             {CollectiveAlgorithm::kAuto, CollectiveAlgorithm::kRing,
              CollectiveAlgorithm::kHierarchical}) {
          CollectiveOptions o;
          o.algorithm = a;
          o.chunk_bytes = 4096;
          MESHDMA_RETURN_IF_ERROR(psum_scatter(rbuf, rout, {"x"}, o));
          if (who.pos == launch.rank()) {
            MESHDMA_RETURN_IF_ERROR(CheckArray(
                absl::StrCat("psum_scatter i64 ", CollectiveAlgorithmName(a),
                             " vs MPI_Reduce_scatter_block"),
                rout,
                [&](int64_t i) { return static_cast<double>(rwant[i]); }));
          }
        }
        // all_to_all of u8 vs MPI_Alltoall, when group order is rank order.
        std::vector<uint8_t> ain(n * count), aout(n * count);
        for (int64_t i = 0; i < n * count; ++i) {
          ain[i] = static_cast<uint8_t>(InputValue(who.me, i, DType::kU8));
        }
        MPI_Alltoall(ain.data(), static_cast<int>(count), MPI_UINT8_T,
                     aout.data(), static_cast<int>(count), MPI_UINT8_T,
                     MPI_COMM_WORLD);
        MESHDMA_ASSIGN_OR_RETURN(ArrayRef ab,
                                 AllocateSymmetric(DType::kU8, {n * count}));
        const int64_t ashape[] = {n * count};
        MESHDMA_ASSIGN_OR_RETURN(
            ArrayRef aref,
            ArrayRef::FromPointer(ain.data(), DType::kU8, ashape));
        MESHDMA_RETURN_IF_ERROR(all_to_all(aref, ab, {"x"}, 0, 0));
        if (who.pos == launch.rank()) {
          MESHDMA_RETURN_IF_ERROR(
              CheckArray("all_to_all u8 vs MPI_Alltoall", ab,
                         [&](int64_t i) { return double{aout[i] * 1.0}; }));
        }
        return absl::OkStatus();
      }));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace meshdma
