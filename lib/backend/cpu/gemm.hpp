#pragma once
// Matrix product used by the convolution and dense kernels.
//
// Threads: none. gemm runs on the calling thread; the kernels that call it split the batch (or the
// output rows) across their own OpenMP team and give each thread its own sub-problem. OpenBLAS is
// therefore told once, process-wide, to use a single thread (its own pool would oversubscribe the
// cores the kernel team already occupies).

namespace mnist::cpu {

// Row-major C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C, where op(X) is X or its
// transpose. lda, ldb, ldc are the row strides of A, B, C as stored (A is [m, k] or, transposed,
// [k, m]). beta == 0 assigns C (its old contents, even NaN, are ignored); otherwise C accumulates.
// Uses OpenBLAS when the build found it (MNIST_WITH_BLAS), else gemm_portable.
template <class T>
void gemm(bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a, int lda, const T* b,
          int ldb, T beta, T* c, int ldc);

// The same contract without BLAS: cache-friendly loop orders, vectorisable inner loops.
template <class T>
void gemm_portable(bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a, int lda,
                   const T* b, int ldb, T beta, T* c, int ldc);

}  // namespace mnist::cpu
