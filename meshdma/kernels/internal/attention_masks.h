// What flash attention's forward and backward share on one score tile: the
// optional masking inputs (`FlashAttentionMasks`,
// kernels/ops/flash_attention.h) and the products against a transposed key
// or value block.
#ifndef MESHDMA_KERNELS_INTERNAL_ATTENTION_MASKS_H_
#define MESHDMA_KERNELS_INTERNAL_ATTENTION_MASKS_H_

#include <cstdint>
#include <limits>

#include "meshdma/kernels/blas.h"
#include "meshdma/kernels/internal/vector_math.h"
#include "meshdma/kernels/pallas_call.h"

namespace meshdma::kernels_internal {

// Rows per strip of a tile the causal diagonal crosses, in the forward and
// the backward: each strip's products stop at the last key its last row
// sees, so that part of the tile above the diagonal is skipped, not none
// (3/8 of a square 256-row tile, 1/4 of a 128-row one).
inline constexpr int64_t kDiagonalStripRows = 64;

// One [rows, cols] tile's blocks of the masking inputs; null when absent.
struct TileMasks {
  const int32_t* q_segment_ids = nullptr;   // [rows]
  const int32_t* kv_segment_ids = nullptr;  // [cols]
  const float* ab = nullptr;                // [rows, cols]
};

// The masks of a grid point whose kernel takes the segment ids as inputs
// `q_segment_input` and the next (-1: none) and the bias as input
// `ab_input` (-1: none).
inline TileMasks TileMasksOf(const KernelArgs& a, int q_segment_input,
                             int ab_input) {
  TileMasks m;
  if (q_segment_input >= 0) {
    m.q_segment_ids = a.input(q_segment_input).data_as<int32_t>();
    m.kv_segment_ids = a.input(q_segment_input + 1).data_as<int32_t>();
  }
  if (ab_input >= 0) m.ab = a.input(ab_input).data_as<float>();
  return m;
}

// On scores s = scale * q k^T: s += scale * ab, and -inf where the query's
// and the key's segments differ.
inline void ApplyTileMasks(const TileMasks& m, float scale, int64_t rows,
                           int64_t cols, float* s) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    float* row = s + r * cols;
    if (m.ab != nullptr) {
      const float* bias = m.ab + r * cols;
      for (int64_t c = 0; c < cols; ++c) row[c] += scale * bias[c];
    }
    if (m.q_segment_ids != nullptr) {
      const int32_t segment = m.q_segment_ids[r];
      for (int64_t c = 0; c < cols; ++c) {
        if (m.kv_segment_ids[c] != segment) row[c] = kNegInf;
      }
    }
  }
}

// c[rows, cols] = alpha * a[rows, d] b^T, b the first `cols` rows of a
// contiguous [*, d] block (Q K^T, dO V^T; lda d, ldc `ldc`). Where row tiles
// run, `bt` is alpha * b^T with leading dimension `ld_bt`
// (TransposeScaled, made once per key block) and the product runs in the
// row tiles, reading a where it lies; else (`bt` null, or cols not a
// multiple of kRowTileColumns) by BLAS against b.
inline void ProductTransposed(int64_t rows, int64_t cols, int64_t d,
                              float alpha, const float* a, const float* b,
                              const float* bt, int64_t ld_bt, float* c,
                              int64_t ldc) {
  if (bt != nullptr &&
      RowTileProduct(rows, cols, d, 1.0f, a, d, bt, ld_bt, 0.0f, c, ldc)) {
    return;
  }
  Gemm(false, true, rows, cols, d, alpha, a, d, b, d, 0.0f, c, ldc);
}

}  // namespace meshdma::kernels_internal

#endif  // MESHDMA_KERNELS_INTERNAL_ATTENTION_MASKS_H_
