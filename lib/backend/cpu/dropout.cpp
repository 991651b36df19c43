// Threads: contiguous ranges of samples; each element draws its own Philox block, so no thread
// needs another's state.
#include "backend/cpu/dropout.hpp"

#include <cstddef>

#include "backend/cpu/parallel.hpp"
#include "backend/dropout_mask.hpp"
#include "core/error.hpp"

namespace mnist::cpu {

namespace {

// Forward and backward are the same masked scaling of their input.
template <class T>
void apply_mask(int n, int per_sample, float rate, RngKey key, uint32_t step, uint32_t first_sample,
                const T* in, T* out, int threads) {
  MNIST_CHECK(rate >= 0.0f && rate < 1.0f, "dropout rate {} is outside [0, 1)", rate);
  const T keep_scale = T(1) / (T(1) - static_cast<T>(rate));
  const std::size_t total = static_cast<std::size_t>(n) * per_sample;
#pragma omp parallel for num_threads(resolve_threads(threads)) \
    schedule(static) if (total >= kParallelMinElements / 4)
  for (int i = 0; i < n; ++i) {
    const std::size_t off = static_cast<std::size_t>(i) * per_sample;
    const uint32_t sample = first_sample + static_cast<uint32_t>(i);
    for (int e = 0; e < per_sample; ++e) {
      out[off + e] = dropout_keeps(key, step, sample, static_cast<uint32_t>(e), rate)
                         ? in[off + e] * keep_scale
                         : T(0);
    }
  }
}

}  // namespace

template <class T>
void dropout_forward(int n, int per_sample, float rate, RngKey key, uint32_t step,
                     uint32_t first_sample, const T* x, T* y, int threads) {
  apply_mask(n, per_sample, rate, key, step, first_sample, x, y, threads);
}

template <class T>
void dropout_backward(int n, int per_sample, float rate, RngKey key, uint32_t step,
                      uint32_t first_sample, const T* dy, T* dx, int threads) {
  apply_mask(n, per_sample, rate, key, step, first_sample, dy, dx, threads);
}

#define MNIST_INSTANTIATE(T)                                                                  \
  template void dropout_forward<T>(int, int, float, RngKey, uint32_t, uint32_t, const T*, T*, \
                                   int);                                                      \
  template void dropout_backward<T>(int, int, float, RngKey, uint32_t, uint32_t, const T*, T*, int);
MNIST_INSTANTIATE(float)
MNIST_INSTANTIATE(double)
#undef MNIST_INSTANTIATE

}  // namespace mnist::cpu
