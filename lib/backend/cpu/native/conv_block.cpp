// Threads: forward and backward_apply split the n*c planes; backward_reduce splits the channels
// (each channel summed by one thread in a fixed order, in double), so results do not depend on
// timing.
#include "backend/cpu/native/conv_block.hpp"

#include <omp.h>

#include <cstddef>

#include "backend/cpu/parallel.hpp"

namespace mnist::cpu::native {

template <class T>
void bn_relu_pool_forward(const PoolGeom& g, const T* x, const T* mean, const T* invstd,
                          const T* gamma, const T* beta, T* y, uint8_t* mask, int threads) {
  const std::size_t planes = static_cast<std::size_t>(g.n) * g.c;
  const std::size_t in_plane = static_cast<std::size_t>(g.h) * g.w;
  const std::size_t out_plane = static_cast<std::size_t>(g.out_h) * g.out_w;
#pragma omp parallel num_threads(resolve_threads(threads))
  {
    std::size_t p0, p1;
    split_range(planes, omp_get_thread_num(), omp_get_num_threads(), &p0, &p1);
    for (std::size_t p = p0; p < p1; ++p) {
      const int c = static_cast<int>(p % g.c);
      // y = x * a + b with a = invstd * gamma, b = beta - mean * a: batch_norm_apply's own
      // expression, so the values (and therefore the winners) are the same.
      const T a = invstd[c] * (gamma ? gamma[c] : T(1));
      const T b = (beta ? beta[c] : T(0)) - mean[c] * a;
      const T* xp = x + p * in_plane;
      T* yp = y + p * out_plane;
      uint8_t* mp = mask + p * out_plane;
      for (int oy = 0; oy < g.out_h; ++oy) {
        const T* r0 = xp + static_cast<std::size_t>(2 * oy) * g.w;
        const T* r1 = r0 + g.w;
        T* yr = yp + oy * g.out_w;
        uint8_t* mr = mp + oy * g.out_w;
        // Branch-free, so the compiler vectorises across the row: each pair keeps its first
        // element on ties, and the bottom pair wins only when strictly greater, which is the
        // row-major first-wins rule of max_pool_forward.
#pragma omp simd
        for (int ox = 0; ox < g.out_w; ++ox) {
          const T v0 = r0[2 * ox] * a + b, v1 = r0[2 * ox + 1] * a + b;
          const T v2 = r1[2 * ox] * a + b, v3 = r1[2 * ox + 1] * a + b;
          const int top_right = v1 > v0, bottom_right = v3 > v2;
          const T top = top_right ? v1 : v0, bottom = bottom_right ? v3 : v2;
          const int lower = bottom > top;
          const T best = lower ? bottom : top;
          const int at = lower * (2 + bottom_right) + (1 - lower) * top_right;
          // ReLU keeps NaN (!(NaN <= 0)), as relu_forward does, so divergence stays visible.
          yr[ox] = !(best <= T(0)) ? best : T(0);
          mr[ox] = static_cast<uint8_t>(at | (best > T(0)) << 2);
        }
      }
    }
  }
}

namespace {
// Offset of a window's winner from the window's top-left corner.
inline std::size_t winner_offset(uint8_t m, int w) {
  return static_cast<std::size_t>((m & 2) ? w : 0) + (m & 1);
}
}  // namespace

template <class T>
void bn_relu_pool_backward_reduce(const PoolGeom& g, const T* dy, const uint8_t* mask, const T* x,
                                  const T* mean, const T* invstd, T* sum_dy, T* sum_dy_xhat,
                                  int threads) {
  const std::size_t in_plane = static_cast<std::size_t>(g.h) * g.w;
  const std::size_t out_plane = static_cast<std::size_t>(g.out_h) * g.out_w;
#pragma omp parallel num_threads(resolve_threads(threads))
  {
    std::size_t c0, c1;
    split_range(g.c, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
    for (std::size_t c = c0; c < c1; ++c) {
      double s = 0, sx = 0;
      const double m = mean[c];
      for (int s_i = 0; s_i < g.n; ++s_i) {
        const std::size_t p = static_cast<std::size_t>(s_i) * g.c + c;
        const T* xp = x + p * in_plane;
        const T* dyp = dy + p * out_plane;
        const uint8_t* mp = mask + p * out_plane;
        for (int oy = 0; oy < g.out_h; ++oy) {
          const T* xr = xp + static_cast<std::size_t>(2 * oy) * g.w;
          // Branch-free (the ReLU passes about half the winners, at random): a stopped
          // gradient adds zero.
          for (int ox = 0; ox < g.out_w; ++ox) {
            const uint8_t mk = mp[oy * g.out_w + ox];
            const double d = (mk & kPassedRelu) ? static_cast<double>(dyp[oy * g.out_w + ox]) : 0.0;
            const double xv = xr[2 * ox + winner_offset(mk, g.w)];
            s += d;
            sx += d * (xv - m);
          }
        }
      }
      sum_dy[c] = static_cast<T>(s);
      sum_dy_xhat[c] = static_cast<T>(sx * invstd[c]);
    }
  }
}

template <class T>
void bn_relu_pool_backward_apply(const PoolGeom& g, const T* dy, const uint8_t* mask, const T* x,
                                 const T* mean, const T* invstd, const T* gamma, const T* sum_dy,
                                 const T* sum_dy_xhat, double count, T* dx, int threads) {
  const std::size_t planes = static_cast<std::size_t>(g.n) * g.c;
  const std::size_t in_plane = static_cast<std::size_t>(g.h) * g.w;
  const std::size_t out_plane = static_cast<std::size_t>(g.out_h) * g.out_w;
#pragma omp parallel num_threads(resolve_threads(threads))
  {
    std::size_t p0, p1;
    split_range(planes, omp_get_thread_num(), omp_get_num_threads(), &p0, &p1);
    for (std::size_t p = p0; p < p1; ++p) {
      const int c = static_cast<int>(p % g.c);
      const T k = (gamma ? gamma[c] : T(1)) * invstd[c];
      const T mean_dy = static_cast<T>(sum_dy[c] / count);
      const T mean_dy_xhat = static_cast<T>(sum_dy_xhat[c] / count);
      const T m = mean[c], is = invstd[c];
      const T* xp = x + p * in_plane;
      T* dxp = dx + p * in_plane;
      // Everywhere the terms of the batch statistics; then again, with the routed gradient, at
      // the winners (batch_norm_backward_apply's expression in both).
#pragma omp simd
      for (std::size_t i = 0; i < in_plane; ++i)
        dxp[i] = k * (T(0) - mean_dy - (xp[i] - m) * is * mean_dy_xhat);
      const T* dyp = dy + p * out_plane;
      const uint8_t* mp = mask + p * out_plane;
      for (int oy = 0; oy < g.out_h; ++oy)
        for (int ox = 0; ox < g.out_w; ++ox) {
          const uint8_t mk = mp[oy * g.out_w + ox];
          if (!(mk & kPassedRelu)) continue;
          const std::size_t at =
              static_cast<std::size_t>(2 * oy) * g.w + 2 * ox + winner_offset(mk, g.w);
          dxp[at] = k * (dyp[oy * g.out_w + ox] - mean_dy - (xp[at] - m) * is * mean_dy_xhat);
        }
    }
  }
}

#define MNIST_INSTANTIATE(T)                                                                     \
  template void bn_relu_pool_forward<T>(const PoolGeom&, const T*, const T*, const T*, const T*, \
                                        const T*, T*, uint8_t*, int);                            \
  template void bn_relu_pool_backward_reduce<T>(const PoolGeom&, const T*, const uint8_t*,       \
                                                const T*, const T*, const T*, T*, T*, int);      \
  template void bn_relu_pool_backward_apply<T>(const PoolGeom&, const T*, const uint8_t*,        \
                                               const T*, const T*, const T*, const T*, const T*, \
                                               const T*, double, T*, int);
MNIST_INSTANTIATE(float)
MNIST_INSTANTIATE(double)
#undef MNIST_INSTANTIATE

}  // namespace mnist::cpu::native
