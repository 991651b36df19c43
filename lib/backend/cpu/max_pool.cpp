// Threads: contiguous ranges of (sample, channel) planes; planes are independent in both
// directions.
#include "backend/cpu/max_pool.hpp"

#include <omp.h>

#include <algorithm>
#include <cstddef>

#include "backend/cpu/parallel.hpp"

namespace mnist::cpu {

namespace {

// The seed's pooling (2x2 windows, stride 2, no padding): every window is four real pixels, so
// each output row reads one pair of input rows. The loop body is branch-free selects over
// restrict pointers, which the compiler turns into vector blends (which pixel wins is
// data-dependent, so branches mispredict); the winner rule is the general path's.
template <class T>
void pool_2x2_plane(const PoolGeom& g, const T* __restrict xp, T* __restrict yp,
                    int32_t* __restrict ap) {
  const int w = g.w, out_w = g.out_w;
  for (int oy = 0; oy < g.out_h; ++oy) {
    const T* __restrict r0 = xp + 2 * oy * w;
    const T* __restrict r1 = r0 + w;
    T* __restrict yr = yp + oy * out_w;
    int32_t* __restrict ar = ap + oy * out_w;
    const int32_t row0 = 2 * oy * w;
#pragma omp simd
    for (int ox = 0; ox < out_w; ++ox) {
      const int32_t i0 = row0 + 2 * ox;
      T v = r0[2 * ox];
      int32_t best = i0;
      const T b = r0[2 * ox + 1], cc = r1[2 * ox], d = r1[2 * ox + 1];
      best = b > v ? i0 + 1 : best;
      v = b > v ? b : v;
      best = cc > v ? i0 + w : best;
      v = cc > v ? cc : v;
      best = d > v ? i0 + w + 1 : best;
      v = d > v ? d : v;
      yr[ox] = v;
      ar[ox] = best;
    }
  }
}

}  // namespace

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
      pool_2x2_plane(g, xp, yp, ap);
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
