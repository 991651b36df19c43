// Threads: reductions give each thread whole channels (a fixed summation order per channel, so the
// result does not depend on the thread count); the elementwise steps split the n*c planes.
#include "backend/cpu/batch_norm.hpp"

#include <omp.h>

#include <cmath>
#include <cstddef>

#include "backend/batch_norm_rule.hpp"
#include "backend/cpu/parallel.hpp"

namespace mnist::cpu {

namespace {
// Reductions over few channels are not worth a team below this many values.
bool worth_a_team(const ChannelGeom& g) {
  return static_cast<std::size_t>(g.n) * g.c * g.hw >= kParallelMinElements;
}

// The per-plane sums in double. The build targets baseline x86-64 (SSE2: two doubles per
// vector), so these loops also get an AVX2 clone that the loader picks on CPUs that have it;
// the lane count changes the order of the additions, so the last bits may differ between the
// clones (never between runs on one machine). Clones cannot be templates, hence the overloads.
// Not under the sanitizers: the clones' ifunc resolver runs before the sanitizer runtime is set up
// and crashed ThreadSanitizer at start-up.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)
#define MNIST_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MNIST_SIMD_CLONES
#endif

template <class T>
inline void plane_sums_impl(const T* x, std::size_t len, double* sum, double* sumsq) {
  double ps = 0, pss = 0;
#pragma omp simd reduction(+ : ps, pss)
  for (std::size_t j = 0; j < len; ++j) {
    const double v = x[j];
    ps += v;
    pss += v * v;
  }
  *sum = ps;
  *sumsq = pss;
}
MNIST_SIMD_CLONES void plane_sums(const float* x, std::size_t len, double* sum, double* sumsq) {
  plane_sums_impl(x, len, sum, sumsq);
}
MNIST_SIMD_CLONES void plane_sums(const double* x, std::size_t len, double* sum, double* sumsq) {
  plane_sums_impl(x, len, sum, sumsq);
}

// sum(dy) and sum(dy * (x - m)) over one plane, in double.
template <class T>
inline void plane_dy_sums_impl(const T* dy, const T* x, double m, std::size_t len, double* sum,
                               double* sum_dx) {
  double ps = 0, psx = 0;
#pragma omp simd reduction(+ : ps, psx)
  for (std::size_t j = 0; j < len; ++j) {
    const double d = dy[j];
    ps += d;
    psx += d * (static_cast<double>(x[j]) - m);
  }
  *sum = ps;
  *sum_dx = psx;
}
MNIST_SIMD_CLONES void plane_dy_sums(const float* dy, const float* x, double m, std::size_t len,
                                     double* sum, double* sum_dx) {
  plane_dy_sums_impl(dy, x, m, len, sum, sum_dx);
}
MNIST_SIMD_CLONES void plane_dy_sums(const double* dy, const double* x, double m, std::size_t len,
                                     double* sum, double* sum_dx) {
  plane_dy_sums_impl(dy, x, m, len, sum, sum_dx);
}
}  // namespace

template <class T>
void batch_norm_stats(const ChannelGeom& g, const T* x, T* sum, T* sumsq, int threads) {
  const std::size_t plane = static_cast<std::size_t>(g.hw);
#pragma omp parallel for num_threads(resolve_threads(threads)) schedule(static) if (worth_a_team(g))
  for (int ch = 0; ch < g.c; ++ch) {
    double s = 0, ss = 0;
    for (int i = 0; i < g.n; ++i) {
      const T* xp = x + (static_cast<std::size_t>(i) * g.c + ch) * plane;
      // Double partial sums per plane; the simd reduction lets the compiler keep several
      // independent accumulators (a serial double chain was the slowest part of a training step).
      double ps, pss;
      plane_sums(xp, plane, &ps, &pss);
      s += ps;
      ss += pss;
    }
    sum[ch] = static_cast<T>(s);
    sumsq[ch] = static_cast<T>(ss);
  }
}

template <class T>
void batch_norm_finalize(int c, double count, const T* sum, const T* sumsq, float epsilon,
                         float decay, T* mean, T* invstd, T* running_mean, T* running_var) {
  for (int ch = 0; ch < c; ++ch)
    batch_norm_finalize_channel(count, static_cast<double>(sum[ch]), static_cast<double>(sumsq[ch]),
                                epsilon, decay, mean[ch], invstd[ch], running_mean[ch],
                                running_var[ch]);
}

template <class T>
void batch_norm_inference_params(int c, const T* running_mean, const T* running_var, float epsilon,
                                 T* mean, T* invstd) {
  for (int ch = 0; ch < c; ++ch) {
    mean[ch] = running_mean[ch];
    invstd[ch] = static_cast<T>(batch_norm_invstd(static_cast<double>(running_var[ch]), epsilon));
  }
}

template <class T>
void batch_norm_apply(const ChannelGeom& g, const T* x, const T* mean, const T* invstd,
                      const T* gamma, const T* beta, T* y, int threads) {
  const std::size_t planes = static_cast<std::size_t>(g.n) * g.c;
  const std::size_t plane = static_cast<std::size_t>(g.hw);
#pragma omp parallel for num_threads(resolve_threads(threads)) schedule(static) if (worth_a_team(g))
  for (std::size_t p = 0; p < planes; ++p) {
    const int ch = static_cast<int>(p % g.c);
    // y = x * a + b with a = invstd * gamma, b = beta - mean * a.
    const T a = invstd[ch] * (gamma ? gamma[ch] : T(1));
    const T b = (beta ? beta[ch] : T(0)) - mean[ch] * a;
    const T* xp = x + p * plane;
    T* yp = y + p * plane;
    for (std::size_t j = 0; j < plane; ++j) yp[j] = xp[j] * a + b;
  }
}

template <class T>
void batch_norm_backward_reduce(const ChannelGeom& g, const T* dy, const T* x, const T* mean,
                                const T* invstd, T* sum_dy, T* sum_dy_xhat, int threads) {
  const std::size_t plane = static_cast<std::size_t>(g.hw);
#pragma omp parallel for num_threads(resolve_threads(threads)) schedule(static) if (worth_a_team(g))
  for (int ch = 0; ch < g.c; ++ch) {
    const double m = mean[ch];
    double s = 0, sx = 0;
    for (int i = 0; i < g.n; ++i) {
      const std::size_t off = (static_cast<std::size_t>(i) * g.c + ch) * plane;
      double ps, psx;
      plane_dy_sums(dy + off, x + off, m, plane, &ps, &psx);
      s += ps;
      sx += psx;
    }
    sum_dy[ch] = static_cast<T>(s);
    sum_dy_xhat[ch] = static_cast<T>(sx * static_cast<double>(invstd[ch]));
  }
}

template <class T>
void batch_norm_backward_apply(const ChannelGeom& g, const T* dy, const T* x, const T* mean,
                               const T* invstd, const T* gamma, const T* sum_dy,
                               const T* sum_dy_xhat, double count, T* dx, int threads) {
  const std::size_t planes = static_cast<std::size_t>(g.n) * g.c;
  const std::size_t plane = static_cast<std::size_t>(g.hw);
#pragma omp parallel for num_threads(resolve_threads(threads)) schedule(static) if (worth_a_team(g))
  for (std::size_t p = 0; p < planes; ++p) {
    const int ch = static_cast<int>(p % g.c);
    const T scale = (gamma ? gamma[ch] : T(1)) * invstd[ch];
    const T mean_dy = static_cast<T>(static_cast<double>(sum_dy[ch]) / count);
    const T mean_dy_xhat = static_cast<T>(static_cast<double>(sum_dy_xhat[ch]) / count);
    const T m = mean[ch], is = invstd[ch];
    const T* dyp = dy + p * plane;
    const T* xp = x + p * plane;
    T* dxp = dx + p * plane;
    for (std::size_t j = 0; j < plane; ++j) {
      const T xhat = (xp[j] - m) * is;
      dxp[j] = scale * (dyp[j] - mean_dy - xhat * mean_dy_xhat);
    }
  }
}

#define MNIST_INSTANTIATE(T)                                                                      \
  template void batch_norm_stats<T>(const ChannelGeom&, const T*, T*, T*, int);                   \
  template void batch_norm_finalize<T>(int, double, const T*, const T*, float, float, T*, T*, T*, \
                                       T*);                                                       \
  template void batch_norm_inference_params<T>(int, const T*, const T*, float, T*, T*);           \
  template void batch_norm_apply<T>(const ChannelGeom&, const T*, const T*, const T*, const T*,   \
                                    const T*, T*, int);                                           \
  template void batch_norm_backward_reduce<T>(const ChannelGeom&, const T*, const T*, const T*,   \
                                              const T*, T*, T*, int);                             \
  template void batch_norm_backward_apply<T>(const ChannelGeom&, const T*, const T*, const T*,    \
                                             const T*, const T*, const T*, const T*, double, T*,  \
                                             int);
MNIST_INSTANTIATE(float)
MNIST_INSTANTIATE(double)
#undef MNIST_INSTANTIATE

}  // namespace mnist::cpu
