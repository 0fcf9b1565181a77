// Tutorial 9: a tensor-parallel transformer block to start from.
//
// One pre-norm transformer block (causal multi-head attention with grouped
// KV heads, then a GELU MLP), split over the mesh axis "tp" the Megatron way,
// with sequence parallelism between the sublayers:
//
//   x        [S, DM]  rows (sequence) sharded      P('tp', None)
//   Wq|Wk|Wv [DM, ..] columns (heads) sharded      P(None, 'tp')
//   Wo       [H*D, DM] rows (heads) sharded        P('tp', None)
//   W1       [DM, F]  columns sharded              P(None, 'tp')
//   W2       [F, DM]  rows sharded                 P('tp', None)
//
// Per device:
//   1. a = rms_norm(x)                             local rows
//   2. qkv = all_gather(a) @ [Wq|Wk|Wv]_i          AllGatherMatmul: gathers
//      the sequence while multiplying; my heads, the whole sequence
//   3. o = causal_attention(q, k, v)               local heads
//   4. x += reduce_scatter(o @ Wo_i)               MatmulReduceScatter: sums
//      the heads' contributions, hands each device its rows back
//   5. b = rms_norm(x); u = gelu(all_gather(b) @ W1_i)
//   6. x += reduce_scatter(u @ W2_i)
// Without sequence parallelism, steps 4 and 6 would end in a `psum` over
// "tp" (an all-reduce) of the full [S, DM] product and steps 2 and 5 would
// start from a replicated x; reduce-scatter + all-gather moves the same
// bytes as that all-reduce, and fused with the matmuls they overlap.
// (Where a plain all-reduce is wanted, use collectives' `psum`.)
//
// The result is checked against the same block computed on one device with
// the unsharded weights, then the block is timed with its collective
// matmuls compute-only, communication-only, overlapped and sequential.
//
//   build/examples/09_tensor_parallel_block
//   mpirun -np 2 build/examples/09_tensor_parallel_block --seq 1024 --model
//   1024
// Flags: --seq S, --model DM, --heads H, --kv-heads Hkv, --dim D, --ffn F,
//        --iters N.
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
#include "meshdma/collectives/fused/collective_matmul.h"
#include "meshdma/collectives/fused/online_attention.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/dma/trace.h"
#include "meshdma/kernels/blas.h"
#include "meshdma/kernels/ops/matmul.h"
#include "meshdma/sharding/shard_map.h"
#include "tools/runtime_flags.h"

ABSL_FLAG(int64_t, seq, 0, "sequence length; 0: 32 rows per device");
ABSL_FLAG(int64_t, model, 128, "hidden size");
ABSL_FLAG(int64_t, heads, 8, "query heads");
ABSL_FLAG(int64_t, kv_heads, 4, "key/value heads");
ABSL_FLAG(int64_t, dim, 16, "head dimension");
ABSL_FLAG(int64_t, ffn, 256, "MLP hidden size");
ABSL_FLAG(int, iters, 3, "timed iterations per mode");

namespace {

using meshdma::examples::Median;
using meshdma::examples::Random;

using meshdma::ArrayRef;
using meshdma::OverlapMode;
using meshdma::PartitionSpec;
using meshdma::ShardedArray;

struct Flags {
  int64_t seq = 0;  // 0: 32 rows per device.
  int64_t model = 128, heads = 8, kv_heads = 4, dim = 16, ffn = 256;
  int iters = 3;
};

const meshdma::cli::Program kProgram = meshdma::examples::ExampleProgram(
    "09_tensor_parallel_block",
    "One pre-norm transformer block split over mesh axis \"tp\" with\n"
    "sequence parallelism and collective matmuls; checked against the\n"
    "block on one device, then timed compute-only, communication-only and\n"
    "overlapped.",
    {{"seq", 0, 1 << 20},
     {"model", 1, 1 << 16},
     {"heads", 1, 1024},
     {"kv_heads", 1, 1024},
     {"dim", 1, 4096},
     {"ffn", 1, 1 << 20},
     {"iters", 1, 10000}});

Flags ReadFlags() {
  Flags f;
  f.seq = absl::GetFlag(FLAGS_seq);
  f.model = absl::GetFlag(FLAGS_model);
  f.heads = absl::GetFlag(FLAGS_heads);
  f.kv_heads = absl::GetFlag(FLAGS_kv_heads);
  f.dim = absl::GetFlag(FLAGS_dim);
  f.ffn = absl::GetFlag(FLAGS_ffn);
  f.iters = absl::GetFlag(FLAGS_iters);
  return f;
}

void RmsNorm(const float* x, int64_t rows, int64_t cols, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < cols; ++c)
      ss += double(x[r * cols + c]) * x[r * cols + c];
    const float inv = 1.0f / std::sqrt(float(ss / cols) + 1e-6f);
    for (int64_t c = 0; c < cols; ++c)
      out[r * cols + c] = x[r * cols + c] * inv;
  }
}

// Causal attention of `heads` query heads over `kv_heads` KV heads, all
// token-major: qkv [S, (heads + 2 kv_heads) * D] -> o [S, heads * D].
void Attention(const float* qkv, int64_t s, int64_t heads, int64_t kv_heads,
               int64_t d, float* o) {
  const int64_t width = (heads + 2 * kv_heads) * d;
  std::vector<float> q(heads * s * d), k(kv_heads * s * d), v(kv_heads * s * d);
  for (int64_t t = 0; t < s; ++t) {
    const float* row = qkv + t * width;
    for (int64_t h = 0; h < heads; ++h)
      std::copy_n(row + h * d, d, &q[(h * s + t) * d]);
    for (int64_t h = 0; h < kv_heads; ++h) {
      std::copy_n(row + (heads + h) * d, d, &k[(h * s + t) * d]);
      std::copy_n(row + (heads + kv_heads + h) * d, d, &v[(h * s + t) * d]);
    }
  }
  meshdma::OnlineAttention attention({heads, kv_heads, s, d},
                                     1.0f / std::sqrt(float(d)), true);
  std::vector<int64_t> pos(s);
  for (int64_t t = 0; t < s; ++t) pos[t] = t;
  attention.Attend(q.data(), k.data(), v.data(), s, pos, pos);
  std::vector<float> out(heads * s * d);
  attention.Finish(out.data());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t t = 0; t < s; ++t)
      std::copy_n(&out[(h * s + t) * d], d, o + (t * heads + h) * d);
}

// Column block `i` of `parts` of a row-major [rows, cols] matrix.
std::vector<float> ColumnBlock(const float* w, int64_t rows, int64_t cols,
                               int parts, int i) {
  const int64_t c = cols / parts;
  std::vector<float> out(rows * c);
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(w + r * cols + i * c, c, &out[r * c]);
  return out;
}

struct Weights {
  std::vector<float> wq, wk, wv, wo, w1, w2;
};

// The whole block on one device, unsharded: the reference.
std::vector<float> ReferenceBlock(const Flags& f, int64_t s,
                                  std::vector<float> x, const Weights& w) {
  const int64_t dm = f.model, h = f.heads, hkv = f.kv_heads, d = f.dim;
  const int64_t width = (h + 2 * hkv) * d;
  std::vector<float> wqkv(dm * width);
  for (int64_t r = 0; r < dm; ++r) {
    std::copy_n(&w.wq[r * h * d], h * d, &wqkv[r * width]);
    std::copy_n(&w.wk[r * hkv * d], hkv * d, &wqkv[r * width + h * d]);
    std::copy_n(&w.wv[r * hkv * d], hkv * d, &wqkv[r * width + (h + hkv) * d]);
  }
  std::vector<float> a(s * dm), qkv(s * width), o(s * h * d), u(s * f.ffn);
  RmsNorm(x.data(), s, dm, a.data());
  meshdma::Gemm(false, false, s, width, dm, 1, a.data(), dm, wqkv.data(), width,
                0, qkv.data(), width);
  Attention(qkv.data(), s, h, hkv, d, o.data());
  meshdma::Gemm(false, false, s, dm, h * d, 1, o.data(), h * d, w.wo.data(), dm,
                1, x.data(), dm);
  RmsNorm(x.data(), s, dm, a.data());
  meshdma::Gemm(false, false, s, f.ffn, dm, 1, a.data(), dm, w.w1.data(), f.ffn,
                0, u.data(), f.ffn);
  for (float& e : u)
    e = meshdma::ApplyActivation(meshdma::Activation::kGelu, e);
  meshdma::Gemm(false, false, s, dm, f.ffn, 1, u.data(), f.ffn, w.w2.data(), dm,
                1, x.data(), dm);
  return x;
}

// The block on one device of the "tp" axis (inside shard_map): x [S/n, DM],
// wq [DM, H/n*D], wk and wv [DM, Hkv/n*D], wo [H/n*D, DM], w1 [DM, F/n],
// w2 [F/n, DM] -> out [S/n, DM].
absl::Status TensorParallelBlock(const Flags& f, std::span<const ArrayRef> in,
                                 const ArrayRef& out, OverlapMode mode) {
  const ArrayRef &x = in[0], &wq = in[1], &wk = in[2], &wv = in[3], &wo = in[4],
                 &w1 = in[5], &w2 = in[6];
  MESHDMA_ASSIGN_OR_RETURN(int n, meshdma::axis_size("tp"));
  const int64_t rows = x.dim(0), s = rows * n, dm = x.dim(1), d = f.dim;
  const int64_t heads = f.heads / n, kv_heads = f.kv_heads / n;
  const int64_t qd = heads * d, kd = kv_heads * d, width = qd + 2 * kd;
  const int64_t f_local = w1.dim(1);
  const bool compute = meshdma::Computes(mode);
  const meshdma::CollectiveMatmulOptions cm{.axis = "tp", .mode = mode};
  auto view = [](std::vector<float>& v, std::vector<int64_t> shape) {
    return *ArrayRef::FromPointer(v.data(), meshdma::DType::kF32, shape);
  };
  // My heads' fused projection weights [DM, width].
  std::vector<float> wqkv(dm * width);
  for (int64_t r = 0; r < dm; ++r) {
    std::copy_n(wq.data_as<float>() + r * qd, qd, &wqkv[r * width]);
    std::copy_n(wk.data_as<float>() + r * kd, kd, &wqkv[r * width + qd]);
    std::copy_n(wv.data_as<float>() + r * kd, kd, &wqkv[r * width + qd + kd]);
  }
  std::vector<float> a(rows * dm), qkv(s * width), o(s * qd), u(s * f_local),
      partial(rows * dm);
  float* xo = out.data_as<float>();
  std::copy_n(x.data_as<float>(), rows * dm, xo);
  // Steps 1-2: a = rms_norm(x); qkv = all_gather(a) @ Wqkv_i.
  if (compute) RmsNorm(xo, rows, dm, a.data());
  MESHDMA_RETURN_IF_ERROR(meshdma::AllGatherMatmul(
      view(a, {rows, dm}), view(wqkv, {dm, width}), view(qkv, {s, width}), cm));
  // Step 3: causal attention over my heads, the whole sequence.
  if (compute) {
    meshdma::TraceSpan span("attention");
    Attention(qkv.data(), s, heads, kv_heads, d, o.data());
  }
  // Step 4: x += reduce_scatter(o @ Wo_i).
  MESHDMA_RETURN_IF_ERROR(meshdma::MatmulReduceScatter(
      view(o, {s, qd}), wo, view(partial, {rows, dm}), cm));
  if (compute) {
    for (int64_t i = 0; i < rows * dm; ++i) xo[i] += partial[i];
    RmsNorm(xo, rows, dm, a.data());
  }
  // Step 5: u = gelu(all_gather(rms_norm(x)) @ W1_i).
  MESHDMA_RETURN_IF_ERROR(meshdma::AllGatherMatmul(view(a, {rows, dm}), w1,
                                                   view(u, {s, f_local}), cm));
  if (compute) {
    for (float& e : u) {
      e = meshdma::ApplyActivation(meshdma::Activation::kGelu, e);
    }
  }
  // Step 6: x += reduce_scatter(u @ W2_i).
  MESHDMA_RETURN_IF_ERROR(meshdma::MatmulReduceScatter(
      view(u, {s, f_local}), w2, view(partial, {rows, dm}), cm));
  if (compute) {
    for (int64_t i = 0; i < rows * dm; ++i) xo[i] += partial[i];
  }
  return absl::OkStatus();
}

// The arrays of the block (the reference holds them all on one device),
// checked against this host's memory before anything is allocated.
absl::Status CheckSizes(const Flags& f, int64_t s) {
  using meshdma::cli::Factor;
  const Factor seq = f.seq > 0 ? Factor{"seq", s} : Factor{nullptr, s, "rows"};
  const Factor model{"model", f.model}, ffn{"ffn", f.ffn};
  const Factor width{nullptr, (f.heads + 2 * f.kv_heads) * f.dim,
                     "q, k and v columns"};
  const Factor bytes{nullptr, 4, "bytes per float"};
  return meshdma::examples::CheckArraySizes(
      kProgram, {{{seq, model, bytes}, "x"},
                 {{model, ffn, bytes}, "w1 and w2"},
                 {{seq, ffn, bytes}, "the MLP activations"},
                 {{seq, width, bytes}, "qkv"},
                 {{model, width, bytes}, "wq, wk and wv"}});
}

absl::Status Main(const Flags& flags, const meshdma::RuntimeOptions& options) {
  MESHDMA_ASSIGN_OR_RETURN(auto runtime, meshdma::Runtime::Create(options));
  meshdma::Runtime& rt = *runtime;
  MESHDMA_ASSIGN_OR_RETURN(meshdma::Mesh mesh, rt.MakeMesh1D("tp"));
  const int n = mesh.size();
  const bool root = rt.launch().rank() == 0;
  const int64_t s = flags.seq > 0 ? flags.seq : 32 * n, dm = flags.model,
                h = flags.heads, hkv = flags.kv_heads, d = flags.dim,
                ff = flags.ffn;
  if (s % n != 0 || h % n != 0 || hkv % n != 0 || ff % n != 0 || h % hkv != 0) {
    return absl::InvalidArgumentError(
        "--seq, --heads, --kv-heads and --ffn must divide by the devices, "
        "and --kv-heads must divide --heads");
  }
  if (absl::Status fits = CheckSizes(flags, s); !fits.ok()) return fits;
  // Step 0: the unsharded input and weights (same seeds on every process).
  const float ws = 1.0f / std::sqrt(float(dm));
  Weights w{Random(dm * h * d, 2, ws),   Random(dm * hkv * d, 3, ws),
            Random(dm * hkv * d, 4, ws), Random(h * d * dm, 5, ws),
            Random(dm * ff, 6, ws),      Random(ff * dm, 7, ws)};
  std::vector<float> x = Random(s * dm, 1);
  const PartitionSpec rows{{"tp"}}, cols{{}, {"tp"}};
  auto shard = [&](std::vector<float>& v, std::vector<int64_t> shape,
                   const PartitionSpec& spec, const char* name) {
    return ShardedArray::FromHost(rt, mesh, spec, v, shape, {.name = name});
  };
  MESHDMA_ASSIGN_OR_RETURN(ShardedArray xs, shard(x, {s, dm}, rows, "x"));
  MESHDMA_ASSIGN_OR_RETURN(ShardedArray wqs,
                           shard(w.wq, {dm, h * d}, cols, "wq"));
  MESHDMA_ASSIGN_OR_RETURN(ShardedArray wks,
                           shard(w.wk, {dm, hkv * d}, cols, "wk"));
  MESHDMA_ASSIGN_OR_RETURN(ShardedArray wvs,
                           shard(w.wv, {dm, hkv * d}, cols, "wv"));
  MESHDMA_ASSIGN_OR_RETURN(ShardedArray wos,
                           shard(w.wo, {h * d, dm}, rows, "wo"));
  MESHDMA_ASSIGN_OR_RETURN(ShardedArray w1s, shard(w.w1, {dm, ff}, cols, "w1"));
  MESHDMA_ASSIGN_OR_RETURN(ShardedArray w2s, shard(w.w2, {ff, dm}, rows, "w2"));
  const ShardedArray args[] = {xs, wqs, wks, wvs, wos, w1s, w2s};
  const std::vector<PartitionSpec> in_specs = {rows, cols, cols, cols,
                                               rows, cols, rows};
  const meshdma::ShapeDtype out_shape[] = {{meshdma::DType::kF32, {s, dm}}};

  // Steps 1-6 under shard_map, then the check against one device.
  std::vector<double> per_device(mesh.size());
  auto block = [&](OverlapMode mode) {
    return meshdma::shard_map(
        [&, mode](std::span<const ArrayRef> in,
                  std::span<const ArrayRef> out) -> absl::Status {
          MESHDMA_ASSIGN_OR_RETURN(int me, meshdma::logical_device_id());
          MESHDMA_RETURN_IF_ERROR(meshdma::device_barrier());
          const auto t0 = std::chrono::steady_clock::now();
          MESHDMA_RETURN_IF_ERROR(TensorParallelBlock(flags, in, out[0], mode));
          MESHDMA_RETURN_IF_ERROR(meshdma::device_barrier());
          per_device[me] = std::chrono::duration<double, std::milli>(
                               std::chrono::steady_clock::now() - t0)
                               .count();
          return absl::OkStatus();
        },
        mesh, in_specs, {rows}, {.name = "tensor_parallel_block"});
  };
  MESHDMA_ASSIGN_OR_RETURN(
      auto outs, block(OverlapMode::kOverlapped)(rt, args, out_shape));
  MESHDMA_ASSIGN_OR_RETURN(std::vector<float> got, outs[0].ToHost<float>());
  const std::vector<float> want = ReferenceBlock(flags, s, x, w);
  double max_err = 0.0;
  for (size_t i = 0; i < want.size(); ++i)
    max_err = std::max(max_err, double(std::abs(want[i] - got[i])));
  const bool ok = max_err < 1e-3;

  const OverlapMode modes[] = {
      OverlapMode::kComputeOnly, OverlapMode::kCommunicationOnly,
      OverlapMode::kOverlapped, OverlapMode::kSequential};
  std::vector<std::vector<double>> times(4);
  for (int it = 0; it < flags.iters + 1; ++it) {
    for (int m = 0; m < 4; ++m) {
      MESHDMA_RETURN_IF_ERROR(block(modes[m])(rt, args, out_shape).status());
      if (it > 0)
        times[m].push_back(
            *std::max_element(per_device.begin(), per_device.end()));
    }
  }
  const double compute = Median(times[0]), comm = Median(times[1]),
               overlapped = Median(times[2]), sequential = Median(times[3]);
  if (root) {
    std::printf(
        "tensor-parallel block: %d devices (%d processes), S=%lld DM=%lld "
        "H=%lld Hkv=%lld D=%lld F=%lld\n",
        n, rt.launch().num_processes(), (long long)s, (long long)dm,
        (long long)h, (long long)hkv, (long long)d, (long long)ff);
    std::printf("  vs the unsharded block on one device: max |err| = %.2e %s\n",
                max_err, ok ? "(ok)" : "WRONG");
    std::printf(
        "  compute-only %.3f ms, communication-only %.3f ms, overlapped %.3f "
        "ms, sequential %.3f ms\n"
        "  overlapped / max(compute, communication) = %.2f\n",
        compute, comm, overlapped, sequential,
        overlapped / std::max(compute, comm));
  }
  if (!ok) return absl::InternalError("tensor-parallel block is wrong");
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  const meshdma::RuntimeOptions options =
      meshdma::cli::ParseRuntimeOptionsOrExit(kProgram, argc, argv);
  return meshdma::examples::Finish("09_tensor_parallel_block",
                                   Main(ReadFlags(), options));
}
