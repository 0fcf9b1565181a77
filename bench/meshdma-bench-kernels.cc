// meshdma-bench-kernels: compute-kernel throughput on one device.
//
//   meshdma-bench-kernels [--quick] [--sections 4,7] [--attention causal]
//                         [--head_dim 64]
//                         [--matmul_blocks default,256x256x256]
//                         [--flash_blocks default,256x512,128x128]
//                         [--backward_blocks default,128x128]
//
// 1. Block matmul libraries: OpenBLAS sgemm, Eigen, a plain loop, at the
//    block sizes the kernels use (the measurement behind kernels/blas.h).
// 2. The single-core sgemm rate (OpenBLAS, 1 thread, 1024^3) in this run:
//    the yardstick for everything below.
// 3. matmul + relu (pallas_call, 3-D grid) GFLOP/s at 512^3, 1024^3 and
//    1000^3, for each block shape of --matmul_blocks (by default the
//    kernel's own); its share of sgemm 1024^3 and of sgemm at the same size,
//    each timed in turn with it as in 4.
// 4. flash attention forward GFLOP/s at head_dim 128 (or --head_dim; also
//    in 5 and 7), seq 2048 and 4096, non-causal (4*S*S*D flops per head) and
//    causal (half), for each block shape of --flash_blocks; its share of sgemm
//    is taken from sgemm runs timed in turn with it (the machine may be
//    shared).
// 5. Peak attention memory per head versus sequence length, from the sizes
//    each algorithm allocates: both hold q, k, v, o (linear in S); flash adds
//    its staging buffers and scratch (counted by the pipeline, constant in
//    S), naive adds the [S, S] f32 score matrix (quadratic).
// 6. Paged attention decode (one query token per sequence, GQA 32/8 heads,
//    head_dim 128, pages of 16 tokens scattered at random through the cache)
//    versus flash attention on the same K/V stored contiguously, at equal
//    context lengths: decode tokens/s, GFLOP/s (4 * ctx * D per query head)
//    and K/V read bandwidth.
// 7. flash attention backward GFLOP/s (dq, dk, dv; 10*S*S*D flops per head,
//    the five block products of FlashAttention-2, half when causal) at seq
//    1024 and 2048, for each block shape of --backward_blocks (by default
//    the kernel's own, which meshdma.torch's autograd runs); its share of
//    sgemm timed in turn with it as in 4.
// Medians of several runs after a warm-up.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#ifdef MESHDMA_BENCH_EIGEN
#include <Eigen/Core>
#endif

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/dma/runtime.h"
#include "meshdma/kernels/blas.h"
#include "meshdma/kernels/ops/flash_attention.h"
#include "meshdma/kernels/ops/flash_attention_backward.h"
#include "meshdma/kernels/ops/matmul.h"
#include "meshdma/kernels/ops/paged_attention.h"
#include "tools/flags.h"

ABSL_FLAG(bool, quick, false, "fewer sizes and repeats (a few seconds)");
ABSL_FLAG(std::string, sections, "",
          "the sections to run, comma-separated numbers from the list at the "
          "top of the source (1, 3-7; empty: all); the sgemm yardstick (2) "
          "always runs");
ABSL_FLAG(std::string, attention, "both",
          "which flash attention runs sections 4 and 7 time: both, causal or "
          "non-causal");
ABSL_FLAG(int64_t, head_dim, 128,
          "flash attention head_dim in sections 4, 5 and 7 (decode attention, "
          "section 6, keeps 128)");
ABSL_FLAG(std::string, matmul_blocks, "default",
          "matmul block shapes to time, comma-separated: MxNxK (block_m x "
          "block_n x block_k) or 'default' (MatmulOptions' own)");
ABSL_FLAG(std::string, flash_blocks, "default,256x512",
          "flash attention forward block shapes to time, comma-separated: "
          "QxK (block_q x block_k) or 'default' (FlashAttentionOptions' own)");
ABSL_FLAG(std::string, backward_blocks, "default",
          "flash attention backward block shapes to time, as --flash_blocks");

namespace meshdma {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median seconds of `fn` over `reps` runs after one warm-up.
double Time(int reps, const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto a = std::chrono::steady_clock::now();
    fn();
    t.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - a)
            .count());
  }
  return Median(t);
}

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

template <typename T>
ArrayRef View(std::vector<T>& v, std::vector<int64_t> shape) {
  return *ArrayRef::FromPointer(v.data(), kDTypeOf<T>, shape);
}

double SgemmGflops(int64_t n, int reps) {
  auto a = Random(n * n, 1), b = Random(n * n, 2);
  std::vector<float> c(n * n);
  double t = Time(reps, [&] {
    Gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(),
         n);
  });
  return 2.0 * n * n * n / t / 1e9;
}

// A --flash_blocks or --backward_blocks entry: block_q x block_k
// (FlashAttentionOptions' own for 'default').
struct FlashBlocks {
  static constexpr const char* kForm = "QxK (e.g. 128x256)";
  int64_t q = FlashAttentionOptions{}.block_q;
  int64_t k = FlashAttentionOptions{}.block_k;
  std::vector<int64_t*> sizes() { return {&q, &k}; }
};

// A --matmul_blocks entry: block_m x block_n x block_k (MatmulOptions' own
// for 'default').
struct MatmulBlocks {
  static constexpr const char* kForm = "MxNxK (e.g. 256x256x256)";
  int64_t m = MatmulOptions{}.block_m;
  int64_t n = MatmulOptions{}.block_n;
  int64_t k = MatmulOptions{}.block_k;
  std::vector<int64_t*> sizes() { return {&m, &n, &k}; }
};

// A comma-separated list of block shapes: each 'default' or positive sizes
// joined by 'x', as many as `Blocks` has.
template <typename Blocks>
absl::StatusOr<std::vector<Blocks>> ParseBlocks(absl::string_view flag,
                                                const std::string& list) {
  std::vector<Blocks> out;
  for (absl::string_view item : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    Blocks b;
    if (item == "default") {
      out.push_back(b);
      continue;
    }
    const std::vector<absl::string_view> parts = absl::StrSplit(item, 'x');
    std::vector<int64_t*> sizes = b.sizes();
    bool ok = parts.size() == sizes.size();
    for (size_t i = 0; ok && i < parts.size(); ++i) {
      ok = absl::SimpleAtoi(parts[i], sizes[i]) && *sizes[i] >= 1;
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, ": '", item, "' is neither 'default' nor ", b.kForm));
    }
    out.push_back(b);
  }
  return out;
}

// Median seconds of `fn` and its median rate as a share of one-core sgemm
// 1024^3, the two timed in turn (sgemm, fn, sgemm, fn, ...) so that both see
// the same load on a shared machine: each pair gives one ratio.
struct Paired {
  double seconds;
  double share_of_sgemm;
};
Paired TimePaired(int reps, double flop, const std::function<void()>& fn) {
  constexpr int64_t n = 1024;
  auto a = Random(n * n, 1), b = Random(n * n, 2);
  std::vector<float> c(n * n);
  auto sgemm = [&] {
    Gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(),
         n);
  };
  auto seconds = [](const std::function<void()>& f) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
        .count();
  };
  sgemm();
  fn();
  std::vector<double> times, shares;
  for (int r = 0; r < reps; ++r) {
    const double ts = seconds(sgemm);
    const double tf = seconds(fn);
    times.push_back(tf);
    shares.push_back((flop / tf) / (2.0 * n * n * n / ts));
  }
  return {Median(times), Median(shares)};
}

// One attention row: time, rate, and share of the sgemm timed in turn.
void PrintAttentionRow(int64_t seq, bool causal, double flop, const Paired& p) {
  std::printf(
      "seq %5ld %-10s %7.1f ms %6.1f GFLOP/s = %3.0f%% of sgemm (in turn)\n",
      long(seq), causal ? "causal" : "non-causal", p.seconds * 1e3,
      flop / p.seconds / 1e9, 100 * p.share_of_sgemm);
}

// matmul + relu, square f32 operands of 512, 1024 and 1000 (ragged edges),
// at one block shape: GFLOP/s, and the share of sgemm 1024^3 and of sgemm
// at the same size (one OpenBLAS call), each timed in turn with it.
absl::Status MatmulRates(const MatmulBlocks& blocks, int reps) {
  std::printf("\n## matmul + relu (pallas_call, 3-D grid), f32, blocks %s\n",
              absl::StrCat(blocks.m, "/", blocks.n, "/", blocks.k).c_str());
  std::printf("%6s %9s %9s %18s %18s\n", "size", "ms", "GFLOP/s",
              "of sgemm 1024^3", "of sgemm same size");
  const MatmulOptions opts{.block_m = blocks.m,
                           .block_n = blocks.n,
                           .block_k = blocks.k,
                           .activation = Activation::kRelu};
  for (int64_t n : {512, 1024, 1000}) {
    auto x = Random(n * n, 3), y = Random(n * n, 4);
    std::vector<float> o(n * n);
    absl::Status st;
    const double flop = 2.0 * n * n * n;
    const Paired kernel = TimePaired(reps, flop, [&] {
      st.Update(
          Matmul(View(x, {n, n}), View(y, {n, n}), View(o, {n, n}), opts));
    });
    MESHDMA_RETURN_IF_ERROR(st);
    const Paired sgemm = TimePaired(reps, flop, [&] {
      Gemm(false, false, n, n, n, 1.0f, x.data(), n, y.data(), n, 0.0f,
           o.data(), n);
    });
    std::printf("%4ld^3 %9.2f %9.1f %17.0f%% %17.0f%%\n", long(n),
                kernel.seconds * 1e3, flop / kernel.seconds / 1e9,
                100 * kernel.share_of_sgemm,
                100 * kernel.share_of_sgemm / sgemm.share_of_sgemm);
  }
  return absl::OkStatus();
}

// Flash attention forward at head_dim `d`, one head, f32, at each sequence
// length, non-causal and causal: GFLOP/s and the share of sgemm timed in turn
// with it.
absl::Status FlashForward(const std::vector<int64_t>& seqs, int64_t d,
                          const std::vector<bool>& masks,
                          FlashAttentionOptions opts, int reps) {
  std::printf("\n## flash attention forward, head_dim %ld, f32, blocks %s\n",
              long(d),
              absl::StrCat("q ", opts.block_q, ", k ", opts.block_k).c_str());
  for (int64_t s : seqs) {
    for (bool causal : masks) {
      auto q = Random(s * d, 5), k = Random(s * d, 6), v = Random(s * d, 7);
      std::vector<float> o(s * d);
      opts.causal = causal;
      const std::vector<int64_t> sh = {1, 1, s, d};
      absl::Status st;
      const double flop = 4.0 * s * s * d * (causal ? 0.5 : 1.0);
      const Paired p = TimePaired(reps, flop, [&] {
        st.Update(FlashAttention(View(q, sh), View(k, sh), View(v, sh),
                                 View(o, sh), opts));
      });
      MESHDMA_RETURN_IF_ERROR(st);
      PrintAttentionRow(s, causal, flop, p);
    }
  }
  return absl::OkStatus();
}

// Flash attention backward (dq, dk, dv) at head_dim `d`, one head, f32, at
// each sequence length, non-causal and causal, as FlashForward.
absl::Status FlashBackward(const std::vector<int64_t>& seqs, int64_t d,
                           const std::vector<bool>& masks,
                           FlashAttentionOptions opts, int reps) {
  std::printf(
      "\n## flash attention backward (dq, dk, dv), head_dim %ld, f32, blocks "
      "%s\n",
      long(d), absl::StrCat("q ", opts.block_q, ", k ", opts.block_k).c_str());
  for (int64_t s : seqs) {
    for (bool causal : masks) {
      auto q = Random(s * d, 5), k = Random(s * d, 6), v = Random(s * d, 7),
           dout = Random(s * d, 12);
      std::vector<float> o(s * d), lse(s), dq(s * d), dk(s * d), dv(s * d);
      opts.causal = causal;
      const std::vector<int64_t> sh = {1, 1, s, d};
      const ArrayRef lse_ref = View(lse, {1, 1, s});
      MESHDMA_RETURN_IF_ERROR(FlashAttention(
          View(q, sh), View(k, sh), View(v, sh), View(o, sh), opts, &lse_ref));
      absl::Status st;
      const double flop = 10.0 * s * s * d * (causal ? 0.5 : 1.0);
      const Paired p = TimePaired(reps, flop, [&] {
        st.Update(FlashAttentionBackward(
            View(q, sh), View(k, sh), View(v, sh), View(o, sh), View(dout, sh),
            lse_ref, View(dq, sh), View(dk, sh), View(dv, sh), opts));
      });
      MESHDMA_RETURN_IF_ERROR(st);
      PrintAttentionRow(s, causal, flop, p);
    }
  }
  return absl::OkStatus();
}

// What the command line asks for, checked before the runtime starts.
struct BenchFlags {
  bool quick = false;
  int64_t head_dim = 128;
  std::vector<std::string> sections;  // Empty: all.
  std::vector<MatmulBlocks> matmul_blocks;
  std::vector<FlashBlocks> flash_blocks;
  std::vector<FlashBlocks> backward_blocks;
  std::vector<bool> causal;  // The attention runs timed: causal or not.
};

absl::StatusOr<BenchFlags> ReadFlags() {
  BenchFlags f;
  f.quick = absl::GetFlag(FLAGS_quick);
  f.head_dim = absl::GetFlag(FLAGS_head_dim);
  if (f.head_dim < 1 || f.head_dim > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--head_dim: '", f.head_dim, "' is not in [1, 1024]"));
  }
  f.sections =
      absl::StrSplit(absl::GetFlag(FLAGS_sections), ',', absl::SkipEmpty());
  for (const std::string& n : f.sections) {
    if (n.size() != 1 || n[0] < '1' || n[0] > '7' || n[0] == '2') {
      return absl::InvalidArgumentError(absl::StrCat(
          "--sections: '", n, "' is not a section (1, 3, 4, 5, 6 or 7)"));
    }
  }
  const std::string attention = absl::GetFlag(FLAGS_attention);
  if (attention == "both") {
    f.causal = {false, true};
  } else if (attention == "causal" || attention == "non-causal") {
    f.causal = {attention == "causal"};
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--attention: '", attention, "' is not both, causal or non-causal"));
  }
  absl::StatusOr<std::vector<MatmulBlocks>> matmul_blocks =
      ParseBlocks<MatmulBlocks>("matmul_blocks",
                                absl::GetFlag(FLAGS_matmul_blocks));
  if (!matmul_blocks.ok()) return matmul_blocks.status();  // A user error.
  f.matmul_blocks = *std::move(matmul_blocks);
  absl::StatusOr<std::vector<FlashBlocks>> blocks = ParseBlocks<FlashBlocks>(
      "flash_blocks", absl::GetFlag(FLAGS_flash_blocks));
  if (!blocks.ok()) return blocks.status();
  f.flash_blocks = *std::move(blocks);
  blocks = ParseBlocks<FlashBlocks>("backward_blocks",
                                    absl::GetFlag(FLAGS_backward_blocks));
  if (!blocks.ok()) return blocks.status();
  f.backward_blocks = *std::move(blocks);
  return f;
}

absl::Status Bench(const BenchFlags& flags) {
  const bool quick = flags.quick;
  std::printf("# meshdma-bench-kernels: one device (thread), %s\n",
              BlasDescription());
  const std::vector<std::string>& sections = flags.sections;
  auto want = [&](const char* n) {
    return sections.empty() ||
           std::find(sections.begin(), sections.end(), n) != sections.end();
  };
  const int64_t d = flags.head_dim;
  // 1. Block matmul libraries.
  if (want("1")) {
    std::printf(
        "\n## block matmul C[m,n] += A[m,k] B[k,n], GFLOP/s (1 thread)\n");
    std::printf("%-16s %10s %10s %10s\n", "m x n x k", "OpenBLAS", "Eigen",
                "loop");
    for (int64_t n : {64, 128, 256, 512}) {
      auto a = Random(n * n, 1), b = Random(n * n, 2);
      std::vector<float> c(n * n);
      const double flop = 2.0 * n * n * n;
      const int reps = n <= 128 ? 50 : 7;
      double blas = flop /
                    Time(reps,
                         [&] {
                           Gemm(false, false, n, n, n, 1.0f, a.data(), n,
                                b.data(), n, 1.0f, c.data(), n);
                         }) /
                    1e9;
      double eigen = 0;
#ifdef MESHDMA_BENCH_EIGEN
      {
        using M = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic,
                                Eigen::RowMajor>;
        Eigen::Map<M> ea(a.data(), n, n), eb(b.data(), n, n),
            ec(c.data(), n, n);
        Eigen::setNbThreads(1);
        eigen = flop / Time(reps, [&] { ec.noalias() += ea * eb; }) / 1e9;
      }
#endif
      double loop = flop /
                    Time(n <= 128 ? 10 : 3,
                         [&] {
                           GemmNaive(false, false, n, n, n, 1.0f, a.data(), n,
                                     b.data(), n, 1.0f, c.data(), n);
                         }) /
                    1e9;
      std::printf("%4ld x %4ld x %4ld %10.1f %10.1f %10.1f\n", long(n), long(n),
                  long(n), blas, eigen, loop);
    }
  }

  // 2. The yardstick.
  const double sgemm = SgemmGflops(1024, quick ? 3 : 5);
  std::printf("\n## single-core sgemm (OpenBLAS, 1024^3): %.1f GFLOP/s\n",
              sgemm);

  // 3. matmul kernel, once per block shape of --matmul_blocks.
  if (want("3")) {
    for (const MatmulBlocks& blocks : flags.matmul_blocks) {
      MESHDMA_RETURN_IF_ERROR(MatmulRates(blocks, quick ? 3 : 5));
    }
  }

  // 4. flash attention, once per block shape of --flash_blocks.
  if (want("4")) {
    const std::vector<FlashBlocks>& shapes = flags.flash_blocks;
    std::vector<int64_t> seqs = {2048, 4096};
    if (quick) seqs = {2048};
    for (const FlashBlocks& blocks : shapes) {
      FlashAttentionOptions opts;
      opts.block_q = blocks.q;
      opts.block_k = blocks.k;
      MESHDMA_RETURN_IF_ERROR(
          FlashForward(seqs, d, flags.causal, opts, quick ? 5 : 7));
    }
  }

  // 5. Memory growth.
  if (want("5")) {
    std::printf("\n## attention working memory per head, head_dim %ld, f32\n",
                long(d));
    std::printf("%8s %14s %14s %14s %14s\n", "seq", "q,k,v,o", "flash work",
                "flash total", "naive total");
    for (int64_t s : {1024, 2048, 4096, 8192, 16384}) {
      // Flash: the pipeline's staging buffers and scratch, measured from a call
      // (a short one: the memory does not depend on how many blocks run).
      PipelineStats stats;
      FlashAttentionOptions opts;
      opts.block_q = 256;
      opts.block_k = 512;
      opts.stats = &stats;
      const int64_t sq = 256;  // One query block; kv length s.
      auto q = Random(sq * d, 5), k = Random(s * d, 6), v = Random(s * d, 7);
      std::vector<float> o(sq * d);
      MESHDMA_RETURN_IF_ERROR(
          FlashAttention(View(q, {1, 1, sq, d}), View(k, {1, 1, s, d}),
                         View(v, {1, 1, s, d}), View(o, {1, 1, sq, d}), opts));
      // Naive: the full [s, s] f32 score matrix plus its softmax in place.
      const int64_t naive = s * s * 4;
      const int64_t io = 4 * s * d * 4;  // q, k, v, o at sequence length s.
      std::printf("%8ld %14ld %14ld %14ld %14ld\n", long(s), long(io),
                  long(stats.vmem_bytes), long(io + stats.vmem_bytes),
                  long(io + naive));
    }
  }

  // 6. Paged versus contiguous decode attention.
  if (want("6")) {
    std::printf(
        "\n## decode attention: paged (page 16, 8 pages per compute block, "
        "random page order) vs contiguous flash, 8 seqs, 32 q / 8 kv heads, "
        "head_dim 128, f32\n");
    const int64_t d = 128;
    std::printf("%8s %-11s %10s %12s %10s %10s\n", "context", "kernel", "ms",
                "tokens/s", "GFLOP/s", "KV GB/s");
    {
      const int64_t seqs = 8, h = 32, hkv = 8, ps = 16;
      std::vector<int64_t> ctxs = {512, 2048, 4096};
      if (quick) ctxs = {2048};
      for (int64_t ctx : ctxs) {
        const int64_t pps = ctx / ps, pages = seqs * pps;
        auto q = Random(seqs * h * d, 8);
        auto kc = Random(hkv * pages * ps * d, 9),
             vc = Random(hkv * pages * ps * d, 10);
        std::vector<int32_t> lens(seqs, static_cast<int32_t>(ctx)),
            tables(seqs * pps);
        for (int64_t i = 0; i < seqs * pps; ++i) tables[i] = int32_t(i);
        std::shuffle(tables.begin(), tables.end(), std::mt19937(11));
        // The same K/V contiguous: [seqs, hkv, ctx, d].
        std::vector<float> kk(seqs * hkv * ctx * d), vv(kk.size());
        for (int64_t s = 0; s < seqs; ++s)
          for (int64_t kh = 0; kh < hkv; ++kh)
            for (int64_t t = 0; t < ctx; ++t) {
              const int64_t page = tables[s * pps + t / ps];
              const float* src = &kc[((kh * pages + page) * ps + t % ps) * d];
              const float* vsrc = &vc[((kh * pages + page) * ps + t % ps) * d];
              std::copy(src, src + d, &kk[((s * hkv + kh) * ctx + t) * d]);
              std::copy(vsrc, vsrc + d, &vv[((s * hkv + kh) * ctx + t) * d]);
            }
        std::vector<float> o(q.size()), o2(q.size());
        PagedAttentionOptions po;
        po.pages_per_compute_block = 8;
        absl::Status st;
        const int reps = ctx >= 4096 ? 5 : 9;
        const double tp = Time(reps, [&] {
          st.Update(PagedAttention(
              View(q, {seqs, h, d}), View(kc, {hkv, pages, ps, d}),
              View(vc, {hkv, pages, ps, d}), View(lens, {seqs}),
              View(tables, {seqs, pps}), View(o, {seqs, h, d}), po));
        });
        FlashAttentionOptions fo;
        fo.block_q = 1;
        fo.block_k = 512;
        const double tf = Time(reps, [&] {
          st.Update(FlashAttention(
              View(q, {seqs, h, 1, d}), View(kk, {seqs, hkv, ctx, d}),
              View(vv, {seqs, hkv, ctx, d}), View(o2, {seqs, h, 1, d}), fo));
        });
        MESHDMA_RETURN_IF_ERROR(st);
        double diff = 0;
        for (size_t i = 0; i < o.size(); ++i)
          diff = std::max<double>(diff, std::abs(o[i] - o2[i]));
        if (diff > 1e-4) {
          return absl::InternalError(
              absl::StrCat("paged and contiguous attention differ by ", diff));
        }
        const double flop = 4.0 * seqs * h * ctx * d;
        const double bytes = 2.0 * seqs * hkv * ctx * d * 4;
        for (auto [name, t] :
             {std::pair<const char*, double>{"paged", tp},
              std::pair<const char*, double>{"contiguous", tf}}) {
          std::printf("%8ld %-11s %10.2f %12.0f %10.1f %10.1f\n", long(ctx),
                      name, t * 1e3, seqs / t, flop / t / 1e9, bytes / t / 1e9);
        }
      }
    }
  }

  // 7. flash attention backward, once per block shape of --backward_blocks.
  if (want("7")) {
    std::vector<int64_t> seqs = {1024, 2048};
    if (quick) seqs = {1024};
    for (const FlashBlocks& blocks : flags.backward_blocks) {
      FlashAttentionOptions opts;
      opts.block_q = blocks.q;
      opts.block_k = blocks.k;
      MESHDMA_RETURN_IF_ERROR(
          FlashBackward(seqs, d, flags.causal, opts, quick ? 3 : 5));
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace meshdma

int main(int argc, char** argv) {
  static const meshdma::cli::Program kProgram = {
      .name = "meshdma-bench-kernels",
      .synopsis =
          "[--quick] [--sections LIST] [--attention WHICH] [--head_dim D] "
          "[--matmul_blocks "
          "LIST] [--flash_blocks "
          "LIST] [--backward_blocks LIST]",
      .summary =
          "Compute-kernel throughput on one device: block matmul "
          "libraries, matmul,\nflash attention (forward, backward), "
          "paged attention, attention memory.",
      .aliases = {}};
  meshdma::cli::ParseOrExit(kProgram, argc, argv);
  const absl::StatusOr<meshdma::BenchFlags> flags = meshdma::ReadFlags();
  if (!flags.ok()) {
    std::fprintf(stderr, "meshdma-bench-kernels: %s\n",
                 std::string(flags.status().message()).c_str());
    return 2;
  }
  meshdma::RuntimeOptions o;
  o.launch.devices_per_process = 1;
  auto rt = meshdma::Runtime::Create(o);
  if (!rt.ok()) {
    std::fprintf(stderr, "%s\n", std::string(rt.status().message()).c_str());
    return 1;
  }
  auto mesh = (*rt)->MakeMesh1D("x");
  absl::Status s =
      (*rt)->Run(*mesh, [&flags] { return meshdma::Bench(*flags); });
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
