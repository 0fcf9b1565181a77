#include "meshdma/kernels/blas.h"

#include <cblas.h>

#include <mutex>
#include <string>

extern "C" {
// Exported by OpenBLAS (Debian's libopenblas0-pthread).
void openblas_set_num_threads(int num_threads);
char* openblas_get_config(void);
char* openblas_get_corename(void);
}

namespace meshdma {
namespace {

void InitBlasOnce() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

}  // namespace

void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
          float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
          float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  InitBlasOnce();
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
              static_cast<int>(ldc));
}

void GemmNaive(bool transpose_a, bool transpose_b, int64_t m, int64_t n,
               int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    float* crow = c + i * ldc;
    for (int64_t j = 0; j < n; ++j) crow[j] = beta == 0 ? 0.0f : beta * crow[j];
    for (int64_t p = 0; p < k; ++p) {
      const float av = alpha * (transpose_a ? a[p * lda + i] : a[i * lda + p]);
      if (!transpose_b) {
        const float* brow = b + p * ldb;
        for (int64_t j = 0; j < n; ++j) crow[j] += av * brow[j];
      } else {
        for (int64_t j = 0; j < n; ++j) crow[j] += av * b[j * ldb + p];
      }
    }
  }
}

const char* BlasDescription() {
  static const std::string* desc = [] {
    InitBlasOnce();
    return new std::string(std::string(openblas_get_config()) +
                           " (1 thread, core " + openblas_get_corename() + ")");
  }();
  return desc->c_str();
}

}  // namespace meshdma
