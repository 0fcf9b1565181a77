// A small ring-attention run with a timeline trace: the file must parse as
// JSON and hold, for every device, the kernel, its compute spans, DMAs and
// waits. The JSON is checked by Python's json module (an independent
// parser), which also counts the events.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/fused/collective_matmul.h"
#include "meshdma/collectives/fused/ring_attention.h"
#include "meshdma/dma/peer_view.h"
#include "meshdma/dma/runtime.h"
#include "overlap_test_util.h"

namespace meshdma {
namespace {

// What every counter starts with: the timeline's events, as `events`.
constexpr char kLoadEvents[] = R"PY(
import json, sys, collections
events = json.load(open(sys.argv[1]))
if isinstance(events, dict): events = events["traceEvents"]
)PY";

// Runs the Python `counter` (kCounter below, or kScheduleCounter) after
// kLoadEvents on the timeline `trace` in `dir`: one row of `width` counts
// per device track. An empty result, with a test failure, where the trace
// does not parse.
std::vector<std::vector<int>> CountEvents(const std::string& dir,
                                          const char* counter,
                                          const std::string& trace, int width) {
  const std::string script = dir + "/count_trace_events.py";
  const std::string counts = dir + "/trace_counts.txt";
  std::ofstream(script) << kLoadEvents << counter;
  const std::string cmd =
      "python3 " + script + " " + trace + " > " + counts + " 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    ADD_FAILURE() << "the trace did not parse";
    return {};
  }
  std::ifstream in(counts);
  std::vector<std::vector<int>> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<int> row(width);
    for (int& x : row) ls >> x;
    rows.push_back(row);
  }
  return rows;
}

// Runs `body(n)` on every device of a fresh runtime (the overlap tests'
// options, n devices along "x") that writes its timeline to `trace`, and
// shuts the runtime down, which writes the file. Returns n; 0, with a test
// failure, where the runtime or the run fails.
int RunTraced(const std::string& trace,
              const std::function<absl::Status(int n)>& body) {
  std::remove(trace.c_str());
  RuntimeOptions o = testing::OverlapTestOptions();
  o.trace_path = trace;
  auto rt = Runtime::Create(o);
  if (!rt.ok()) {
    ADD_FAILURE() << rt.status();
    return 0;
  }
  const Mesh mesh = *(*rt)->MakeMesh1D("x");
  const int n = mesh.size();
  const absl::Status s = (*rt)->Run(mesh, [&] { return body(n); });
  const absl::Status down = (*rt)->Shutdown();
  if (!s.ok() || !down.ok()) {
    ADD_FAILURE() << (s.ok() ? down : s);
    return 0;
  }
  return n;
}

// Prints one line per device: "kernels spans dma_begin dma_end waits
// barrier_waits".
constexpr char kCounter[] = R"PY(
c = collections.defaultdict(lambda: [0, 0, 0, 0, 0, 0])
for e in events:
    if e.get("ph") in ("M", "C"): continue  # metadata, per-process counters
    key = (e["pid"], e["tid"]); cat = e.get("cat"); ph = e.get("ph")
    if cat == "kernel" and ph == "B" and e["name"] == "ring_attention": c[key][0] += 1
    if cat == "compute" and ph == "B" and e["name"].startswith("ring_attention step"): c[key][1] += 1
    if cat == "dma" and ph == "b": c[key][2] += 1
    if cat == "dma" and ph == "e": c[key][3] += 1
    if cat == "wait" and ph == "B": c[key][4] += 1
    if cat == "wait" and ph == "B" and e["name"] == "device barrier": c[key][5] += 1
for key in sorted(c): print(*c[key])
)PY";

TEST(Trace, RingAttentionTimeline) {
  const std::string dir = ::testing::TempDir();
  const std::string trace = dir + "/ring_attention_trace.json";
  const int n = RunTraced(trace, [](int) -> absl::Status {
    const int64_t h = 2, s_local = 16, d = 8;
    std::vector<float> q = testing::RandomVector(h * s_local * d, 1);
    std::vector<float> k = q, v = q, out(q.size());
    const std::vector<int64_t> shape = {h, s_local, d};
    MESHDMA_ASSIGN_OR_RETURN(
        auto qr, ArrayRef::FromPointer(q.data(), DType::kF32, shape));
    MESHDMA_ASSIGN_OR_RETURN(
        auto kr, ArrayRef::FromPointer(k.data(), DType::kF32, shape));
    MESHDMA_ASSIGN_OR_RETURN(
        auto vr, ArrayRef::FromPointer(v.data(), DType::kF32, shape));
    MESHDMA_ASSIGN_OR_RETURN(
        auto orf, ArrayRef::FromPointer(out.data(), DType::kF32, shape));
    // The DMA ring's timeline (threads of one process would otherwise
    // read the blocks in place, with no DMA to trace).
    return RingAttention(qr, kr, vr, orf,
                         {.causal = true,
                          .layout = SequenceLayout::kZigZag,
                          .transfer = FusedTransfer::kDma});
  });
  ASSERT_GT(n, 0);
  const std::vector<std::vector<int>> rows =
      CountEvents(dir, kCounter, trace, 6);
  ASSERT_EQ(static_cast<int>(rows.size()), n) << "one track per device";
  for (const auto& r : rows) {
    EXPECT_EQ(r[0], 1) << "one ring_attention kernel per device";
    EXPECT_EQ(r[1], n) << "one compute span per ring step";
    EXPECT_EQ(r[2], 2 * (n - 1))
        << "K and V forwarded at each step but the last";
    EXPECT_EQ(r[3], r[2]) << "every DMA completes";
    EXPECT_GE(r[4], 4 * (n - 1)) << "wait_send and wait_recv per DMA";
    // The entry barrier's waits carry the name its errors give them.
    if (n > 1) {
      EXPECT_GE(r[5], 1) << "device barrier waits";
    }
  }
}

// Per device track: the compute spans of each collective matmul schedule,
// "ag_product ag_steps rs_product rs_steps".
constexpr char kScheduleCounter[] = R"PY(
names = ["all_gather_matmul product", "all_gather_matmul step",
         "matmul_reduce_scatter product", "matmul_reduce_scatter step"]
c = collections.defaultdict(lambda: [0] * len(names))
for e in events:
    if e.get("cat") != "compute" or e.get("ph") != "B": continue
    for i, name in enumerate(names):
        if e["name"].startswith(name): c[(e["pid"], e["tid"])][i] += 1
for key in sorted(c): print(*c[key])
)PY";

// kAuto's choice on the timeline: one product where the members are
// reachable and w is at least the rows a member moves, the ring (one span
// per step) where w is narrower or a member is out of reach.
TEST(Trace, CollectiveMatmulScheduleFollowsTheShapes) {
  const std::string dir = ::testing::TempDir();
  const std::string trace = dir + "/collective_matmul_trace.json";
  bool reachable = true;
  const int n = RunTraced(trace, [&](int n) -> absl::Status {
    for (int j = 0; j < n; ++j) {
      MESHDMA_ASSIGN_OR_RETURN(
          bool yes, peer_view_reaches(DeviceId(j), DeviceIdType::kLogical));
      if (!yes) reachable = false;  // Every device writes the same answer.
    }
    auto matrix = [](std::vector<float>& v, int64_t rows, int64_t cols) {
      v.assign(rows * cols, 1.0f);
      return *ArrayRef::FromPointer(v.data(), DType::kF32,
                                    std::vector<int64_t>{rows, cols});
    };
    std::vector<float> x, w, out;
    // All-gather matmul, rows per member 4: w of 16 columns, then of 2.
    for (int64_t n_out : {16, 2}) {
      MESHDMA_RETURN_IF_ERROR(AllGatherMatmul(
          matrix(x, 4, 8), matrix(w, 8, n_out), matrix(out, 4 * n, n_out)));
    }
    // Matmul reduce-scatter, contraction 8 per member: 4 rows per member
    // of out, then 16.
    for (int64_t rows : {4, 16}) {
      MESHDMA_RETURN_IF_ERROR(MatmulReduceScatter(
          matrix(x, rows * n, 8), matrix(w, 8, 4), matrix(out, rows, 4)));
    }
    return absl::OkStatus();
  });
  ASSERT_GT(n, 0);
  const std::vector<std::vector<int>> rows =
      CountEvents(dir, kScheduleCounter, trace, 4);
  ASSERT_EQ(static_cast<int>(rows.size()), n) << "one track per device";
  const bool one_product = reachable && n > 1;
  for (const auto& r : rows) {
    EXPECT_EQ(r[0], one_product ? 1 : 0) << "all-gather matmul products";
    EXPECT_EQ(r[1], one_product ? n : 2 * n) << "all-gather matmul steps";
    EXPECT_EQ(r[2], one_product ? 1 : 0) << "matmul reduce-scatter products";
    EXPECT_EQ(r[3], one_product ? n : 2 * n) << "matmul reduce-scatter steps";
  }
}

}  // namespace
}  // namespace meshdma
