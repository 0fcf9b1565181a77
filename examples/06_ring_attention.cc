// Tutorial 6: ring attention (a sequence sharded over the mesh axis "x").
//
// A long sequence does not fit one device, so its rows are split over n
// devices. Attention needs every query to see every key, so the key/value
// blocks travel around the ring: at each of the n steps a device attends its
// local queries to the KV block in hand while a remote DMA already carries
// that block to its right neighbour (double-buffered). The partial results
// are merged by the online softmax (running max, sum and accumulator), so
// nothing but the KV blocks moves.
//
// Causal attention would leave device 0 idle and device n-1 busy; the
// zig-zag layout (device i holds sequence chunks i and 2n-1-i) balances it.
//
// What this program does:
//   1. builds q, k, v on the host, permutes the sequence into zig-zag order
//      and shards it with `ShardedArray::FromHost` (P(None, 'x', None));
//   2. runs `RingAttention` inside `shard_map` and gathers the output;
//   3. checks it against full attention on the gathered sequence;
//   4. times the same schedule compute-only, communication-only, overlapped
//      (and sequential, for comparison) and prints
//      overlapped / max(compute, communication).
//
// Devices that are threads of one process, or processes of one host whose
// KV blocks lie in the symmetric heap (where the timed runs keep them),
// read each other's KV blocks in place instead of copying them
// (MESHDMA_FUSED_TRANSFER=dma copies them by DMA, for comparison).
//
// Runs with no flags as threads of one process, or under mpirun:
//   build/examples/06_ring_attention
//   mpirun -np 2 build/examples/06_ring_attention --seq 4096 --heads 8
// Flags: --seq S (global length), --heads H, --kv-heads Hkv, --dim D,
//        --iters N, --no-causal, --contiguous, --no-check.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "examples/example_util.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/collectives/fused/ring_attention.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/symmetric_memory.h"
#include "meshdma/kernels/ops/attention_reference.h"
#include "meshdma/sharding/shard_map.h"
#include "tools/runtime_flags.h"

ABSL_FLAG(int64_t, seq, 0, "global sequence length; 0: 64 rows per device");
ABSL_FLAG(int64_t, heads, 4, "query heads");
ABSL_FLAG(int64_t, kv_heads, 0, "key/value heads; 0: as many as --heads");
ABSL_FLAG(int64_t, dim, 64, "head dimension");
ABSL_FLAG(int, iters, 3, "timed iterations per mode");
ABSL_FLAG(bool, causal, true, "causal attention");
ABSL_FLAG(bool, contiguous, false,
          "contiguous sequence chunks instead of the zig-zag layout");
ABSL_FLAG(bool, check, true, "check the output against full attention");

namespace {

using meshdma::examples::Median;
using meshdma::examples::Random;

using meshdma::ArrayRef;
using meshdma::OverlapMode;
using meshdma::PartitionSpec;
using meshdma::SequenceLayout;
using meshdma::ShardedArray;

struct Flags {
  int64_t seq = 0;  // 0: 64 rows per device.
  int64_t heads = 4;
  int64_t kv_heads = 0;  // 0: = heads.
  int64_t dim = 64;
  int iters = 3;
  bool causal = true;
  bool zigzag = true;
  bool check = true;
};

const meshdma::cli::Program kProgram = meshdma::examples::ExampleProgram(
    "06_ring_attention",
    "Ring attention over a sequence sharded on mesh axis \"x\": KV blocks\n"
    "travel the ring while each device attends to the block in hand;\n"
    "checked against full attention and timed compute-only,\n"
    "communication-only and overlapped.",
    {{"seq", 0, 1 << 24},
     {"heads", 1, 1024},
     {"kv_heads", 0, 1024},
     {"dim", 1, 4096},
     {"iters", 1, 10000}});

Flags ReadFlags() {
  Flags f;
  f.seq = absl::GetFlag(FLAGS_seq);
  f.heads = absl::GetFlag(FLAGS_heads);
  f.kv_heads = absl::GetFlag(FLAGS_kv_heads);
  if (f.kv_heads == 0) f.kv_heads = f.heads;
  f.dim = absl::GetFlag(FLAGS_dim);
  f.iters = absl::GetFlag(FLAGS_iters);
  f.causal = absl::GetFlag(FLAGS_causal);
  f.zigzag = !absl::GetFlag(FLAGS_contiguous);
  f.check = absl::GetFlag(FLAGS_check);
  return f;
}

// Rows of an [H, S, D] array in `order` (or back, with `inverse`).
std::vector<float> Permute(const std::vector<float>& in, int64_t h, int64_t s,
                           int64_t d, const std::vector<int64_t>& order,
                           bool inverse) {
  std::vector<float> out(in.size());
  for (int64_t hh = 0; hh < h; ++hh) {
    for (int64_t r = 0; r < s; ++r) {
      const int64_t from = inverse ? r : order[r];
      const int64_t to = inverse ? order[r] : r;
      std::copy_n(&in[(hh * s + from) * d], d, &out[(hh * s + to) * d]);
    }
  }
  return out;
}

absl::Status Main(const Flags& flags, const meshdma::RuntimeOptions& options) {
  MESHDMA_ASSIGN_OR_RETURN(auto runtime, meshdma::Runtime::Create(options));
  meshdma::Runtime& rt = *runtime;
  MESHDMA_ASSIGN_OR_RETURN(meshdma::Mesh mesh, rt.MakeMesh1D("x"));
  const int n = mesh.size();
  const bool root = rt.launch().rank() == 0;
  const int64_t h = flags.heads, hkv = flags.kv_heads, d = flags.dim;
  const int64_t s = flags.seq > 0 ? flags.seq : 64 * n;
  if (s % (2 * n) != 0) {
    return absl::InvalidArgumentError(
        "--seq must be a multiple of 2 x the number of devices");
  }
  // q, k and v of every head and token, before anything is allocated.
  using meshdma::cli::Factor;
  const Factor seq =
      flags.seq > 0 ? Factor{"seq", s} : Factor{nullptr, s, "rows"};
  if (absl::Status fits = meshdma::examples::CheckArraySizes(
          kProgram,
          {{{{"heads", h}, seq, {"dim", d}, {nullptr, 4, "bytes per float"}},
            "q"},
           {{{"kv_heads", hkv},
             seq,
             {"dim", d},
             {nullptr, 4, "bytes per float"}},
            "k and v"}});
      !fits.ok()) {
    return fits;
  }
  const SequenceLayout layout =
      flags.zigzag ? SequenceLayout::kZigZag : SequenceLayout::kContiguous;

  // Step 1: the global q, k, v on every process (same seeds), laid out in
  // zig-zag order and sharded along the sequence.
  std::vector<float> q = Random(h * s * d, 1), k = Random(hkv * s * d, 2),
                     v = Random(hkv * s * d, 3);
  std::vector<int64_t> order(s);
  for (int64_t i = 0; i < s; ++i) order[i] = i;
  if (flags.zigzag) order = meshdma::ZigZagOrder(s, n);
  std::vector<float> qp = Permute(q, h, s, d, order, false),
                     kp = Permute(k, hkv, s, d, order, false),
                     vp = Permute(v, hkv, s, d, order, false);
  const PartitionSpec seq_spec{{}, {"x"}, {}};
  MESHDMA_ASSIGN_OR_RETURN(
      ShardedArray qs,
      ShardedArray::FromHost(rt, mesh, seq_spec, qp, {h, s, d}, {.name = "q"}));
  MESHDMA_ASSIGN_OR_RETURN(ShardedArray ks,
                           ShardedArray::FromHost(rt, mesh, seq_spec, kp,
                                                  {hkv, s, d}, {.name = "k"}));
  MESHDMA_ASSIGN_OR_RETURN(ShardedArray vs,
                           ShardedArray::FromHost(rt, mesh, seq_spec, vp,
                                                  {hkv, s, d}, {.name = "v"}));
  const ShardedArray args[] = {qs, ks, vs};
  const meshdma::ShapeDtype out_shape[] = {{meshdma::DType::kF32, {h, s, d}}};

  // Step 2: ring attention inside shard_map; each call of `fn` sees its
  // [H, S/n, D] shards.
  auto ring = [&](OverlapMode mode) {
    return meshdma::shard_map(
        [&, mode](std::span<const ArrayRef> in, std::span<const ArrayRef> out) {
          return meshdma::RingAttention(
              in[0], in[1], in[2], out[0],
              {.causal = flags.causal, .layout = layout, .mode = mode});
        },
        mesh, {seq_spec, seq_spec, seq_spec}, {seq_spec},
        {.name = "ring_attention"});
  };
  MESHDMA_ASSIGN_OR_RETURN(auto outs,
                           ring(OverlapMode::kOverlapped)(rt, args, out_shape));
  MESHDMA_ASSIGN_OR_RETURN(std::vector<float> got_permuted,
                           outs[0].ToHost<float>());
  std::vector<float> got = Permute(got_permuted, h, s, d, order, true);

  // Step 3: full attention on the gathered sequence.
  double max_err = 0.0;
  if (flags.check) {
    std::vector<float> want = meshdma::ReferenceAttention(
        q, k, v, 1, h, hkv, s, s, d, 1.0f / std::sqrt(float(d)), flags.causal);
    for (size_t i = 0; i < want.size(); ++i) {
      max_err = std::max(max_err, double(std::abs(want[i] - got[i])));
    }
  }

  // Step 4: time each mode. Every repetition runs the four modes in turn
  // (alternating, so drift hits them alike); a device times its own call
  // between two device barriers; the slowest device counts.
  const OverlapMode modes[] = {
      OverlapMode::kComputeOnly, OverlapMode::kCommunicationOnly,
      OverlapMode::kOverlapped, OverlapMode::kSequential};
  std::vector<std::vector<double>> times(4);
  for (int it = 0; it < flags.iters + 1; ++it) {
    for (int m = 0; m < 4; ++m) {
      std::vector<double> per_device(mesh.size(), 0.0);
      auto timed = meshdma::shard_map(
          [&, m](std::span<const ArrayRef> in,
                 std::span<const ArrayRef> out) -> absl::Status {
            MESHDMA_ASSIGN_OR_RETURN(int me, meshdma::logical_device_id());
            // k and v in the symmetric heap, where a model would keep its
            // KV: devices of other processes on this host read them in
            // place too.
            ArrayRef kv[2];
            for (int i = 0; i < 2; ++i) {
              MESHDMA_ASSIGN_OR_RETURN(
                  kv[i], meshdma::AllocateSymmetric(in[1 + i].dtype(),
                                                    in[1 + i].shape()));
              std::memcpy(kv[i].data(), in[1 + i].data(),
                          in[1 + i].size_bytes());
            }
            MESHDMA_RETURN_IF_ERROR(meshdma::device_barrier());
            const auto t0 = std::chrono::steady_clock::now();
            MESHDMA_RETURN_IF_ERROR(meshdma::RingAttention(
                in[0], kv[0], kv[1], out[0],
                {.causal = flags.causal, .layout = layout, .mode = modes[m]}));
            MESHDMA_RETURN_IF_ERROR(meshdma::device_barrier());
            per_device[me] = std::chrono::duration<double, std::milli>(
                                 std::chrono::steady_clock::now() - t0)
                                 .count();
            return absl::OkStatus();
          },
          mesh, {seq_spec, seq_spec, seq_spec}, {seq_spec});
      MESHDMA_RETURN_IF_ERROR(timed(rt, args, out_shape).status());
      if (it > 0) {  // The first repetition warms up.
        times[m].push_back(
            *std::max_element(per_device.begin(), per_device.end()));
      }
    }
  }
  const double compute = Median(times[0]), comm = Median(times[1]),
               overlapped = Median(times[2]), sequential = Median(times[3]);
  const bool ok = !flags.check || max_err < 1e-4;
  if (root) {
    std::printf(
        "ring attention: %d devices (%d processes), H=%lld Hkv=%lld S=%lld "
        "D=%lld, %s, %s layout\n",
        n, rt.launch().num_processes(), (long long)h, (long long)hkv,
        (long long)s, (long long)d, flags.causal ? "causal" : "non-causal",
        flags.zigzag ? "zig-zag" : "contiguous");
    if (flags.check) {
      std::printf(
          "  vs full attention on the gathered sequence: max |err| = "
          "%.2e %s\n",
          max_err, ok ? "(ok)" : "WRONG");
    }
    std::printf(
        "  compute-only %.3f ms, communication-only %.3f ms, overlapped %.3f "
        "ms, sequential %.3f ms\n"
        "  overlapped / max(compute, communication) = %.2f\n",
        compute, comm, overlapped, sequential,
        overlapped / std::max(compute, comm));
  }
  if (!ok) return absl::InternalError("ring attention result is wrong");
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  const meshdma::RuntimeOptions options =
      meshdma::cli::ParseRuntimeOptionsOrExit(kProgram, argc, argv);
  return meshdma::examples::Finish("06_ring_attention",
                                   Main(ReadFlags(), options));
}
