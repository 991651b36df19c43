// Threads: contiguous ranges of (sample, channel) planes; planes are independent in both
// directions.
#include "backend/cpu/max_pool.hpp"

#include <omp.h>

#include <algorithm>
#include <cstddef>

#include "backend/cpu/parallel.hpp"

namespace mnist::cpu {

template <class T>
void max_pool_forward(const PoolGeom& g, const T* x, T* y, int32_t* argmax, int threads) {
  const std::size_t planes = static_cast<std::size_t>(g.n) * g.c;
  const std::size_t in_plane = static_cast<std::size_t>(g.h) * g.w;
  const std::size_t out_plane = static_cast<std::size_t>(g.out_h) * g.out_w;
  const bool plain_2x2 = g.size_h == 2 && g.size_w == 2 && g.stride_h == 2 && g.stride_w == 2 &&
                         g.pad_h == 0 && g.pad_w == 0;
#pragma omp parallel for num_threads(resolve_threads(threads)) schedule(static)
  for (std::size_t p = 0; p < planes; ++p) {
    const T* xp = x + p * in_plane;
    T* yp = y + p * out_plane;
    int32_t* ap = argmax + p * out_plane;
    if (plain_2x2) {
      // The seed's pooling: every window is four real pixels; same winner rule as the general path.
      for (int oy = 0; oy < g.out_h; ++oy) {
        const T* r0 = xp + 2 * oy * g.w;
        const T* r1 = r0 + g.w;
        for (int ox = 0; ox < g.out_w; ++ox) {
          // Selects instead of branches: which pixel wins is data-dependent and mispredicts.
          const int32_t i0 = 2 * oy * g.w + 2 * ox;
          int32_t best = i0;
          T v = r0[2 * ox];
          bool c = r0[2 * ox + 1] > v;
          v = c ? r0[2 * ox + 1] : v;
          best = c ? i0 + 1 : best;
          c = r1[2 * ox] > v;
          v = c ? r1[2 * ox] : v;
          best = c ? i0 + g.w : best;
          c = r1[2 * ox + 1] > v;
          v = c ? r1[2 * ox + 1] : v;
          best = c ? i0 + g.w + 1 : best;
          yp[oy * g.out_w + ox] = v;
          ap[oy * g.out_w + ox] = best;
        }
      }
      continue;
    }
    for (int oy = 0; oy < g.out_h; ++oy) {
      const int y0 = oy * g.stride_h - g.pad_h;
      const int ya = std::max(y0, 0), yb = std::min(y0 + g.size_h, g.h);
      for (int ox = 0; ox < g.out_w; ++ox) {
        const int x0 = ox * g.stride_w - g.pad_w;
        const int xa = std::max(x0, 0), xb = std::min(x0 + g.size_w, g.w);
        // A window entirely in the padding has no winner: output 0, argmax -1 (backward skips it).
        int32_t best = -1;
        T best_value = T(0);
        for (int iy = ya; iy < yb; ++iy) {
          for (int ix = xa; ix < xb; ++ix) {
            const T v = xp[iy * g.w + ix];
            if (best < 0 || v > best_value) {
              best = iy * g.w + ix;
              best_value = v;
            }
          }
        }
        yp[oy * g.out_w + ox] = best_value;
        ap[oy * g.out_w + ox] = best;
      }
    }
  }
}

template <class T>
void max_pool_backward(const PoolGeom& g, const T* dy, const int32_t* argmax, T* dx, int threads) {
  const std::size_t planes = static_cast<std::size_t>(g.n) * g.c;
  const std::size_t in_plane = static_cast<std::size_t>(g.h) * g.w;
  const std::size_t out_plane = static_cast<std::size_t>(g.out_h) * g.out_w;
#pragma omp parallel for num_threads(resolve_threads(threads)) schedule(static)
  for (std::size_t p = 0; p < planes; ++p) {
    T* dxp = dx + p * in_plane;
    std::fill(dxp, dxp + in_plane, T(0));
    const T* dyp = dy + p * out_plane;
    const int32_t* ap = argmax + p * out_plane;
    for (std::size_t o = 0; o < out_plane; ++o) {
      if (ap[o] >= 0) dxp[ap[o]] += dyp[o];
    }
  }
}

#define MNIST_INSTANTIATE(T)                                                       \
  template void max_pool_forward<T>(const PoolGeom&, const T*, T*, int32_t*, int); \
  template void max_pool_backward<T>(const PoolGeom&, const T*, const int32_t*, T*, int);
MNIST_INSTANTIATE(float)
MNIST_INSTANTIATE(double)
#undef MNIST_INSTANTIATE

}  // namespace mnist::cpu
