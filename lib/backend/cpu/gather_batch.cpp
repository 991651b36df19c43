// Threads: contiguous ranges of samples; each copies and scales one image row.
#include "backend/cpu/gather_batch.hpp"

#include <cstddef>

#include "backend/cpu/parallel.hpp"

namespace mnist::cpu {

template <class T>
void gather_batch(const uint8_t* images, const uint8_t* labels, int pixels, const int32_t* indices,
                  int n, T* x, int32_t* y, int threads) {
  // Multiplying by the rounded reciprocal would differ from the division in the last bit; the CUDA
  // twin divides too, so both backends produce identical inputs.
  const T denom = T(255);
#pragma omp parallel for num_threads(resolve_threads(threads)) \
    schedule(static) if (static_cast <std::size_t>(n) * pixels >= kParallelMinElements)
  for (int i = 0; i < n; ++i) {
    const uint8_t* src = images + static_cast<std::size_t>(indices[i]) * pixels;
    T* dst = x + static_cast<std::size_t>(i) * pixels;
    for (int p = 0; p < pixels; ++p) dst[p] = static_cast<T>(src[p]) / denom;
    y[i] = labels[indices[i]];
  }
}

template void gather_batch<float>(const uint8_t*, const uint8_t*, int, const int32_t*, int, float*,
                                  int32_t*, int);
template void gather_batch<double>(const uint8_t*, const uint8_t*, int, const int32_t*, int,
                                   double*, int32_t*, int);

}  // namespace mnist::cpu
