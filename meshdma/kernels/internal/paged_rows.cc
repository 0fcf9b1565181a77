#include "meshdma/kernels/internal/paged_rows.h"

#include <algorithm>
#include <cstring>

#include "meshdma/kernels/internal/clones.h"

namespace meshdma::kernels_internal {
namespace {

constexpr int64_t kLine = 64 / sizeof(float);  // Floats per cache line.
// Query heads per pass over a page: their accumulators stay in registers
// (scores: one F8 for each of two rows; values: two F8, 16 columns).
constexpr int kScoreHeads = 4;
constexpr int kValueHeads = 4;

typedef float F4 __attribute__((vector_size(16)));

// out[j] = the sum of a[j]'s lanes, j < N: halves added, then four sums at a
// time by two transposing shuffles (no lane is summed one by one).
template <int N>
[[gnu::always_inline]] inline void LaneSums(const F8* a, float* out) {
  constexpr int kPadded = (N + 3) / 4 * 4;
  F4 h[kPadded];
  for (int j = 0; j < kPadded; ++j) {
    h[j] = j < N ? __builtin_shufflevector(a[j], a[j], 0, 1, 2, 3) +
                       __builtin_shufflevector(a[j], a[j], 4, 5, 6, 7)
                 : F4{} + 0.0f;
  }
  for (int j = 0; j < N; j += 4) {
    const F4 ab = __builtin_shufflevector(h[j], h[j + 1], 0, 4, 1, 5) +
                  __builtin_shufflevector(h[j], h[j + 1], 2, 6, 3, 7);
    const F4 cd = __builtin_shufflevector(h[j + 2], h[j + 3], 0, 4, 1, 5) +
                  __builtin_shufflevector(h[j + 2], h[j + 3], 2, 6, 3, 7);
    const F4 sums = __builtin_shufflevector(ab, cd, 0, 1, 4, 5) +
                    __builtin_shufflevector(ab, cd, 2, 3, 6, 7);
    for (int l = 0; l < 4 && j + l < N; ++l) out[j + l] = sums[l];
  }
}

// s[j * lds + t] = scale * dot(q[j * d, +d), row[i]) for heads j < N and
// the R rows row[i], block rows t = t0 + i: each column of q loaded once for
// the R rows, R * N independent sums.
template <int N, int R>
[[gnu::always_inline]] inline void RowScores(const float* const* row, int64_t d,
                                             const float* q, float scale,
                                             int64_t t0, float* s,
                                             int64_t lds) {
  F8 acc[R][N];
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < N; ++j) acc[i][j] = F8{} + 0.0f;
  }
  int64_t c = 0;
  for (; c + kF8Lanes <= d; c += kF8Lanes) {
    F8 x[R];
    for (int i = 0; i < R; ++i) std::memcpy(&x[i], row[i] + c, sizeof(F8));
    for (int j = 0; j < N; ++j) {
      F8 y;
      std::memcpy(&y, q + j * d + c, sizeof(y));
      for (int i = 0; i < R; ++i) acc[i][j] += x[i] * y;
    }
  }
  for (int i = 0; i < R; ++i) {
    float dot[N];
    LaneSums<N>(acc[i], dot);
    for (int j = 0; j < N; ++j) {
      for (int64_t e = c; e < d; ++e) dot[j] += row[i][e] * q[j * d + e];
      s[j * lds + t0 + i] = scale * dot[j];
    }
  }
}

// The scores of heads [h0, h0 + N) for the `rows` rows of one page, whose
// first row is block row t0, two rows at a time; the same rows of page
// `ahead` (if any) are fetched as they pass.
template <int N>
[[gnu::always_inline]] inline void ScoresOfPage(
    const float* page, int64_t rows, const PagedRows& k, const float* q,
    float scale, int64_t t0, float* s, int64_t lds, const float* ahead) {
  const int64_t stride = k.row_stride;
  for (int64_t r = 0; r < rows; r += 2) {
    const int64_t pair = std::min<int64_t>(2, rows - r);
    if (ahead != nullptr) {
      for (int64_t c = 0; c < pair * stride; c += kLine) {
        // Rows r and r + 1, and any padding between them.
        __builtin_prefetch(ahead + r * stride + c);
      }
    }
    const float* row[2] = {page + r * stride, page + (r + pair - 1) * stride};
    if (pair == 2) {
      RowScores<N, 2>(row, k.d, q, scale, t0 + r, s, lds);
    } else {
      RowScores<N, 1>(row, k.d, q, scale, t0 + r, s, lds);
    }
  }
}

// acc[j * d + c] += sum_r p[j * ldp + t0 + r] * (row r)[c] for heads j < N of
// one page: 16 columns at a time, their N accumulators in registers while
// the page's rows pass (the page stays in L1 between column passes). Each
// pass fetches the same columns (one cache line) of page `ahead` (if any).
template <int N>
[[gnu::always_inline]] inline void AccumulatePage(
    const float* page, int64_t rows, const PagedRows& v, const float* p,
    int64_t ldp, int64_t t0, float* acc, const float* ahead) {
  const int64_t d = v.d;
  int64_t c = 0;
  for (; c + 2 * kF8Lanes <= d; c += 2 * kF8Lanes) {
    F8 a[N][2];
#pragma GCC unroll 4
    for (int j = 0; j < N; ++j) {
      std::memcpy(&a[j][0], acc + j * d + c, sizeof(F8));
      std::memcpy(&a[j][1], acc + j * d + c + kF8Lanes, sizeof(F8));
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = page + r * v.row_stride + c;
      if (ahead != nullptr) __builtin_prefetch(ahead + r * v.row_stride + c);
      F8 x0, x1;
      std::memcpy(&x0, row, sizeof(x0));
      std::memcpy(&x1, row + kF8Lanes, sizeof(x1));
      for (int j = 0; j < N; ++j) {
        const float w = p[j * ldp + t0 + r];
        a[j][0] += w * x0;
        a[j][1] += w * x1;
      }
    }
#pragma GCC unroll 4
    for (int j = 0; j < N; ++j) {
      std::memcpy(acc + j * d + c, &a[j][0], sizeof(F8));
      std::memcpy(acc + j * d + c + kF8Lanes, &a[j][1], sizeof(F8));
    }
  }
  for (; c < d; ++c) {
    for (int j = 0; j < N; ++j) {
      float sum = acc[j * d + c];
      for (int64_t r = 0; r < rows; ++r) {
        sum += p[j * ldp + t0 + r] * page[r * v.row_stride + c];
      }
      acc[j * d + c] = sum;
    }
  }
}

// The page to fetch while page i of `b` is computed on, or null.
[[gnu::always_inline]] inline const float* Ahead(const PagedRows& b,
                                                 int64_t i) {
  return i < b.ahead_n ? b.ahead[i] : nullptr;
}

}  // namespace

MESHDMA_CLONES void PagedScores(const PagedRows& k, const float* q,
                                int64_t heads, float scale, float* s,
                                int64_t lds) {
  for (int64_t i = 0, t0 = 0; t0 < k.n; ++i, t0 += k.page_size) {
    const int64_t rows = std::min(k.page_size, k.n - t0);
    const float* page = k.pages[i];
    for (int64_t h0 = 0; h0 < heads; h0 += kScoreHeads) {
      const float* ahead = h0 == 0 ? Ahead(k, i) : nullptr;
      const float* qh = q + h0 * k.d;
      float* sh = s + h0 * lds;
      switch (std::min<int64_t>(kScoreHeads, heads - h0)) {
        case 1:
          ScoresOfPage<1>(page, rows, k, qh, scale, t0, sh, lds, ahead);
          break;
        case 2:
          ScoresOfPage<2>(page, rows, k, qh, scale, t0, sh, lds, ahead);
          break;
        case 3:
          ScoresOfPage<3>(page, rows, k, qh, scale, t0, sh, lds, ahead);
          break;
        default:
          ScoresOfPage<4>(page, rows, k, qh, scale, t0, sh, lds, ahead);
      }
    }
  }
}

MESHDMA_CLONES void PagedAccumulate(const PagedRows& v, const float* p,
                                    int64_t ldp, int64_t heads, float* acc) {
  for (int64_t i = 0, t0 = 0; t0 < v.n; ++i, t0 += v.page_size) {
    const int64_t rows = std::min(v.page_size, v.n - t0);
    const float* page = v.pages[i];
    for (int64_t h0 = 0; h0 < heads; h0 += kValueHeads) {
      const float* ahead = h0 == 0 ? Ahead(v, i) : nullptr;
      const float* ph = p + h0 * ldp;
      float* ah = acc + h0 * v.d;
      switch (std::min<int64_t>(kValueHeads, heads - h0)) {
        case 1:
          AccumulatePage<1>(page, rows, v, ph, ldp, t0, ah, ahead);
          break;
        case 2:
          AccumulatePage<2>(page, rows, v, ph, ldp, t0, ah, ahead);
          break;
        case 3:
          AccumulatePage<3>(page, rows, v, ph, ldp, t0, ah, ahead);
          break;
        default:
          AccumulatePage<4>(page, rows, v, ph, ldp, t0, ah, ahead);
      }
    }
  }
}

}  // namespace meshdma::kernels_internal
