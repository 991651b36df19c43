// Threads: contiguous chunks of samples per thread (see conv2d.hpp). Thread t uses workspace slice
// t: [col: c*kh*kw x out_h*out_w][dweight partial: k*c*kh*kw][dbias partial: k][one zero-padded
// sample: c x padded_h x padded_w], each part padded to 64 bytes.
#include "backend/cpu/conv2d.hpp"

#include <omp.h>

#include <algorithm>

#include "backend/cpu/gemm.hpp"
#include "backend/cpu/parallel.hpp"

namespace mnist::cpu {

namespace {

std::size_t round_up16(std::size_t v) {
  return (v + 15) / 16 * 16;
}

std::size_t col_elems(const Conv2dGeom& g) {
  return static_cast<std::size_t>(g.c) * g.kh * g.kw * g.out_h * g.out_w;
}
// The zero-padded copy of one sample that im2col reads: tall and wide enough for every window
// the output geometry asks for, so the unfolding needs no bounds checks.
int padded_h(const Conv2dGeom& g) {
  return std::max(g.h + 2 * g.pad_h, (g.out_h - 1) * g.stride_h + g.kh);
}
int padded_w(const Conv2dGeom& g) {
  return std::max(g.w + 2 * g.pad_w, (g.out_w - 1) * g.stride_w + g.kw);
}
std::size_t padded_elems(const Conv2dGeom& g) {
  return static_cast<std::size_t>(g.c) * padded_h(g) * padded_w(g);
}

std::size_t slice_elems(const Conv2dGeom& g) {
  const std::size_t patch = static_cast<std::size_t>(g.c) * g.kh * g.kw;
  return round_up16(col_elems(g)) + round_up16(g.k * patch) + round_up16(g.k) +
         round_up16(padded_elems(g));
}
// Where the padded sample sits in a thread's slice (after col, dweight and dbias).
std::size_t padded_offset(const Conv2dGeom& g) {
  return slice_elems(g) - round_up16(padded_elems(g));
}

// col[(ci, i, j), (oy, ox)] = x[ci, oy*sh - ph + i, ox*sw - pw + j], zero outside the image.
// The sample is first copied into `padded` (padded_elems(g), zero border), so each col row is
// a plain strided read: the rows are short (14 or 28 floats in the seed), and per-row bounds
// logic and memcpy/fill calls cost more than the copy itself.
template <class T>
void im2col(const Conv2dGeom& g, const T* x, T* padded, T* col) {
  const int ph = padded_h(g), pw = padded_w(g);
  const std::size_t pplane = static_cast<std::size_t>(ph) * pw;
  std::fill(padded, padded + padded_elems(g), T(0));
  for (int ci = 0; ci < g.c; ++ci) {
    for (int iy = 0; iy < g.h; ++iy) {
      const T* src = x + (static_cast<std::size_t>(ci) * g.h + iy) * g.w;
      T* dst = padded + ci * pplane + static_cast<std::size_t>(iy + g.pad_h) * pw + g.pad_w;
      for (int ix = 0; ix < g.w; ++ix) dst[ix] = src[ix];
    }
  }
  const int ohw = g.out_h * g.out_w;
  for (int ci = 0; ci < g.c; ++ci) {
    const T* plane = padded + ci * pplane;
    for (int i = 0; i < g.kh; ++i) {
      for (int j = 0; j < g.kw; ++j, col += ohw) {
        for (int oy = 0; oy < g.out_h; ++oy) {
          const T* __restrict src = plane + static_cast<std::size_t>(oy * g.stride_h + i) * pw + j;
          T* __restrict row = col + oy * g.out_w;
          if (g.stride_w == 1) {
#pragma omp simd
            for (int ox = 0; ox < g.out_w; ++ox) row[ox] = src[ox];
          } else {
            for (int ox = 0; ox < g.out_w; ++ox) row[ox] = src[ox * g.stride_w];
          }
        }
      }
    }
  }
}

// The adjoint of im2col: dx[ci, y, x] = sum of the col entries that read it. Assigns dx. Sums
// into `padded` (padded_elems(g)) without bounds logic, then keeps the part inside the image.
template <class T>
void col2im(const Conv2dGeom& g, const T* col, T* padded, T* dx) {
  const int ph = padded_h(g), pw = padded_w(g);
  const std::size_t pplane = static_cast<std::size_t>(ph) * pw;
  const int ohw = g.out_h * g.out_w;
  std::fill(padded, padded + padded_elems(g), T(0));
  for (int ci = 0; ci < g.c; ++ci) {
    T* plane = padded + ci * pplane;
    for (int i = 0; i < g.kh; ++i) {
      for (int j = 0; j < g.kw; ++j, col += ohw) {
        for (int oy = 0; oy < g.out_h; ++oy) {
          const T* __restrict row = col + oy * g.out_w;
          T* __restrict dst = plane + static_cast<std::size_t>(oy * g.stride_h + i) * pw + j;
          if (g.stride_w == 1) {
#pragma omp simd
            for (int ox = 0; ox < g.out_w; ++ox) dst[ox] += row[ox];
          } else {
            for (int ox = 0; ox < g.out_w; ++ox) dst[ox * g.stride_w] += row[ox];
          }
        }
      }
    }
  }
  for (int ci = 0; ci < g.c; ++ci) {
    for (int iy = 0; iy < g.h; ++iy) {
      const T* src = padded + ci * pplane + static_cast<std::size_t>(iy + g.pad_h) * pw + g.pad_w;
      T* out = dx + (static_cast<std::size_t>(ci) * g.h + iy) * g.w;
      for (int ix = 0; ix < g.w; ++ix) out[ix] = src[ix];
    }
  }
}

}  // namespace

std::size_t conv2d_workspace_floats(const Conv2dGeom& g, int threads) {
  return slice_elems(g) * static_cast<std::size_t>(resolve_threads(threads));
}

template <class T>
void conv2d_forward(const Conv2dGeom& g, const T* x, const T* weight, const T* bias, T* y,
                    T* workspace, int threads) {
  const int patch = g.c * g.kh * g.kw;
  const int ohw = g.out_h * g.out_w;
  const std::size_t x_stride = static_cast<std::size_t>(g.c) * g.h * g.w;
  const std::size_t y_stride = static_cast<std::size_t>(g.k) * ohw;
  const int team = resolve_threads(threads);
#pragma omp parallel num_threads(team)
  {
    std::size_t s0, s1;
    split_range(g.n, omp_get_thread_num(), omp_get_num_threads(), &s0, &s1);
    T* col = workspace + slice_elems(g) * omp_get_thread_num();
    T* padded = col + padded_offset(g);
    for (std::size_t s = s0; s < s1; ++s) {
      T* ys = y + s * y_stride;
      // Start from the bias so the GEMM only accumulates into y.
      for (int kk = 0; kk < g.k; ++kk)
        std::fill(ys + kk * ohw, ys + (kk + 1) * ohw, bias ? bias[kk] : T(0));
      im2col(g, x + s * x_stride, padded, col);
      gemm<T>(false, false, g.k, ohw, patch, T(1), weight, patch, col, ohw, T(1), ys, ohw);
    }
  }
}

template <class T>
void conv2d_backward_data(const Conv2dGeom& g, const T* dy, const T* weight, T* dx, T* workspace,
                          int threads) {
  const int patch = g.c * g.kh * g.kw;
  const int ohw = g.out_h * g.out_w;
  const std::size_t x_stride = static_cast<std::size_t>(g.c) * g.h * g.w;
  const std::size_t y_stride = static_cast<std::size_t>(g.k) * ohw;
  const int team = resolve_threads(threads);
#pragma omp parallel num_threads(team)
  {
    std::size_t s0, s1;
    split_range(g.n, omp_get_thread_num(), omp_get_num_threads(), &s0, &s1);
    T* col = workspace + slice_elems(g) * omp_get_thread_num();
    T* padded = col + padded_offset(g);
    for (std::size_t s = s0; s < s1; ++s) {
      // dcol[patch, ohw] = weight^T[patch, k] * dy[k, ohw], then fold back onto the image.
      gemm<T>(true, false, patch, ohw, g.k, T(1), weight, patch, dy + s * y_stride, ohw, T(0), col,
              ohw);
      col2im(g, col, padded, dx + s * x_stride);
    }
  }
}

template <class T>
void conv2d_backward_weights(const Conv2dGeom& g, const T* x, const T* dy, T* dweight, T* dbias,
                             T* workspace, int threads) {
  const int patch = g.c * g.kh * g.kw;
  const int ohw = g.out_h * g.out_w;
  const std::size_t x_stride = static_cast<std::size_t>(g.c) * g.h * g.w;
  const std::size_t y_stride = static_cast<std::size_t>(g.k) * ohw;
  const std::size_t dw_elems = static_cast<std::size_t>(g.k) * patch;
  const std::size_t slice = slice_elems(g);
  const std::size_t dw_offset = round_up16(col_elems(g));
  const std::size_t db_offset = dw_offset + round_up16(dw_elems);
  const int team = resolve_threads(threads);
  int used = 1;
#pragma omp parallel num_threads(team)
  {
    const int t = omp_get_thread_num();
#pragma omp single
    used = omp_get_num_threads();
    std::size_t s0, s1;
    split_range(g.n, t, omp_get_num_threads(), &s0, &s1);
    T* col = workspace + slice * t;
    T* dw = col + dw_offset;
    T* db = col + db_offset;
    T* padded = col + padded_offset(g);
    std::fill(dw, dw + dw_elems, T(0));
    std::fill(db, db + g.k, T(0));
    for (std::size_t s = s0; s < s1; ++s) {
      const T* dys = dy + s * y_stride;
      im2col(g, x + s * x_stride, padded, col);
      // dw[k, patch] += dy[k, ohw] * col^T[ohw, patch]
      gemm<T>(false, true, g.k, patch, ohw, T(1), dys, ohw, col, ohw, T(1), dw, patch);
      for (int kk = 0; kk < g.k; ++kk) {
        T sum = 0;
        for (int p = 0; p < ohw; ++p) sum += dys[kk * ohw + p];
        db[kk] += sum;
      }
    }
  }
  // Fixed-order sum of the per-thread partials (threads with no samples contributed zeros).
  for (std::size_t e = 0; e < dw_elems; ++e) {
    T sum = 0;
    for (int t = 0; t < used; ++t) sum += workspace[slice * t + dw_offset + e];
    dweight[e] = sum;
  }
  if (dbias) {
    for (int kk = 0; kk < g.k; ++kk) {
      T sum = 0;
      for (int t = 0; t < used; ++t) sum += workspace[slice * t + db_offset + kk];
      dbias[kk] = sum;
    }
  }
}

#define MNIST_INSTANTIATE(T)                                                                     \
  template void conv2d_forward<T>(const Conv2dGeom&, const T*, const T*, const T*, T*, T*, int); \
  template void conv2d_backward_data<T>(const Conv2dGeom&, const T*, const T*, T*, T*, int);     \
  template void conv2d_backward_weights<T>(const Conv2dGeom&, const T*, const T*, T*, T*, T*, int);
MNIST_INSTANTIATE(float)
MNIST_INSTANTIATE(double)
#undef MNIST_INSTANTIATE

}  // namespace mnist::cpu
