#include "meshdma/kernels/blas.h"

#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "meshdma/kernels/internal/vector_math.h"

extern "C" {
// Exported by OpenBLAS (Debian's libopenblas0-pthread).
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char* openblas_get_config(void);
char* openblas_get_corename(void);
}

namespace meshdma {
namespace {

// OpenBLAS's thread count is one setting for the whole process, shared with
// every other caller of the library there (torch's matmuls among them). A
// meshdma product must run on its device's thread alone, but must not leave
// the process's other products on one thread: while any OneBlasThread lives
// the count is 1, and when the last one ends it is the count from before
// the first.
class OneBlasThread {
 public:
  OneBlasThread() {
    std::lock_guard<std::mutex> lock(mu_);
    if (active_++ > 0) return;
    saved_ = openblas_get_num_threads();
    if (saved_ != 1) openblas_set_num_threads(1);
  }
  ~OneBlasThread() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--active_ == 0 && saved_ != 1) openblas_set_num_threads(saved_);
  }
  OneBlasThread(const OneBlasThread&) = delete;
  OneBlasThread& operator=(const OneBlasThread&) = delete;

 private:
  static inline std::mutex mu_;
  static inline int active_ = 0;  // OneBlasThreads alive, under mu_.
  static inline int saved_ = 1;   // The count before the first, under mu_.
};

// cblas_sgemm on one thread (OneBlasThread), sizes already checked. A
// product that overwrites C (beta 0) zeroes C's rows here and accumulates
// into them: OpenBLAS's own pass over C for beta 0 ran at a fraction of
// memset's speed, 3-5% of a flash attention forward, whose scores are such
// products (`meshdma-bench-kernels --sections 4`).
void Sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
           float alpha, const float* a, int64_t lda, const float* b,
           int64_t ldb, float beta, float* c, int64_t ldc) {
  if (beta == 0.0f) {
    for (int64_t i = 0; i < m; ++i) std::fill_n(c + i * ldc, n, 0.0f);
    beta = 1.0f;
  }
  const OneBlasThread one_thread;
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
              static_cast<int>(ldc));
}

// The least m * k for which Gemm takes the narrow-B row kernel: below it the
// packing OpenBLAS does is cheap.
constexpr int64_t kNarrowMinElements = int64_t{1} << 16;

// The widest B for which Gemm takes the row tiles (RowTileProduct): head
// dimensions 64 and 128. Against OpenBLAS in flash attention's P V, three
// alternated rounds of `meshdma-bench-kernels --sections 4 --flash_blocks
// default --head_dim 128|64` on an AVX-512 Xeon, seq 2048 and 4096, causal
// and not: the forward 4-5% faster at head_dim 128, 6-8% at 64.
constexpr int64_t kRowTileMaxN = 128;

void AbortOnError(const absl::Status& s) {
  if (s.ok()) return;
  std::fprintf(stderr, "meshdma: %s\n", std::string(s.message()).c_str());
  std::abort();
}

}  // namespace

absl::Status CheckGemmArgs(bool transpose_a, bool transpose_b, int64_t m,
                           int64_t n, int64_t k, const float* a, int64_t lda,
                           const float* b, int64_t ldb, const float* c,
                           int64_t ldc) {
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  const std::string where =
      absl::StrCat("Gemm(m=", m, ", n=", n, ", k=", k, ", lda=", lda,
                   ", ldb=", ldb, ", ldc=", ldc, "): ");
  for (auto [name, v] : {std::pair<const char*, int64_t>{"m", m},
                         {"n", n},
                         {"k", k},
                         {"lda", lda},
                         {"ldb", ldb},
                         {"ldc", ldc}}) {
    if (v < 0 || v > kMaxInt) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, name, " must be in [0, ", kMaxInt, "]"));
    }
  }
  // Row lengths of the stored (row-major) operands.
  const int64_t a_row = transpose_a ? m : k;
  const int64_t b_row = transpose_b ? k : n;
  const int64_t a_rows = transpose_a ? k : m;
  const int64_t b_rows = transpose_b ? n : k;
  if (lda < std::max<int64_t>(1, a_row)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "lda is shorter than a row of A (", a_row, ")"));
  }
  if (ldb < std::max<int64_t>(1, b_row)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "ldb is shorter than a row of B (", b_row, ")"));
  }
  if (ldc < std::max<int64_t>(1, n)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "ldc is shorter than a row of C (", n, ")"));
  }
  if ((a == nullptr && a_rows > 0 && a_row > 0) ||
      (b == nullptr && b_rows > 0 && b_row > 0) ||
      (c == nullptr && m > 0 && n > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(where, "null ",
                                                   a == nullptr   ? "A"
                                                   : b == nullptr ? "B"
                                                                  : "C",
                                                   " for a non-empty operand"));
  }
  return absl::OkStatus();
}

absl::Status CheckedGemm(bool transpose_a, bool transpose_b, int64_t m,
                         int64_t n, int64_t k, float alpha, const float* a,
                         int64_t lda, const float* b, int64_t ldb, float beta,
                         float* c, int64_t ldc) {
  absl::Status s =
      CheckGemmArgs(transpose_a, transpose_b, m, n, k, a, lda, b, ldb, c, ldc);
  if (!s.ok()) return s;
  if (m == 0 || n == 0) return absl::OkStatus();
  Sgemm(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  return absl::OkStatus();
}

void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
          float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
          float beta, float* c, int64_t ldc) {
  AbortOnError(
      CheckGemmArgs(transpose_a, transpose_b, m, n, k, a, lda, b, ldb, c, ldc));
  if (m == 0 || n == 0) return;
  // A narrow B (n <= 8) against a large A: OpenBLAS packs all of A for the
  // call, which costs more than the memory-bound product itself; the row
  // kernel reads A once against B transposed.
  if (!transpose_a && !transpose_b && n <= kernels_internal::kMaxNarrowN &&
      m * k >= kNarrowMinElements) {
    thread_local std::vector<float> bt;
    bt.resize(n * k);
    for (int64_t p = 0; p < k; ++p) {
      for (int64_t j = 0; j < n; ++j) bt[j * k + p] = b[p * ldb + j];
    }
    kernels_internal::NarrowProduct(m, n, k, alpha, a, lda, bt.data(), beta, c,
                                    ldc);
    return;
  }
  // B of a head dimension's width (attention's P V): OpenBLAS packs
  // all of A, 2n flops per element packed; the row tiles read A in place.
  if (!transpose_a && !transpose_b && n <= kRowTileMaxN &&
      kernels_internal::RowTileProduct(m, n, k, alpha, a, lda, b, ldb, beta, c,
                                       ldc)) {
    return;
  }
  Sgemm(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void GemmNaive(bool transpose_a, bool transpose_b, int64_t m, int64_t n,
               int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  AbortOnError(
      CheckGemmArgs(transpose_a, transpose_b, m, n, k, a, lda, b, ldb, c, ldc));
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
    return new std::string(std::string(openblas_get_config()) +
                           " (1 thread, core " + openblas_get_corename() + ")");
  }();
  return desc->c_str();
}

}  // namespace meshdma
