// Paged attention (decode) and flash attention backward against naive
// references: gathered contiguous attention, and the explicit softmax
// Jacobian (itself checked by finite differences).
#include <algorithm>
#include <cmath>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshdma/base/status_macros.h"
#include "meshdma/kernels/ops/attention_reference.h"
#include "meshdma/kernels/ops/flash_attention.h"
#include "meshdma/kernels/ops/flash_attention_backward.h"
#include "meshdma/kernels/ops/paged_attention.h"
#include "tests/kernels/kernel_test_util.h"

namespace meshdma {
namespace {

using ::meshdma::testing::MaxAbsDiff;
using ::meshdma::testing::RandomVector;
using ::meshdma::testing::RunOnDevices;
using ::meshdma::testing::View;
using ::testing::HasSubstr;

#define RUN_ON_DEVICES(...)                                                    \
  do {                                                                         \
    absl::Status run_status = RunOnDevices([&]() -> absl::Status __VA_ARGS__); \
    ASSERT_TRUE(run_status.ok()) << run_status;                                \
  } while (0)

template <typename T>
std::vector<T> Cast(const std::vector<float>& v) {
  std::vector<T> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = T(v[i]);
  return r;
}
template <typename T>
std::vector<float> Uncast(const std::vector<T>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = static_cast<float>(v[i]);
  return r;
}

struct PaCase {
  int64_t seqs, h, hkv, page_size, pps, total_pages, d, ppcb;
};

// Random block tables (pages may be shared between sequences) and lengths
// that include 0, 1, a full table and values that are not multiples of the
// page size or compute block.
template <typename T>
void CheckPaged(const PaCase& c, uint32_t seed, double tol) {
  std::mt19937 gen(seed);
  const int64_t max_len = c.pps * c.page_size;
  std::vector<int32_t> lens(c.seqs), tables(c.seqs * c.pps);
  for (int64_t s = 0; s < c.seqs; ++s) {
    if (s == 0) {
      lens[s] = max_len;
    } else if (s == 1) {
      lens[s] = 1;
    } else if (s == 2) {
      lens[s] = 0;
    } else {
      lens[s] = std::uniform_int_distribution<int32_t>(1, max_len)(gen);
    }
  }
  for (int32_t& t : tables) {
    t = std::uniform_int_distribution<int32_t>(0, c.total_pages - 1)(gen);
  }
  const int64_t cache_n = c.hkv * c.total_pages * c.page_size * c.d;
  auto q = Cast<T>(RandomVector(c.seqs * c.h * c.d, seed + 1));
  auto k = Cast<T>(RandomVector(cache_n, seed + 2));
  auto v = Cast<T>(RandomVector(cache_n, seed + 3));
  std::vector<T> o(q.size());
  const std::vector<int64_t> cache_shape = {c.hkv, c.total_pages, c.page_size,
                                            c.d};
  PagedAttentionOptions opts;
  opts.pages_per_compute_block = c.ppcb;
  int64_t read = 0;
  opts.pages_read = &read;
  absl::Status s = PagedAttention(
      View(q, {c.seqs, c.h, c.d}), View(k, cache_shape), View(v, cache_shape),
      View(lens, {c.seqs}), View(tables, {c.seqs, c.pps}),
      View(o, {c.seqs, c.h, c.d}), opts);
  ASSERT_TRUE(s.ok()) << s;
  auto ref = ReferencePagedAttention(
      Uncast(q), Uncast(k), Uncast(v), lens, tables, c.seqs, c.h, c.hkv,
      c.total_pages, c.page_size, c.pps, c.d, 1.0f / std::sqrt(float(c.d)));
  EXPECT_LT(MaxAbsDiff(Uncast(o), ref), tol)
      << DTypeName(kDTypeOf<T>) << " seqs " << c.seqs << " h " << c.h << " hkv "
      << c.hkv << " page " << c.page_size << " pps " << c.pps << " d " << c.d
      << " ppcb " << c.ppcb;
  // Only the pages inside each context are read, once per kv head.
  int64_t used = 0;
  for (int32_t len : lens) used += (len + c.page_size - 1) / c.page_size;
  EXPECT_EQ(read, used * c.hkv);
}

TEST(PagedAttentionTest, ShapesLengthsGroups) {
  RUN_ON_DEVICES({
    uint32_t seed = 100;
    for (const PaCase& c : {PaCase{4, 4, 4, 16, 8, 40, 32, 4},  // MHA
                            PaCase{5, 8, 2, 8, 6, 30, 16, 2},   // GQA
                            PaCase{3, 4, 1, 4, 10, 50, 8, 3},   // MQA, 3∤10
                            PaCase{6, 6, 3, 5, 7, 20, 24, 7},   // page 5
                            PaCase{4, 2, 2, 16, 4, 8, 64, 1},   // ppcb 1
                            PaCase{3, 2, 1, 32, 3, 9, 128, 8}}) {  // ppcb>pps
      CheckPaged<float>(c, seed++, 2e-5);
    }
    CheckPaged<BFloat16>({5, 8, 2, 8, 6, 30, 32, 4}, 7, 2e-2);
    CheckPaged<Half>({4, 4, 1, 16, 5, 25, 16, 2}, 8, 2e-3);
    return absl::OkStatus();
  });
}

// Caches given as strided views: page-major storage ([pages, kv_heads, ...]
// viewed as [kv_heads, pages, ...]) is read in place; keys whose columns are
// every other float, and values laid out unlike the keys, are gathered.
TEST(PagedAttentionTest, StridedCaches) {
  RUN_ON_DEVICES({
    const int64_t seqs = 3, h = 8, hkv = 2, ps = 8, pps = 5, tp = 16, d = 32;
    std::mt19937 gen(5);
    std::vector<int32_t> lens = {40, 17, 1}, tables(seqs * pps);
    for (int32_t& t : tables) {
      t = std::uniform_int_distribution<int32_t>(0, tp - 1)(gen);
    }
    const int64_t n = hkv * tp * ps * d;
    auto q = RandomVector(seqs * h * d, 11);
    auto k = RandomVector(n, 12), v = RandomVector(n, 13);
    // Page-major copies, and keys with a gap after every column.
    std::vector<float> kp(n), vp(n), kgap(2 * n);
    for (int64_t kh = 0; kh < hkv; ++kh) {
      for (int64_t pg = 0; pg < tp; ++pg) {
        for (int64_t e = 0; e < ps * d; ++e) {
          const int64_t from = (kh * tp + pg) * ps * d + e;
          const int64_t to = (pg * hkv + kh) * ps * d + e;
          kp[to] = k[from];
          vp[to] = v[from];
          kgap[2 * to] = k[from];
        }
      }
    }
    const std::vector<int64_t> shape = {hkv, tp, ps, d};
    const std::vector<int64_t> page_major = {ps * d, hkv * ps * d, d, 1};
    const std::vector<int64_t> gapped = {2 * ps * d, 2 * hkv * ps * d, 2 * d,
                                         2};
    auto strided = [&](std::vector<float>& data,
                       const std::vector<int64_t>& strides) {
      return *ArrayRef::FromPointer(data.data(), DType::kF32, shape, strides);
    };
    const auto ref =
        ReferencePagedAttention(q, k, v, lens, tables, seqs, h, hkv, tp, ps,
                                pps, d, 1.0f / std::sqrt(float(d)));
    const std::pair<ArrayRef, ArrayRef> cases[] = {
        {strided(kp, page_major), strided(vp, page_major)},  // In place.
        {strided(kgap, gapped), strided(vp, page_major)},    // Gathered.
        {View(k, shape), strided(vp, page_major)}};          // Unlike.
    for (const auto& [kc, vc] : cases) {
      std::vector<float> o(q.size());
      PagedAttentionOptions opts;
      opts.pages_per_compute_block = 2;
      MESHDMA_RETURN_IF_ERROR(PagedAttention(
          View(q, {seqs, h, d}), kc, vc, View(lens, {seqs}),
          View(tables, {seqs, pps}), View(o, {seqs, h, d}), opts));
      EXPECT_LT(MaxAbsDiff(o, ref), 2e-5)
          << kc.ToString() << " " << vc.ToString();
    }
    return absl::OkStatus();
  });
}

TEST(PagedAttentionTest, BadInput) {
  RUN_ON_DEVICES({
    const int64_t seqs = 2, h = 4, hkv = 2, ps = 4, pps = 3, tp = 5, d = 8;
    std::vector<float> q(seqs * h * d), k(hkv * tp * ps * d), o(q.size());
    std::vector<int32_t> lens = {12, 5}, tables = {0, 1, 2, 3, 4, 0};
    auto call = [&](const ArrayRef& qq, const ArrayRef& kk,
                    const PagedAttentionOptions& opt = {}) {
      return PagedAttention(qq, kk, kk, View(lens, {seqs}),
                            View(tables, {seqs, pps}), View(o, {seqs, h, d}),
                            opt);
    };
    const ArrayRef qv = View(q, {seqs, h, d}), kv = View(k, {hkv, tp, ps, d});
    MESHDMA_RETURN_IF_ERROR(call(qv, kv));
    auto expect = [](const absl::Status& s, const char* what) {
      EXPECT_THAT(std::string(s.message()), HasSubstr("paged_attention"));
      EXPECT_THAT(std::string(s.message()), HasSubstr(what));
    };
    tables[1] = 5;  // Out of range, used by sequence 0.
    expect(call(qv, kv), "input 4 ('block_tables')[0, 1] = 5");
    tables[1] = -1;
    expect(call(qv, kv), "input 4 ('block_tables')[0, 1] = -1");
    tables[1] = 1;
    tables[5] = 99;  // Unused by sequence 1 (5 tokens: 2 pages): fine.
    MESHDMA_RETURN_IF_ERROR(call(qv, kv));
    lens[1] = 13;  // > pages_per_sequence * page_size.
    expect(call(qv, kv), "input 3 ('context_lens')[1] = 13");
    lens[1] = 5;
    std::vector<float> k3(3 * tp * ps * d);
    expect(call(qv, View(k3, {3, tp, ps, d})), "not a multiple of the 3 kv");
    expect(call(qv, View(k, {hkv, tp, ps * 2, d / 2})),
           "input 1 ('key_cache')");
    PagedAttentionOptions zero;
    zero.pages_per_compute_block = 0;
    expect(call(qv, kv, zero), "pages_per_compute_block");
    std::vector<int32_t> qi(q.size());
    expect(call(View(qi, {seqs, h, d}), kv), "input 0 ('query') has dtype i32");
    return absl::OkStatus();
  });
}

// Finite differences of the naive forward (double precision loss) agree with
// the naive backward: the reference itself is right.
TEST(FlashAttentionBackwardTest, ReferenceMatchesFiniteDifferences) {
  const int64_t b = 1, h = 2, hkv = 1, sq = 3, skv = 4, d = 3;
  const float scale = 0.7f;
  auto q = RandomVector(b * h * sq * d, 1),
       k = RandomVector(b * hkv * skv * d, 2),
       v = RandomVector(b * hkv * skv * d, 3),
       w = RandomVector(b * h * sq * d, 4);
  std::vector<float> dq, dk, dv;
  ReferenceAttentionBackward(q, k, v, w, b, h, hkv, sq, skv, d, scale, true,
                             &dq, &dk, &dv);
  // loss = sum(out * w); its gradient wrt each input entry, centrally.
  auto loss = [&](const std::vector<float>& qq, const std::vector<float>& kk,
                  const std::vector<float>& vv) {
    auto o = ReferenceAttention(qq, kk, vv, b, h, hkv, sq, skv, d, scale, true);
    double l = 0;
    for (size_t i = 0; i < o.size(); ++i) l += double(o[i]) * w[i];
    return l;
  };
  const float eps = 1e-2f;
  auto check = [&](std::vector<float>* x, const std::vector<float>& grad,
                   const char* name) {
    for (size_t i = 0; i < x->size(); ++i) {
      const float saved = (*x)[i];
      (*x)[i] = saved + eps;
      const double up = loss(q, k, v);
      (*x)[i] = saved - eps;
      const double down = loss(q, k, v);
      (*x)[i] = saved;
      EXPECT_NEAR((up - down) / (2 * eps), grad[i], 2e-3) << name << " " << i;
    }
  };
  check(&q, dq, "dq");
  check(&k, dk, "dk");
  check(&v, dv, "dv");
}

struct BwdCase {
  int64_t b, h, hkv, sq, skv, d, bq, bk;
  bool causal;
};

template <typename T>
void CheckBackward(const BwdCase& c, double tol) {
  const int64_t qn = c.b * c.h * c.sq * c.d, kn = c.b * c.hkv * c.skv * c.d;
  auto q = Cast<T>(RandomVector(qn, 21)), k = Cast<T>(RandomVector(kn, 22)),
       v = Cast<T>(RandomVector(kn, 23)), dout = Cast<T>(RandomVector(qn, 24));
  std::vector<T> o(qn), dq(qn), dk(kn), dv(kn);
  std::vector<float> lse(c.b * c.h * c.sq);
  FlashAttentionOptions opts;
  opts.block_q = c.bq;
  opts.block_k = c.bk;
  opts.causal = c.causal;
  const std::vector<int64_t> qs = {c.b, c.h, c.sq, c.d},
                             ks = {c.b, c.hkv, c.skv, c.d};
  const ArrayRef lse_ref = View(lse, {c.b, c.h, c.sq});
  absl::Status s = FlashAttention(View(q, qs), View(k, ks), View(v, ks),
                                  View(o, qs), opts, &lse_ref);
  ASSERT_TRUE(s.ok()) << s;
  s = FlashAttentionBackward(View(q, qs), View(k, ks), View(v, ks), View(o, qs),
                             View(dout, qs), lse_ref, View(dq, qs),
                             View(dk, ks), View(dv, ks), opts);
  ASSERT_TRUE(s.ok()) << s;
  std::vector<float> rq, rk, rv;
  ReferenceAttentionBackward(
      Uncast(q), Uncast(k), Uncast(v), Uncast(dout), c.b, c.h, c.hkv, c.sq,
      c.skv, c.d, 1.0f / std::sqrt(float(c.d)), c.causal, &rq, &rk, &rv);
  const std::string what =
      absl::StrCat(DTypeName(kDTypeOf<T>), " b", c.b, " h", c.h, " hkv", c.hkv,
                   " sq", c.sq, " skv", c.skv, " d", c.d, " blocks ", c.bq, ",",
                   c.bk, c.causal ? " causal" : "");
  EXPECT_LT(MaxAbsDiff(Uncast(dq), rq), tol) << "dq " << what;
  EXPECT_LT(MaxAbsDiff(Uncast(dk), rk), tol) << "dk " << what;
  EXPECT_LT(MaxAbsDiff(Uncast(dv), rv), tol) << "dv " << what;
}

TEST(FlashAttentionBackwardTest, MhaMqaGqaCausalRagged) {
  RUN_ON_DEVICES({
    for (const BwdCase& c : {BwdCase{1, 1, 1, 32, 32, 16, 16, 16, false},
                             BwdCase{2, 4, 4, 50, 70, 16, 16, 32, false},
                             BwdCase{1, 4, 1, 33, 33, 8, 16, 8, true},
                             BwdCase{1, 6, 2, 40, 40, 32, 16, 16, true},
                             BwdCase{1, 2, 2, 7, 100, 24, 8, 64, false},
                             BwdCase{1, 2, 1, 45, 30, 16, 8, 16, true},
                             // Tiles the diagonal crosses, taken in strips
                             // of 64 rows: square, taller and wider than the
                             // key blocks, ragged.
                             BwdCase{1, 2, 1, 300, 300, 8, 128, 128, true},
                             BwdCase{1, 2, 2, 200, 260, 8, 192, 64, true},
                             BwdCase{1, 1, 1, 150, 150, 8, 64, 128, true},
                             // head_dim 64: dV and dK against P and dS
                             // transposed, where row tiles run (key blocks
                             // of up to 128), ragged and causal.
                             BwdCase{1, 2, 1, 200, 200, 64, 128, 64, true},
                             BwdCase{1, 1, 1, 130, 190, 64, 64, 128, false},
                             BwdCase{1, 1, 1, 96, 96, 128, 32, 128, true}}) {
      CheckBackward<float>(c, 1e-4);
    }
    CheckBackward<BFloat16>({1, 4, 2, 24, 24, 16, 8, 8, true}, 6e-2);
    CheckBackward<Half>({1, 2, 1, 20, 30, 16, 8, 16, false}, 1e-2);
    return absl::OkStatus();
  });
}

TEST(FlashAttentionBackwardTest, BadInput) {
  RUN_ON_DEVICES({
    std::vector<float> q(2 * 4 * 8 * 16), k(2 * 2 * 8 * 16), lse(2 * 4 * 8);
    const ArrayRef qv = View(q, {2, 4, 8, 16}), kv = View(k, {2, 2, 8, 16});
    absl::Status s = FlashAttentionBackward(qv, kv, kv, qv, qv,
                                            View(lse, {2, 4, 8}), qv, kv, kv);
    MESHDMA_RETURN_IF_ERROR(s);
    s = FlashAttentionBackward(qv, kv, kv, qv, qv, View(lse, {2, 4, 8}), qv, qv,
                               kv);
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("flash_attention_backward': output 1 ('dk')"));
    s = FlashAttentionBackward(qv, kv, kv, qv, qv, View(lse, {2, 32}), qv, kv,
                               kv);
    EXPECT_THAT(std::string(s.message()), HasSubstr("input 5 ('lse')"));
    s = FlashAttentionBackward(qv, View(q, {2, 3, 8, 16}), kv, qv, qv,
                               View(lse, {2, 4, 8}), qv, kv, kv);
    EXPECT_THAT(std::string(s.message()), HasSubstr("multiple"));
    return absl::OkStatus();
  });
}

// Attention with FlashAttentionMasks, naively in double: logits scale * (q k^T
// + ab), keys of another segment (or after the query, causal) left out; a
// row with no key left gets zeros.
std::vector<float> MaskedReference(const std::vector<float>& q,
                                   const std::vector<float>& k,
                                   const std::vector<float>& v,
                                   const BwdCase& c, float scale,
                                   const std::vector<int32_t>& q_seg,
                                   const std::vector<int32_t>& kv_seg,
                                   const std::vector<float>& ab) {
  std::vector<float> out(q.size(), 0.0f);
  const int64_t group = c.h / c.hkv;
  for (int64_t bh = 0; bh < c.b * c.h; ++bh) {
    const int64_t b = bh / c.h, kvh = b * c.hkv + (bh % c.h) / group;
    for (int64_t r = 0; r < c.sq; ++r) {
      std::vector<double> w(c.skv, -INFINITY);
      for (int64_t col = 0; col < c.skv; ++col) {
        if (c.causal && col > r) continue;
        if (!q_seg.empty() && q_seg[b * c.sq + r] != kv_seg[b * c.skv + col])
          continue;
        double dot = ab.empty() ? 0.0 : ab[(bh * c.sq + r) * c.skv + col];
        for (int64_t e = 0; e < c.d; ++e)
          dot += double(q[(bh * c.sq + r) * c.d + e]) *
                 k[(kvh * c.skv + col) * c.d + e];
        w[col] = scale * dot;
      }
      const double top = *std::max_element(w.begin(), w.end());
      if (top == -INFINITY) continue;
      double sum = 0;
      for (double& x : w) sum += (x = std::exp(x - top));
      for (int64_t e = 0; e < c.d; ++e) {
        double acc = 0;
        for (int64_t col = 0; col < c.skv; ++col)
          acc += w[col] * v[(kvh * c.skv + col) * c.d + e];
        out[(bh * c.sq + r) * c.d + e] = float(acc / sum);
      }
    }
  }
  return out;
}

// Segment ids (three segments of uneven lengths, one per batch row in a
// different place) and a random bias, alone and together, causal and not,
// against the naive reference; the backward with a bias that masks like
// `causal` matches the backward with `causal`.
TEST(FlashAttentionMasksTest, SegmentsAndBiasAgainstNaive) {
  RUN_ON_DEVICES({
    for (const BwdCase& c : {BwdCase{2, 4, 2, 37, 37, 16, 16, 8, false},
                             BwdCase{2, 2, 1, 29, 29, 8, 8, 16, true},
                             BwdCase{1, 2, 2, 20, 45, 16, 8, 16, false}}) {
      const int64_t qn = c.b * c.h * c.sq * c.d, kn = c.b * c.hkv * c.skv * c.d;
      auto q = RandomVector(qn, 31), k = RandomVector(kn, 32),
           v = RandomVector(kn, 33);
      auto ab = RandomVector(c.b * c.h * c.sq * c.skv, 34);
      std::vector<int32_t> q_seg(c.b * c.sq), kv_seg(c.b * c.skv);
      for (int64_t b = 0; b < c.b; ++b) {
        for (int64_t r = 0; r < c.sq; ++r)
          q_seg[b * c.sq + r] = (r * 3 + b * 5) / c.sq;
        for (int64_t col = 0; col < c.skv; ++col)
          kv_seg[b * c.skv + col] = (col * 3 + b * 5) / c.skv;
      }
      const std::vector<int64_t> qs = {c.b, c.h, c.sq, c.d},
                                 ks = {c.b, c.hkv, c.skv, c.d};
      const ArrayRef q_seg_ref = View(q_seg, {c.b, c.sq}),
                     kv_seg_ref = View(kv_seg, {c.b, c.skv}),
                     ab_ref = View(ab, {c.b, c.h, c.sq, c.skv});
      FlashAttentionOptions opts;
      opts.block_q = c.bq;
      opts.block_k = c.bk;
      opts.causal = c.causal;
      opts.sm_scale = 0.5f;
      for (int which = 1; which <= 3; ++which) {
        FlashAttentionMasks masks;
        if (which & 1) {
          masks.q_segment_ids = &q_seg_ref;
          masks.kv_segment_ids = &kv_seg_ref;
        }
        if (which & 2) masks.ab = &ab_ref;
        std::vector<float> out(qn);
        MESHDMA_RETURN_IF_ERROR(FlashAttention(View(q, qs), View(k, ks),
                                               View(v, ks), View(out, qs), opts,
                                               nullptr, masks));
        const auto want = MaskedReference(
            q, k, v, c, 0.5f, (which & 1) ? q_seg : std::vector<int32_t>{},
            kv_seg, (which & 2) ? ab : std::vector<float>{});
        EXPECT_LT(MaxAbsDiff(out, want), 1e-4)
            << "masks " << which << " sq " << c.sq << " skv " << c.skv
            << (c.causal ? " causal" : "");
      }
    }
    return absl::OkStatus();
  });
}

TEST(FlashAttentionMasksTest, BiasThatMasksLikeCausalHasCausalGradients) {
  RUN_ON_DEVICES({
    const BwdCase c{1, 4, 2, 33, 33, 16, 16, 8, true};
    const int64_t qn = c.b * c.h * c.sq * c.d, kn = c.b * c.hkv * c.skv * c.d;
    auto q = RandomVector(qn, 41), k = RandomVector(kn, 42),
         v = RandomVector(kn, 43), dout = RandomVector(qn, 44);
    std::vector<float> ab(c.b * c.h * c.sq * c.skv, 0.0f);
    for (int64_t hr = 0; hr < c.b * c.h * c.sq; ++hr)
      for (int64_t col = hr % c.sq + 1; col < c.skv; ++col)
        ab[hr * c.skv + col] = -1e30f;
    const std::vector<int64_t> qs = {c.b, c.h, c.sq, c.d},
                               ks = {c.b, c.hkv, c.skv, c.d};
    const ArrayRef ab_ref = View(ab, {c.b, c.h, c.sq, c.skv});
    std::vector<float> grads[2][3];
    for (int biased = 0; biased < 2; ++biased) {
      FlashAttentionOptions opts;
      opts.block_q = c.bq;
      opts.block_k = c.bk;
      opts.causal = !biased;
      FlashAttentionMasks masks;
      if (biased) masks.ab = &ab_ref;
      std::vector<float> o(qn), lse(c.b * c.h * c.sq);
      const ArrayRef lse_ref = View(lse, {c.b, c.h, c.sq});
      MESHDMA_RETURN_IF_ERROR(FlashAttention(View(q, qs), View(k, ks),
                                             View(v, ks), View(o, qs), opts,
                                             &lse_ref, masks));
      auto& [dq, dk, dv] = grads[biased];
      dq.resize(qn);
      dk.resize(kn);
      dv.resize(kn);
      MESHDMA_RETURN_IF_ERROR(FlashAttentionBackward(
          View(q, qs), View(k, ks), View(v, ks), View(o, qs), View(dout, qs),
          lse_ref, View(dq, qs), View(dk, ks), View(dv, ks), opts, masks));
    }
    for (int g = 0; g < 3; ++g) {
      EXPECT_LT(MaxAbsDiff(grads[0][g], grads[1][g]), 1e-5) << "gradient " << g;
    }
    return absl::OkStatus();
  });
}

TEST(FlashAttentionMasksTest, BadMasks) {
  RUN_ON_DEVICES({
    std::vector<float> q(2 * 4 * 8 * 16), out(q.size()), ab(2 * 4 * 8 * 8);
    std::vector<int32_t> seg(2 * 8);
    const ArrayRef qv = View(q, {2, 4, 8, 16}), ov = View(out, {2, 4, 8, 16});
    const ArrayRef seg_ref = View(seg, {2, 8}), bad_seg = View(seg, {1, 16}),
                   ab_ref = View(ab, {2, 4, 8, 8}),
                   bad_ab = View(ab, {2, 4, 64});
    FlashAttentionMasks m;
    m.q_segment_ids = &seg_ref;
    absl::Status s = FlashAttention(qv, qv, qv, ov, {}, nullptr, m);
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("only 'q_segment_ids' is given"));
    m.kv_segment_ids = &bad_seg;
    s = FlashAttention(qv, qv, qv, ov, {}, nullptr, m);
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("'kv_segment_ids' is i32[1,16], expected i32[2,8]"));
    m = {};
    m.ab = &bad_ab;
    s = FlashAttention(qv, qv, qv, ov, {}, nullptr, m);
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("'ab' is f32[2,4,64], expected f32[2,4,8,8]"));
    m.ab = &ab_ref;
    m.q_segment_ids = m.kv_segment_ids = &seg_ref;
    return FlashAttention(qv, qv, qv, ov, {}, nullptr, m);
  });
}

}  // namespace
}  // namespace meshdma
