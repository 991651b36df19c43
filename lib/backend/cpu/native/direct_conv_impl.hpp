// The direct convolution kernels (see direct_conv.hpp), written once and compiled once per
// instruction set: direct_conv_<isa>.cpp defines MNIST_NATIVE_ISA (the namespace) and
// MNIST_NATIVE_VECTOR_BYTES (the register width), then includes this file. Everything here has
// internal linkage except direct_conv_kernels<T>(): a helper emitted with AVX-512 instructions
// must never be shared, through the linker, with code that runs on a machine without them.
//
// Threads: contiguous chunks of samples per thread. Thread t's workspace slice holds the padded
// input planes, the flattened output planes and, for the weight gradient, its vector partial sums.
#include <omp.h>

#include <cstddef>
#include <cstring>

#include "backend/cpu/native/direct_conv.hpp"
#include "backend/cpu/native/isa.hpp"

namespace mnist::cpu::native::MNIST_NATIVE_ISA {

namespace {

constexpr int kVectorBytes = MNIST_NATIVE_VECTOR_BYTES;
// Register blocking of the correlation: output channels x vectors of positions held as
// accumulators (AVX-512: 6 x 4 of 32 registers; 16-register sets: 6 x 2).
constexpr int kChannelBlock = 6;
constexpr int kPositionVectors = kVectorBytes == 64 ? 4 : 2;
// Register blocking of the weight gradient: output channels x taps.
constexpr int kGradChannelBlock = kVectorBytes == 64 ? 6 : 3;
constexpr int kGradTapBlock = 4;

template <class T>
struct Simd {
  typedef T V __attribute__((vector_size(kVectorBytes)));
  static constexpr int lanes = kVectorBytes / static_cast<int>(sizeof(T));
  static inline V load(const T* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static inline void store(T* p, V v) { std::memcpy(p, &v, sizeof v); }
  static inline V splat(T s) { return V{} + s; }
  static inline T sum(V v) {
    T s = 0;
    for (int l = 0; l < lanes; ++l) s += v[l];
    return s;
  }
};

inline std::size_t round_up(std::size_t v, std::size_t m) {
  return (v + m - 1) / m * m;
}
inline int ceil_div(int a, int b) {
  return (a + b - 1) / b;
}
inline int team_size(int threads) {
  return threads > 0 ? threads : omp_get_num_procs();
}
inline void split(int count, int part, int parts, int* begin, int* end) {
  const int base = count / parts, extra = count % parts;
  *begin = part * base + (part < extra ? part : extra);
  *end = *begin + base + (part < extra ? 1 : 0);
}
inline void zero(double* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) p[i] = 0;
}
inline void zero(float* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) p[i] = 0;
}

// One flattened correlation: out[o][q] = sum over taps (c, i, j) of wt(o, tap) * in[c*plane +
// i*row + j + q], for q < q_blocked. `in` holds in_c zero-bordered planes of rows x row, then a
// zero tail long enough for the junk positions of the last block.
struct Flat {
  int in_c = 0, out_c = 0, kh = 0, kw = 0;
  int out_h = 0, out_w = 0;
  int row = 0, rows = 0, plane = 0;
  int q_blocked = 0;  // out_h*row rounded up to whole register blocks
  int out_blocks = 0;
  std::size_t in_elems = 0, out_elems = 0, weight_elems = 0;
};

template <class T>
Flat make_flat(int in_c, int out_c, int kh, int kw, int out_h, int out_w) {
  const int block = Simd<T>::lanes * kPositionVectors;
  Flat f;
  f.in_c = in_c, f.out_c = out_c, f.kh = kh, f.kw = kw, f.out_h = out_h, f.out_w = out_w;
  f.row = out_w + kw - 1;
  f.rows = out_h + kh - 1;
  f.plane = f.rows * f.row;
  f.q_blocked = static_cast<int>(round_up(static_cast<std::size_t>(out_h) * f.row, block));
  f.out_blocks = ceil_div(out_c, kChannelBlock);
  // The last block reads up to q_blocked + (kh-1)*row + kw-1 past the last plane's start, which
  // is at most (q_blocked - out_h*row) + kw past its end.
  f.in_elems = round_up(static_cast<std::size_t>(in_c) * f.plane + f.q_blocked -
                            static_cast<std::size_t>(out_h) * f.row + kw + block,
                        16);
  f.out_elems = static_cast<std::size_t>(f.out_blocks) * kChannelBlock * f.q_blocked;
  f.weight_elems =
      round_up(static_cast<std::size_t>(f.out_blocks) * kChannelBlock * in_c * kh * kw, 16);
  return f;
}

// Copies `channels` planes of src_h x src_w into f's zero-bordered layout, the source's (0, 0)
// at (top, left); parts falling outside the padded plane are dropped. Assigns all of dst.
template <class T>
void pad_planes(const Flat& f, const T* src, int src_h, int src_w, int top, int left, T* dst) {
  zero(dst, f.in_elems);
  for (int c = 0; c < f.in_c; ++c) {
    for (int y = 0; y < src_h; ++y) {
      const int py = y + top;
      if (py < 0 || py >= f.rows) continue;
      const T* s = src + (static_cast<std::size_t>(c) * src_h + y) * src_w;
      T* d = dst + static_cast<std::size_t>(c) * f.plane + static_cast<std::size_t>(py) * f.row;
      // The columns that land inside the padded row, found once per row so the copy vectorises.
      const int x0 = left < 0 ? -left : 0;
      const int x1 = src_w < f.row - left ? src_w : f.row - left;
      for (int x = x0; x < x1; ++x) d[x + left] = s[x];
    }
  }
}

// The register-blocked correlation. wt: [out_blocks][in_c*kh*kw][kChannelBlock] (zero for
// output channels past out_c). Assigns out[out_blocks*kChannelBlock][q_blocked].
template <class T>
void correlate(const Flat& f, const T* in, const T* wt, T* out) {
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int L = S::lanes, B = kPositionVectors, KB = kChannelBlock;
  const int taps = f.in_c * f.kh * f.kw;
  for (int ob = 0; ob < f.out_blocks; ++ob) {
    const T* wb = wt + static_cast<std::size_t>(ob) * taps * KB;
    T* yb = out + static_cast<std::size_t>(ob) * KB * f.q_blocked;
    for (int q0 = 0; q0 < f.q_blocked; q0 += B * L) {
      V acc[KB][B];
#pragma GCC unroll 8
      for (int kk = 0; kk < KB; ++kk)
#pragma GCC unroll 8
        for (int b = 0; b < B; ++b) acc[kk][b] = V{};
      const T* w = wb;
      for (int c = 0; c < f.in_c; ++c) {
        for (int i = 0; i < f.kh; ++i) {
          const T* src =
              in + static_cast<std::size_t>(c) * f.plane + static_cast<std::size_t>(i) * f.row + q0;
          for (int j = 0; j < f.kw; ++j, w += KB) {
            V xv[B];
#pragma GCC unroll 8
            for (int b = 0; b < B; ++b) xv[b] = S::load(src + j + b * L);
#pragma GCC unroll 8
            for (int kk = 0; kk < KB; ++kk) {
              const V wv = S::splat(w[kk]);
#pragma GCC unroll 8
              for (int b = 0; b < B; ++b) acc[kk][b] += wv * xv[b];
            }
          }
        }
      }
#pragma GCC unroll 8
      for (int kk = 0; kk < KB; ++kk)
#pragma GCC unroll 8
        for (int b = 0; b < B; ++b)
          S::store(yb + static_cast<std::size_t>(kk) * f.q_blocked + q0 + b * L, acc[kk][b]);
    }
  }
}

template <class T>
struct ConvLayouts {
  Flat fwd, bwd;  // forward (and weight gradient) and backward-data correlations
  std::size_t head = 0, slice = 0;
};

template <class T>
ConvLayouts<T> layouts(const Conv2dGeom& g) {
  ConvLayouts<T> l;
  l.fwd = make_flat<T>(g.c, g.k, g.kh, g.kw, g.out_h, g.out_w);
  l.bwd = make_flat<T>(g.k, g.c, g.kh, g.kw, g.h, g.w);
  const int kg = ceil_div(g.k, kGradChannelBlock) * kGradChannelBlock;
  const int taps = g.c * g.kh * g.kw;
  const std::size_t grad_taps = round_up(taps, kGradTapBlock);
  l.head = l.fwd.weight_elems > l.bwd.weight_elems ? l.fwd.weight_elems : l.bwd.weight_elems;
  // Forward: padded input, flattened output, then 2k doubles of per-channel sums (4k of T).
  const std::size_t fwd = l.fwd.in_elems + round_up(l.fwd.out_elems, 16) +
                          round_up(4 * static_cast<std::size_t>(g.k), 16);
  const std::size_t bwd = l.bwd.in_elems + round_up(l.bwd.out_elems, 16);
  const std::size_t grad =
      l.fwd.in_elems + round_up(static_cast<std::size_t>(kg) * l.fwd.q_blocked, 16) +
      static_cast<std::size_t>(kg) * grad_taps * Simd<T>::lanes + round_up(g.k, 16);
  l.slice = fwd > bwd ? fwd : bwd;
  if (grad > l.slice) l.slice = grad;
  return l;
}

template <class T>
std::size_t workspace(const Conv2dGeom& g, int threads) {
  const ConvLayouts<T> l = layouts<T>(g);
  return l.head + l.slice * static_cast<std::size_t>(team_size(threads));
}

// Also assigns sum[k] and sumsq[k] over (n, out_h, out_w) of y when `sum` is not nullptr (the
// batch-norm statistics, taken while each sample's output is still in cache; double per thread,
// added over threads in a fixed order).
template <class T>
void forward_impl(const Conv2dGeom& g, const T* x, const T* weight, const T* bias, T* y, T* sum,
                  T* sumsq, T* ws, int threads) {
  const ConvLayouts<T> l = layouts<T>(g);
  const Flat& f = l.fwd;
  const int taps = g.c * g.kh * g.kw;
  // wt[ob][tap][kk] = weight[ob*KB + kk][tap]: one block's weights for a tap are adjacent.
  T* wt = ws;
  for (int ob = 0; ob < f.out_blocks; ++ob)
    for (int t = 0; t < taps; ++t)
      for (int kk = 0; kk < kChannelBlock; ++kk) {
        const int k = ob * kChannelBlock + kk;
        wt[(static_cast<std::size_t>(ob) * taps + t) * kChannelBlock + kk] =
            k < g.k ? weight[static_cast<std::size_t>(k) * taps + t] : T(0);
      }
  const std::size_t x_stride = static_cast<std::size_t>(g.c) * g.h * g.w;
  const std::size_t ohw = static_cast<std::size_t>(g.out_h) * g.out_w;
  int used = 1;
#pragma omp parallel num_threads(team_size(threads))
  {
    int s0, s1;
    split(g.n, omp_get_thread_num(), omp_get_num_threads(), &s0, &s1);
    T* padded = ws + l.head + l.slice * omp_get_thread_num();
    T* flat = padded + f.in_elems;
    double* sums = reinterpret_cast<double*>(flat + round_up(f.out_elems, 16));
    for (int k = 0; k < 2 * g.k; ++k) sums[k] = 0;
    for (int s = s0; s < s1; ++s) {
      pad_planes(f, x + s * x_stride, g.h, g.w, g.pad_h, g.pad_w, padded);
      correlate(f, padded, wt, flat);
      T* ys = y + static_cast<std::size_t>(s) * g.k * ohw;
      for (int k = 0; k < g.k; ++k) {
        const T b = bias ? bias[k] : T(0);
        double s1k = 0, s2k = 0;
        for (int oy = 0; oy < g.out_h; ++oy) {
          const T* src = flat + static_cast<std::size_t>(k) * f.q_blocked +
                         static_cast<std::size_t>(oy) * f.row;
          T* dst = ys + k * ohw + static_cast<std::size_t>(oy) * g.out_w;
          if (sum) {
            for (int ox = 0; ox < g.out_w; ++ox) {
              const T v = src[ox] + b;
              dst[ox] = v;
              s1k += v;
              s2k += static_cast<double>(v) * v;
            }
          } else {
            for (int ox = 0; ox < g.out_w; ++ox) dst[ox] = src[ox] + b;
          }
        }
        sums[k] += s1k;
        sums[g.k + k] += s2k;
      }
    }
#pragma omp single
    used = omp_get_num_threads();
  }
  if (!sum) return;
  for (int k = 0; k < g.k; ++k) {
    double s1k = 0, s2k = 0;
    for (int th = 0; th < used; ++th) {
      const double* sums = reinterpret_cast<const double*>(ws + l.head + l.slice * th + f.in_elems +
                                                           round_up(f.out_elems, 16));
      s1k += sums[k];
      s2k += sums[g.k + k];
    }
    sum[k] = static_cast<T>(s1k);
    sumsq[k] = static_cast<T>(s2k);
  }
}

template <class T>
void forward(const Conv2dGeom& g, const T* x, const T* weight, const T* bias, T* y, T* ws,
             int threads) {
  forward_impl<T>(g, x, weight, bias, y, nullptr, nullptr, ws, threads);
}

template <class T>
void forward_stats(const Conv2dGeom& g, const T* x, const T* weight, const T* bias, T* y, T* sum,
                   T* sumsq, T* ws, int threads) {
  forward_impl<T>(g, x, weight, bias, y, sum, sumsq, ws, threads);
}

template <class T>
void backward_data(const Conv2dGeom& g, const T* dy, const T* weight, T* dx, T* ws, int threads) {
  const ConvLayouts<T> l = layouts<T>(g);
  const Flat& f = l.bwd;
  const int taps = g.c * g.kh * g.kw, btaps = g.k * g.kh * g.kw;
  const int khw = g.kh * g.kw;
  // The transposed, flipped kernel: wt[cb][(k, i', j')][cc] = weight[k][cb*KB +
  // cc][kh-1-i'][kw-1-j'].
  T* wt = ws;
  for (int cb = 0; cb < f.out_blocks; ++cb)
    for (int k = 0; k < g.k; ++k)
      for (int t = 0; t < khw; ++t)
        for (int cc = 0; cc < kChannelBlock; ++cc) {
          const int c = cb * kChannelBlock + cc;
          wt[(static_cast<std::size_t>(cb) * btaps + k * khw + t) * kChannelBlock + cc] =
              c < g.c ? weight[static_cast<std::size_t>(k) * taps + c * khw + (khw - 1 - t)] : T(0);
        }
  const std::size_t x_stride = static_cast<std::size_t>(g.c) * g.h * g.w;
  const std::size_t hw = static_cast<std::size_t>(g.h) * g.w;
  const std::size_t y_stride = static_cast<std::size_t>(g.k) * g.out_h * g.out_w;
#pragma omp parallel num_threads(team_size(threads))
  {
    int s0, s1;
    split(g.n, omp_get_thread_num(), omp_get_num_threads(), &s0, &s1);
    T* padded = ws + l.head + l.slice * omp_get_thread_num();
    T* flat = padded + f.in_elems;
    for (int s = s0; s < s1; ++s) {
      // dx[y] = sum_i w[i] dy[y + pad - i]: dy padded by kh-1-pad on top reads it as a
      // correlation with the flipped kernel.
      pad_planes(f, dy + s * y_stride, g.out_h, g.out_w, g.kh - 1 - g.pad_h, g.kw - 1 - g.pad_w,
                 padded);
      correlate(f, padded, wt, flat);
      T* dxs = dx + s * x_stride;
      for (int c = 0; c < g.c; ++c)
        for (int iy = 0; iy < g.h; ++iy) {
          const T* src = flat + static_cast<std::size_t>(c) * f.q_blocked +
                         static_cast<std::size_t>(iy) * f.row;
          T* dst = dxs + c * hw + static_cast<std::size_t>(iy) * g.w;
          for (int ix = 0; ix < g.w; ++ix) dst[ix] = src[ix];
        }
    }
  }
}

template <class T>
void backward_weights(const Conv2dGeom& g, const T* x, const T* dy, T* dweight, T* dbias, T* ws,
                      int threads) {
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int L = S::lanes, KB = kGradChannelBlock, TB = kGradTapBlock;
  const ConvLayouts<T> l = layouts<T>(g);
  const Flat& f = l.fwd;
  const int taps = g.c * g.kh * g.kw;
  const int grad_taps = static_cast<int>(round_up(taps, TB));
  const int kg = ceil_div(g.k, KB) * KB;
  const std::size_t dy_elems = round_up(static_cast<std::size_t>(kg) * f.q_blocked, 16);
  const std::size_t part_elems = static_cast<std::size_t>(kg) * grad_taps * L;
  const std::size_t x_stride = static_cast<std::size_t>(g.c) * g.h * g.w;
  const std::size_t ohw = static_cast<std::size_t>(g.out_h) * g.out_w;
  const int team = team_size(threads);
  int used = 1;
  // Where tap t = (c, i, j) reads, relative to the output position.
  const auto tap_offset = [&](int t) {
    if (t >= taps) return 0;  // padding taps of the last block: computed, never kept
    const int c = t / (g.kh * g.kw), i = t / g.kw % g.kh, j = t % g.kw;
    return c * f.plane + i * f.row + j;
  };
#pragma omp parallel num_threads(team)
  {
    const int th = omp_get_thread_num();
#pragma omp single
    used = omp_get_num_threads();
    int s0, s1;
    split(g.n, th, omp_get_num_threads(), &s0, &s1);
    T* padded = ws + l.head + l.slice * th;
    T* dyflat = padded + f.in_elems;
    T* part = dyflat + dy_elems;
    T* db = part + part_elems;
    zero(part, part_elems);
    zero(db, g.k);
    // Junk columns and the channels past k stay zero, so they add nothing.
    zero(dyflat, dy_elems);
    for (int s = s0; s < s1; ++s) {
      pad_planes(f, x + s * x_stride, g.h, g.w, g.pad_h, g.pad_w, padded);
      const T* dys = dy + static_cast<std::size_t>(s) * g.k * ohw;
      for (int k = 0; k < g.k; ++k) {
        T bsum = 0;
        for (int oy = 0; oy < g.out_h; ++oy) {
          const T* src = dys + k * ohw + static_cast<std::size_t>(oy) * g.out_w;
          T* dst = dyflat + static_cast<std::size_t>(k) * f.q_blocked +
                   static_cast<std::size_t>(oy) * f.row;
          for (int ox = 0; ox < g.out_w; ++ox) {
            dst[ox] = src[ox];
            bsum += src[ox];
          }
        }
        db[k] += bsum;
      }
      for (int kb = 0; kb < kg; kb += KB) {
        for (int t0 = 0; t0 < grad_taps; t0 += TB) {
          int off[TB];
#pragma GCC unroll 8
          for (int tt = 0; tt < TB; ++tt) off[tt] = tap_offset(t0 + tt);
          V acc[KB][TB];
#pragma GCC unroll 8
          for (int kk = 0; kk < KB; ++kk)
#pragma GCC unroll 8
            for (int tt = 0; tt < TB; ++tt) acc[kk][tt] = V{};
          const T* dyb = dyflat + static_cast<std::size_t>(kb) * f.q_blocked;
          for (int q = 0; q < f.q_blocked; q += L) {
            V xv[TB];
#pragma GCC unroll 8
            for (int tt = 0; tt < TB; ++tt) xv[tt] = S::load(padded + off[tt] + q);
#pragma GCC unroll 8
            for (int kk = 0; kk < KB; ++kk) {
              const V d = S::load(dyb + static_cast<std::size_t>(kk) * f.q_blocked + q);
#pragma GCC unroll 8
              for (int tt = 0; tt < TB; ++tt) acc[kk][tt] += d * xv[tt];
            }
          }
#pragma GCC unroll 8
          for (int kk = 0; kk < KB; ++kk)
#pragma GCC unroll 8
            for (int tt = 0; tt < TB; ++tt) {
              T* p = part + ((static_cast<std::size_t>(kb) + kk) * grad_taps + t0 + tt) * L;
              S::store(p, S::load(p) + acc[kk][tt]);
            }
        }
      }
    }
  }
  // Fixed-order sum of the per-thread partials (threads with no samples contributed zeros).
  for (int k = 0; k < g.k; ++k)
    for (int t = 0; t < taps; ++t) {
      T sum = 0;
      for (int th = 0; th < used; ++th)
        sum += S::sum(S::load(ws + l.head + l.slice * th + f.in_elems + dy_elems +
                              (static_cast<std::size_t>(k) * grad_taps + t) * L));
      dweight[static_cast<std::size_t>(k) * taps + t] = sum;
    }
  if (dbias) {
    for (int k = 0; k < g.k; ++k) {
      T sum = 0;
      for (int th = 0; th < used; ++th)
        sum += ws[l.head + l.slice * th + f.in_elems + dy_elems + part_elems + k];
      dbias[k] = sum;
    }
  }
}

}  // namespace

double fma_probe(long iterations) {
  // 12 independent chains of vector FMAs: enough to cover the FMA latency on every x86 core of
  // the last decade (4 cycles x 2-3 pipes), with no loads or stores in the loop.
  using S = Simd<float>;
  using V = S::V;
  constexpr int kChains = 12;
  V acc[kChains];
  V a = S::splat(0.999999f), b = S::splat(1e-7f);
  // Opaque factors, so nothing is folded at compile time. No barrier inside the loop: one on the
  // accumulators kept them in memory, and the probe measured store-to-load latency, not FMAs.
  __asm__ volatile("" : "+x"(a), "+x"(b));
  for (int c = 0; c < kChains; ++c) acc[c] = S::splat(static_cast<float>(c));
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * a + b;
  }
  float sink = 0;
  for (int c = 0; c < kChains; ++c) sink += S::sum(acc[c]);
  __asm__ volatile("" : : "x"(sink));
  return 2.0 * S::lanes * kChains * static_cast<double>(iterations);
}

template <class T>
DirectConvKernels<T> direct_conv_kernels() {
  return {&workspace<T>, &forward<T>, &forward_stats<T>, &backward_data<T>, &backward_weights<T>};
}

template DirectConvKernels<float> direct_conv_kernels<float>();
template DirectConvKernels<double> direct_conv_kernels<double>();

}  // namespace mnist::cpu::native::MNIST_NATIVE_ISA
