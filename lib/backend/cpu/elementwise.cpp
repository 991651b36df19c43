// Threads: contiguous element ranges via OpenMP static schedules.
#include "backend/cpu/elementwise.hpp"

#include "backend/cpu/parallel.hpp"

namespace mnist::cpu {

template <class T>
void fill(std::size_t n, T value, T* x, int threads) {
#pragma omp parallel for simd num_threads(resolve_threads(threads)) \
    schedule(static) if (n >= kParallelMinElements)
  for (std::size_t i = 0; i < n; ++i) x[i] = value;
}

template <class T>
void scale(std::size_t n, T alpha, T* x, int threads) {
#pragma omp parallel for simd num_threads(resolve_threads(threads)) \
    schedule(static) if (n >= kParallelMinElements)
  for (std::size_t i = 0; i < n; ++i) x[i] *= alpha;
}

template <class T>
void add(std::size_t n, const T* x, T* y, int threads) {
#pragma omp parallel for simd num_threads(resolve_threads(threads)) \
    schedule(static) if (n >= kParallelMinElements)
  for (std::size_t i = 0; i < n; ++i) y[i] += x[i];
}

#define MNIST_INSTANTIATE(T)                       \
  template void fill<T>(std::size_t, T, T*, int);  \
  template void scale<T>(std::size_t, T, T*, int); \
  template void add<T>(std::size_t, const T*, T*, int);
MNIST_INSTANTIATE(float)
MNIST_INSTANTIATE(double)
#undef MNIST_INSTANTIATE

}  // namespace mnist::cpu
