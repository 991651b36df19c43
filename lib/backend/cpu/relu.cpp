// Threads: contiguous element ranges via an OpenMP static schedule.
#include "backend/cpu/relu.hpp"

#include "backend/cpu/parallel.hpp"

namespace mnist::cpu {

template <class T>
void relu_forward(std::size_t n, const T* x, T* y, int threads) {
#pragma omp parallel for simd num_threads(resolve_threads(threads)) \
    schedule(static) if (n >= kParallelMinElements)
  for (std::size_t i = 0; i < n; ++i) y[i] = x[i] < T(0) ? T(0) : x[i];
}

template <class T>
void relu_backward(std::size_t n, const T* y, const T* dy, T* dx, int threads) {
#pragma omp parallel for simd num_threads(resolve_threads(threads)) \
    schedule(static) if (n >= kParallelMinElements)
  for (std::size_t i = 0; i < n; ++i) {
    // Load dy unconditionally: a conditional load is control flow to the vectoriser, and the
    // branchy loop it leaves mispredicts on every other element (it measured 20x slower).
    const T g = dy[i];
    dx[i] = y[i] > T(0) ? g : T(0);
  }
}

template void relu_forward<float>(std::size_t, const float*, float*, int);
template void relu_forward<double>(std::size_t, const double*, double*, int);
template void relu_backward<float>(std::size_t, const float*, const float*, float*, int);
template void relu_backward<double>(std::size_t, const double*, const double*, double*, int);

}  // namespace mnist::cpu
