// Decode attention's row kernels over a paged KV cache. A compute block's key
// (or value) rows lie in pages scattered through the cache; each kernel reads
// every row once, in place, for all the query heads of its kv head, and
// prefetches the pages to come while it computes on one. Compiled like
// vector_math.h (`target_clones`).
#ifndef MESHDMA_KERNELS_INTERNAL_PAGED_ROWS_H_
#define MESHDMA_KERNELS_INTERNAL_PAGED_ROWS_H_

#include <cstdint>

namespace meshdma::kernels_internal {

// The `n` rows of one compute block, `d` floats each: row t is
// `pages[t / page_size] + (t % page_size) * row_stride`. While a kernel
// computes on page i it fetches page `ahead[i]` (i < ahead_n) into the
// cache, a few lines per row, so that the pages to come (of this block, then
// the next) are on their way: the pages are scattered, and the hardware's
// stream prefetch stops at each page's end. Pages ahead are `page_size` rows
// of `row_stride` floats, like the block's own.
struct PagedRows {
  const float* const* pages;
  int64_t page_size;
  int64_t row_stride;
  int64_t n;
  int64_t d;
  const float* const* ahead = nullptr;
  int64_t ahead_n = 0;
};

// s[h * lds + t] = scale * dot(q[h * d, h * d + d), row t), h < heads, t < n.
void PagedScores(const PagedRows& k, const float* q, int64_t heads, float scale,
                 float* s, int64_t lds);

// acc[h * d + c] += sum over t < n of p[h * ldp + t] * (row t)[c], for
// h < heads and c < d.
void PagedAccumulate(const PagedRows& v, const float* p, int64_t ldp,
                     int64_t heads, float* acc);

}  // namespace meshdma::kernels_internal

#endif  // MESHDMA_KERNELS_INTERNAL_PAGED_ROWS_H_
