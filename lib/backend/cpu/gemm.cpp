// Threads: none here (see gemm.hpp); callers own the parallelism.
#include "backend/cpu/gemm.hpp"

#include <mutex>

#if defined(MNIST_WITH_BLAS)
#include <cblas.h>
#endif

namespace mnist::cpu {

namespace {

#if defined(MNIST_WITH_BLAS)
// OpenBLAS keeps its thread count in a process-wide setting. Every caller of gemm already runs
// inside a kernel's OpenMP team, so BLAS-level threads would only compete for the same cores;
// pin it to one thread, once, before the first product.
void use_single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

void blas_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
               const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void blas_gemm(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda,
               const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}
#endif

}  // namespace

template <class T>
void gemm_portable(bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a, int lda,
                   const T* b, int ldb, T beta, T* c, int ldc) {
  // Scale (or clear) C first so every loop order below only accumulates.
  for (int i = 0; i < m; ++i) {
    T* ci = c + static_cast<long>(i) * ldc;
    for (int j = 0; j < n; ++j) ci[j] = beta == T(0) ? T(0) : beta * ci[j];
  }
  if (k == 0 || alpha == T(0)) return;
  // Block over k so the rows of B in use stay in cache while the rows of C are updated.
  constexpr int kBlockK = 128;
  if (!trans_b) {
    // Inner loop over j is contiguous in B and C: C[i, :] += alpha * A(i, p) * B[p, :].
    for (int p0 = 0; p0 < k; p0 += kBlockK) {
      const int p1 = p0 + kBlockK < k ? p0 + kBlockK : k;
      for (int i = 0; i < m; ++i) {
        T* ci = c + static_cast<long>(i) * ldc;
        for (int p = p0; p < p1; ++p) {
          const T aip = alpha * (trans_a ? a[static_cast<long>(p) * lda + i]
                                         : a[static_cast<long>(i) * lda + p]);
          const T* bp = b + static_cast<long>(p) * ldb;
          for (int j = 0; j < n; ++j) ci[j] += aip * bp[j];
        }
      }
    }
    return;
  }
  // B transposed: B is stored [n, k], so C(i, j) is a dot product of two rows when A is [m, k].
  for (int i = 0; i < m; ++i) {
    T* ci = c + static_cast<long>(i) * ldc;
    for (int j = 0; j < n; ++j) {
      const T* bj = b + static_cast<long>(j) * ldb;
      T sum = 0;
      if (!trans_a) {
        const T* ai = a + static_cast<long>(i) * lda;
        // Reassociating the dot product lets it vectorise (a serial chain was 4x slower).
#pragma omp simd reduction(+ : sum)
        for (int p = 0; p < k; ++p) sum += ai[p] * bj[p];
      } else {
        for (int p = 0; p < k; ++p) sum += a[static_cast<long>(p) * lda + i] * bj[p];
      }
      ci[j] += alpha * sum;
    }
  }
}

template <class T>
void gemm(bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a, int lda, const T* b,
          int ldb, T beta, T* c, int ldc) {
  if (m <= 0 || n <= 0) return;
#if defined(MNIST_WITH_BLAS)
  use_single_threaded_blas();
  if (k > 0) {
    blas_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
#endif
  gemm_portable(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

#define MNIST_INSTANTIATE(T)                                                                     \
  template void gemm<T>(bool, bool, int, int, int, T, const T*, int, const T*, int, T, T*, int); \
  template void gemm_portable<T>(bool, bool, int, int, int, T, const T*, int, const T*, int, T,  \
                                 T*, int);
MNIST_INSTANTIATE(float)
MNIST_INSTANTIATE(double)
#undef MNIST_INSTANTIATE

}  // namespace mnist::cpu
