// Threads: batch rows (forward, backward_data) or output units (backward_weights) in contiguous
// chunks, one single-threaded GEMM per thread.
#include "backend/cpu/dense.hpp"

#include <omp.h>

#include <cstddef>

#include "backend/cpu/gemm.hpp"
#include "backend/cpu/parallel.hpp"

namespace mnist::cpu {

template <class T>
void dense_forward(int n, int in, int out, const T* x, const T* weight, const T* bias, T* y,
                   int threads) {
#pragma omp parallel num_threads(resolve_threads(threads))
  {
    std::size_t r0, r1;
    split_range(n, omp_get_thread_num(), omp_get_num_threads(), &r0, &r1);
    if (r1 > r0) {
      T* yr = y + r0 * out;
      // Seed with the bias so the GEMM accumulates onto it.
      for (std::size_t r = r0; r < r1; ++r) {
        for (int o = 0; o < out; ++o) y[r * out + o] = bias ? bias[o] : T(0);
      }
      gemm<T>(false, true, static_cast<int>(r1 - r0), out, in, T(1), x + r0 * in, in, weight, in,
              T(1), yr, out);
    }
  }
}

template <class T>
void dense_backward_data(int n, int in, int out, const T* dy, const T* weight, T* dx, int threads) {
#pragma omp parallel num_threads(resolve_threads(threads))
  {
    std::size_t r0, r1;
    split_range(n, omp_get_thread_num(), omp_get_num_threads(), &r0, &r1);
    if (r1 > r0) {
      gemm<T>(false, false, static_cast<int>(r1 - r0), in, out, T(1), dy + r0 * out, out, weight,
              in, T(0), dx + r0 * in, in);
    }
  }
}

template <class T>
void dense_backward_weights(int n, int in, int out, const T* x, const T* dy, T* dweight, T* dbias,
                            int threads) {
#pragma omp parallel num_threads(resolve_threads(threads))
  {
    std::size_t o0, o1;
    split_range(out, omp_get_thread_num(), omp_get_num_threads(), &o0, &o1);
    if (o1 > o0) {
      // dweight[o0:o1, :] = dy[:, o0:o1]^T * x
      gemm<T>(true, false, static_cast<int>(o1 - o0), in, n, T(1), dy + o0, out, x, in, T(0),
              dweight + o0 * in, in);
      if (dbias) {
        for (std::size_t o = o0; o < o1; ++o) {
          double sum = 0;
          for (int i = 0; i < n; ++i) sum += dy[static_cast<std::size_t>(i) * out + o];
          dbias[o] = static_cast<T>(sum);
        }
      }
    }
  }
}

#define MNIST_INSTANTIATE(T)                                                            \
  template void dense_forward<T>(int, int, int, const T*, const T*, const T*, T*, int); \
  template void dense_backward_data<T>(int, int, int, const T*, const T*, T*, int);     \
  template void dense_backward_weights<T>(int, int, int, const T*, const T*, T*, T*, int);
MNIST_INSTANTIATE(float)
MNIST_INSTANTIATE(double)
#undef MNIST_INSTANTIATE

}  // namespace mnist::cpu
