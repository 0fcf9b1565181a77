// Tutorial 8: KV-cache transfer pipelining (prefill -> decode).
//
// In disaggregated serving one group of devices runs the prompt (prefill)
// and another generates tokens (decode). The prompt's keys and values must
// move from the first group into the second group's paged KV cache. Waiting
// for the whole cache would leave the decode group idle for the whole
// prefill; instead the prefill device streams layer l's pages with remote
// DMA while it computes layer l + 1, and the decode device attends over
// layer l as soon as layer l's bytes have arrived (one DMA semaphore per
// layer), while later layers are still in flight.
//
// Mesh {stage: 2, x: n/2}: stage 0 is the prefill group, stage 1 the decode
// group; prefill device (0, i) feeds decode device (1, i). With mpirun -np 2
// the two groups are different processes (hosts, with
// MESHDMA_FORCE_INTERHOST=1 or a real cluster).
//
// What this program does:
//   1. each prefill device runs a small transformer over its prompt, layer
//      by layer (projections, causal attention, output projection with a
//      residual), producing each layer's K and V [Hkv, S, D];
//   2. `KvTransfer` pages them into the decode device's cache through the
//      block table the decode device chose (pages scattered on purpose);
//   3. each decode device attends a decode query per layer over the paged
//      cache, checked against the same computation on one device with no
//      transfer and no paging;
//   4. the pipeline is timed compute-only, communication-only, overlapped and
//      sequential.
//
//   build/examples/08_kv_cache_transfer
//   mpirun -np 2 build/examples/08_kv_cache_transfer --seq 1024 --layers 8
// Flags: --layers L, --seq S, --heads H, --kv-heads Hkv, --dim D,
//        --model DM (hidden size), --page P, --iters N.
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
#include "meshdma/collectives/fused/kv_transfer.h"
#include "meshdma/collectives/fused/online_attention.h"
#include "meshdma/dma/kernel.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/kernels/blas.h"
#include "meshdma/kernels/ops/attention_reference.h"
#include "tools/runtime_flags.h"

ABSL_FLAG(int, layers, 4, "transformer layers");
ABSL_FLAG(int64_t, seq, 128, "prompt length");
ABSL_FLAG(int64_t, heads, 4, "query heads");
ABSL_FLAG(int64_t, kv_heads, 2, "key/value heads");
ABSL_FLAG(int64_t, dim, 32, "head dimension");
ABSL_FLAG(int64_t, model, 128, "hidden size");
ABSL_FLAG(int64_t, page, 16, "tokens per KV-cache page");
ABSL_FLAG(int, iters, 3, "timed iterations per mode");

namespace {

using meshdma::examples::Median;
using meshdma::examples::Random;

using meshdma::ArrayRef;
using meshdma::OverlapMode;

struct Flags {
  int layers = 4;
  int64_t seq = 128, heads = 4, kv_heads = 2, dim = 32, model = 128, page = 16;
  int iters = 3;
};

const meshdma::cli::Program kProgram = meshdma::examples::ExampleProgram(
    "08_kv_cache_transfer",
    "Prefill devices stream each layer's KV-cache pages by remote DMA\n"
    "into the decode devices' paged cache while computing the next layer;\n"
    "decode attends over each layer as it arrives. Checked, then timed.",
    {{"layers", 1, 1024},
     {"seq", 1, 1 << 20},
     {"heads", 1, 1024},
     {"kv_heads", 1, 1024},
     {"dim", 1, 4096},
     {"model", 1, 1 << 16},
     {"page", 1, 1 << 20},
     {"iters", 1, 10000}});

Flags ReadFlags() {
  Flags f;
  f.layers = absl::GetFlag(FLAGS_layers);
  f.seq = absl::GetFlag(FLAGS_seq);
  f.heads = absl::GetFlag(FLAGS_heads);
  f.kv_heads = absl::GetFlag(FLAGS_kv_heads);
  f.dim = absl::GetFlag(FLAGS_dim);
  f.model = absl::GetFlag(FLAGS_model);
  f.page = absl::GetFlag(FLAGS_page);
  f.iters = absl::GetFlag(FLAGS_iters);
  return f;
}

// The prefill model: per layer Wq [DM, H*D], Wk and Wv [DM, Hkv*D],
// Wo [H*D, DM]. The same seeds on every process.
struct Model {
  Flags f;
  std::vector<std::vector<float>> wq, wk, wv, wo;
  explicit Model(const Flags& flags) : f(flags) {
    const float s = 1.0f / std::sqrt(float(f.model));
    for (int l = 0; l < f.layers; ++l) {
      wq.push_back(Random(f.model * f.heads * f.dim, 100 + 4 * l, s));
      wk.push_back(Random(f.model * f.kv_heads * f.dim, 101 + 4 * l, s));
      wv.push_back(Random(f.model * f.kv_heads * f.dim, 102 + 4 * l, s));
      wo.push_back(Random(f.heads * f.dim * f.model, 103 + 4 * l, s));
    }
  }

  // [S, heads * D] -> [heads, S, D].
  void ToHeadMajor(const float* in, int64_t heads, float* out) const {
    for (int64_t t = 0; t < f.seq; ++t)
      for (int64_t hh = 0; hh < heads; ++hh)
        std::copy_n(in + (t * heads + hh) * f.dim, f.dim,
                    out + (hh * f.seq + t) * f.dim);
  }

  // One prefill layer on hidden state `x` [S, DM] (updated in place): writes
  // the layer's keys and values, [Hkv, S, D] each.
  void Layer(int l, std::vector<float>& x, float* k, float* v) const {
    const int64_t s = f.seq, dm = f.model, h = f.heads, hkv = f.kv_heads,
                  d = f.dim;
    std::vector<float> proj(s * h * d), q(h * s * d);
    // Step 1: projections (token-major), then head-major K, V, Q.
    meshdma::Gemm(false, false, s, hkv * d, dm, 1.0f, x.data(), dm,
                  wk[l].data(), hkv * d, 0.0f, proj.data(), hkv * d);
    ToHeadMajor(proj.data(), hkv, k);
    meshdma::Gemm(false, false, s, hkv * d, dm, 1.0f, x.data(), dm,
                  wv[l].data(), hkv * d, 0.0f, proj.data(), hkv * d);
    ToHeadMajor(proj.data(), hkv, v);
    meshdma::Gemm(false, false, s, h * d, dm, 1.0f, x.data(), dm, wq[l].data(),
                  h * d, 0.0f, proj.data(), h * d);
    ToHeadMajor(proj.data(), h, q.data());
    // Step 2: causal self-attention over the prompt.
    meshdma::OnlineAttention attention({h, hkv, s, d},
                                       1.0f / std::sqrt(float(d)), true);
    std::vector<int64_t> pos(s);
    for (int64_t t = 0; t < s; ++t) pos[t] = t;
    attention.Attend(q.data(), k, v, s, pos, pos);
    std::vector<float> o(h * s * d), o_tok(s * h * d);
    attention.Finish(o.data());
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t t = 0; t < s; ++t)
        std::copy_n(&o[(hh * s + t) * d], d, &o_tok[(t * h + hh) * d]);
    // Step 3: x += o Wo.
    meshdma::Gemm(false, false, s, dm, h * d, 1.0f, o_tok.data(), h * d,
                  wo[l].data(), dm, 1.0f, x.data(), dm);
  }

  std::vector<float> Prompt(int pair) const {
    return Random(f.seq * f.model, 7 + pair);
  }
  std::vector<float> DecodeQuery(int pair, int l) const {
    return Random(f.heads * f.dim, 1000 + 31 * pair + l);
  }
};

absl::Status Main(const Flags& flags, const meshdma::RuntimeOptions& options) {
  MESHDMA_ASSIGN_OR_RETURN(auto runtime, meshdma::Runtime::Create(options));
  meshdma::Runtime& rt = *runtime;
  if (rt.num_devices() % 2 != 0) {
    return absl::InvalidArgumentError(
        "needs an even number of devices (prefill and decode halves)");
  }
  const int pairs = rt.num_devices() / 2;
  MESHDMA_ASSIGN_OR_RETURN(meshdma::Mesh mesh,
                           rt.MakeMesh({{"stage", 2}, {"x", pairs}}));
  const bool root = rt.launch().rank() == 0;
  // The weights, prompts and KV cache, before anything is allocated.
  using meshdma::cli::Factor;
  const Factor layers{"layers", flags.layers}, model_dim{"model", flags.model},
      seq{"seq", flags.seq}, dim{"dim", flags.dim},
      bytes{nullptr, 4, "bytes per float"};
  if (absl::Status fits = meshdma::examples::CheckArraySizes(
          kProgram,
          {{{layers, model_dim, {"heads", flags.heads}, dim, bytes},
            "wq and wo"},
           {{layers, model_dim, {"kv_heads", flags.kv_heads}, dim, bytes},
            "wk and wv"},
           {{seq, model_dim, bytes}, "a prompt"},
           {{{"heads", flags.heads}, seq, dim, bytes}, "q and o"},
           {{layers,
             {"kv_heads", flags.kv_heads},
             seq,
             dim,
             {nullptr, 2, "K and V"},
             bytes},
            "the KV cache"}});
      !fits.ok()) {
    return fits;
  }
  const Model model(flags);
  const int64_t s = flags.seq, ps = flags.page, hkv = flags.kv_heads,
                d = flags.dim, h = flags.heads;
  const int64_t pages = (s + ps - 1) / ps;
  const int64_t total_pages = 2 * pages + 1;
  // The decode device's page choice: every other page, from the end.
  std::vector<int32_t> table(pages);
  for (int64_t p = 0; p < pages; ++p)
    table[p] = static_cast<int32_t>(total_pages - 1 - 2 * p);
  const float scale = 1.0f / std::sqrt(float(d));

  // One pipeline run in `mode`; decode outputs per LOGICAL id, per-device
  // times between device barriers.
  std::vector<std::vector<float>> decoded(mesh.size());
  std::vector<double> per_device(mesh.size());
  auto run = [&](OverlapMode mode) {
    return rt.Run(mesh, [&]() -> absl::Status {
      MESHDMA_ASSIGN_OR_RETURN(int pair, meshdma::axis_index("x"));
      MESHDMA_ASSIGN_OR_RETURN(int me, meshdma::logical_device_id());
      std::vector<float> x = model.Prompt(pair);  // Prefill hidden state.
      decoded[me].clear();
      const meshdma::KvTransferOptions options = {.num_layers = flags.layers,
                                                  .num_kv_heads = hkv,
                                                  .head_dim = d,
                                                  .page_size = ps,
                                                  .total_pages = total_pages,
                                                  .mode = mode};
      // The decode cache: symmetric, allocated by both roles, and kept by
      // the caller (here until the Run ends).
      MESHDMA_ASSIGN_OR_RETURN(ArrayRef cache,
                               meshdma::AllocateKvCache(options));
      MESHDMA_RETURN_IF_ERROR(meshdma::device_barrier());
      const auto t0 = std::chrono::steady_clock::now();
      MESHDMA_RETURN_IF_ERROR(meshdma::KvTransfer(
          s, table, cache, options,
          // Prefill: compute layer l's K and V into the staging slot.
          [&](int l, const ArrayRef& k, const ArrayRef& v) {
            model.Layer(l, x, k.data_as<float>(), v.data_as<float>());
            return absl::OkStatus();
          },
          // Decode: paged attention over layer l's cache as soon as it is
          // here, while later layers' pages are still in flight.
          [&](int l, const ArrayRef& key_cache,
              const ArrayRef& value_cache) -> absl::Status {
            const std::vector<float> q = model.DecodeQuery(pair, l);
            MESHDMA_ASSIGN_OR_RETURN(
                const std::vector<float> o,
                meshdma::DecodePagedAttention(q.data(), h, key_cache,
                                              value_cache, s, table, scale));
            decoded[me].insert(decoded[me].end(), o.begin(), o.end());
            return absl::OkStatus();
          }));
      MESHDMA_RETURN_IF_ERROR(meshdma::device_barrier());
      per_device[me] = std::chrono::duration<double, std::milli>(
                           std::chrono::steady_clock::now() - t0)
                           .count();
      return absl::OkStatus();
    });
  };

  // Steps 1-3: one overlapped run, checked on every local decode device
  // against the single-device computation (no transfer, no paging).
  MESHDMA_RETURN_IF_ERROR(run(OverlapMode::kOverlapped));
  double max_err = 0.0;
  int checked = 0;
  for (int me = 0; me < mesh.size(); ++me) {
    MESHDMA_ASSIGN_OR_RETURN(auto coords, mesh.Coords(me));
    if (coords[0] != 1 || decoded[me].empty()) continue;
    const int pair = coords[1];
    std::vector<float> x = model.Prompt(pair), want;
    std::vector<float> k(hkv * s * d), v(hkv * s * d);
    for (int l = 0; l < flags.layers; ++l) {
      model.Layer(l, x, k.data(), v.data());
      auto o = meshdma::ReferenceAttention(model.DecodeQuery(pair, l), k, v, 1,
                                           h, hkv, 1, s, d, scale, false);
      want.insert(want.end(), o.begin(), o.end());
    }
    for (size_t i = 0; i < want.size(); ++i)
      max_err = std::max(max_err, double(std::abs(want[i] - decoded[me][i])));
    ++checked;
  }
  const bool ok = max_err < 1e-4;

  // Step 4: timings (alternating modes; the first repetition warms up).
  const OverlapMode modes[] = {
      OverlapMode::kComputeOnly, OverlapMode::kCommunicationOnly,
      OverlapMode::kOverlapped, OverlapMode::kSequential};
  std::vector<std::vector<double>> times(4);
  for (int it = 0; it < flags.iters + 1; ++it) {
    for (int m = 0; m < 4; ++m) {
      MESHDMA_RETURN_IF_ERROR(run(modes[m]));
      if (it > 0)
        times[m].push_back(
            *std::max_element(per_device.begin(), per_device.end()));
    }
  }
  const double compute = Median(times[0]), comm = Median(times[1]),
               overlapped = Median(times[2]), sequential = Median(times[3]);
  if (root) {
    std::printf(
        "KV-cache transfer: %d prefill -> %d decode devices (%d processes), "
        "%d layers, prompt %lld tokens, H=%lld Hkv=%lld D=%lld, pages of "
        "%lld\n",
        pairs, pairs, rt.launch().num_processes(), flags.layers, (long long)s,
        (long long)h, (long long)hkv, (long long)d, (long long)ps);

    std::printf(
        "  compute-only %.3f ms, communication-only %.3f ms, overlapped %.3f "
        "ms, sequential %.3f ms\n"
        "  overlapped / max(compute, communication) = %.2f\n",
        compute, comm, overlapped, sequential,
        overlapped / std::max(compute, comm));
  }
  if (checked > 0) {
    std::printf(
        "  rank %d: decode attention over the received paged cache vs one "
        "device: max |err| = %.2e on %d decode device(s) %s\n",
        rt.launch().rank(), max_err, checked, ok ? "(ok)" : "WRONG");
  }
  if (!ok) return absl::InternalError("decode results are wrong");
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  const meshdma::RuntimeOptions options =
      meshdma::cli::ParseRuntimeOptionsOrExit(kProgram, argc, argv);
  return meshdma::examples::Finish("08_kv_cache_transfer",
                                   Main(ReadFlags(), options));
}
