// Dispatch: geometries direct_conv_supports() accepts (stride 1, the small channel counts of the
// seed networks) run the direct kernels of direct_conv.cu; every other one runs the implicit GEMM
// below. The bias gradient is the same channel reduction for both.
//
// Convolution as implicit GEMM: the im2col matrix is never materialised; the B-operand loader of
// tiled_gemm.cuh computes each patch element's address (zero in the padding) on the fly.
// clang-format off
//   pass              product                                                  grid
//   forward           C[k, (n,oy,ox)] = W[k, (c,r,s)]    x X[(c,r,s), (n,oy,ox)]   N/64 x K/64
//   backward_data     C[c, (n,iy,ix)] = W^T[c, (k,r,s)]  x dY[(k,r,s), (n,iy,ix)]  N/64 x C/64
//   backward_weights  C[k, (c,r,s)]   = dY[k, (n,oy,ox)] x X[(n,oy,ox), (c,r,s)]   tiles x splits
// clang-format on
// backward_weights has a tiny C (k x c*kh*kw) and a huge reduction (n*out_h*out_w), so it splits
// the reduction over grid.z: each split writes its partial tile into the workspace and
// conv2d_backward_weights_reduce_kernel adds the splits in a fixed order (deterministic, no
// atomics). backward_data gathers: input pixel (iy, ix) receives dY at oy = (iy + pad - r) / stride
// only where that division is exact and in range, so every dx element is written exactly once.
#include "backend/cuda/conv2d.hpp"

#include <algorithm>

#include "backend/cuda/batch_norm.hpp"
#include "backend/cuda/channel_reduce.cuh"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/direct_conv.hpp"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/tiled_gemm.cuh"

namespace mnist::cuda {
namespace {

// Reduction splits for backward_weights: enough blocks to fill the GPU (about 512), each reducing
// at least 256 values.
int weight_splits(const Conv2dGeom& g) {
  const long long reduction = static_cast<long long>(g.n) * g.out_h * g.out_w;
  const long long tiles =
      static_cast<long long>(ceil_div(g.k, kTileM)) * ceil_div(g.c * g.kh * g.kw, kTileN);
  const long long by_work = std::max(1LL, (reduction + 255) / 256);
  const long long by_fill = std::max(1LL, 512 / std::max(1LL, tiles));
  return static_cast<int>(std::min(by_work, by_fill));
}

// x[n, c, oy*stride - pad + r, ox*stride - pad + s], or 0 in the padding. col = (n, oy, ox),
// row = (c, r, s): the im2col element.
__device__ __forceinline__ float patch_value(const Conv2dGeom& g, const float* x, int row,
                                             int col) {
  const int s = row % g.kw, r = (row / g.kw) % g.kh, ci = row / (g.kw * g.kh);
  const int ox = col % g.out_w, oy = (col / g.out_w) % g.out_h, ni = col / (g.out_w * g.out_h);
  const int iy = oy * g.stride_h - g.pad_h + r, ix = ox * g.stride_w - g.pad_w + s;
  if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) return 0.0f;
  return x[((static_cast<std::size_t>(ni) * g.c + ci) * g.h + iy) * g.w + ix];
}

__global__ void __launch_bounds__(kGemmThreads)
    conv2d_forward_kernel(Conv2dGeom g, const float* x, const float* weight, const float* bias,
                          float* y) {
  const int patch = g.c * g.kh * g.kw, plane = g.out_h * g.out_w;
  const int cols = g.n * plane;
  auto load_a = [&](int m, int kk) { return weight[static_cast<std::size_t>(m) * patch + kk]; };
  auto load_b = [&](int kk, int col) { return patch_value(g, x, kk, col); };
  auto store = [&](int m, int col, float v) {
    const int ni = col / plane, p = col % plane;
    y[(static_cast<std::size_t>(ni) * g.k + m) * plane + p] = bias ? v + bias[m] : v;
  };
  gemm_tile(g.k, cols, 0, patch, blockIdx.y, blockIdx.x, load_a, load_b, store);
}

__global__ void __launch_bounds__(kGemmThreads)
    conv2d_backward_data_kernel(Conv2dGeom g, const float* dy, const float* weight, float* dx) {
  const int taps = g.kh * g.kw, reduction = g.k * taps, plane = g.h * g.w;
  const int out_plane = g.out_h * g.out_w;
  auto load_a = [&](int ci, int kk) {  // W^T: row = input channel, kk = (k, r, s)
    const int ko = kk / taps, rs = kk % taps;
    return weight[(static_cast<std::size_t>(ko) * g.c + ci) * taps + rs];
  };
  auto load_b = [&](int kk, int col) {  // dY at the output that tap (r, s) maps onto (iy, ix)
    const int ko = kk / taps, r = (kk % taps) / g.kw, s = kk % g.kw;
    const int ix = col % g.w, iy = (col / g.w) % g.h, ni = col / plane;
    const int ty = iy + g.pad_h - r, tx = ix + g.pad_w - s;
    if (ty < 0 || tx < 0 || ty % g.stride_h != 0 || tx % g.stride_w != 0) return 0.0f;
    const int oy = ty / g.stride_h, ox = tx / g.stride_w;
    if (oy >= g.out_h || ox >= g.out_w) return 0.0f;
    return dy[(static_cast<std::size_t>(ni) * g.k + ko) * out_plane + oy * g.out_w + ox];
  };
  auto store = [&](int ci, int col, float v) {
    const int ni = col / plane, p = col % plane;
    dx[(static_cast<std::size_t>(ni) * g.c + ci) * plane + p] = v;
  };
  gemm_tile(g.c, g.n * plane, 0, reduction, blockIdx.y, blockIdx.x, load_a, load_b, store);
}

__global__ void __launch_bounds__(kGemmThreads)
    conv2d_backward_weights_kernel(Conv2dGeom g, const float* x, const float* dy, int split_len,
                                   float* partial /* [splits, k, c*kh*kw] */) {
  const int patch = g.c * g.kh * g.kw, plane = g.out_h * g.out_w;
  const int reduction = g.n * plane;
  const int k_begin = min(reduction, static_cast<int>(blockIdx.z) * split_len);
  const int k_end = min(reduction, k_begin + split_len);
  float* out = partial + static_cast<std::size_t>(blockIdx.z) * g.k * patch;
  auto load_a = [&](int m, int j) {  // dY[k = m, (n, oy, ox) = j]
    const int ni = j / plane, p = j % plane;
    return dy[(static_cast<std::size_t>(ni) * g.k + m) * plane + p];
  };
  auto load_b = [&](int j, int col) { return patch_value(g, x, col, j); };
  auto store = [&](int m, int col, float v) { out[static_cast<std::size_t>(m) * patch + col] = v; };
  gemm_tile(g.k, patch, k_begin, k_end, blockIdx.y, blockIdx.x, load_a, load_b, store);
}

__global__ void conv2d_backward_weights_reduce_kernel(std::size_t size, int splits,
                                                      const float* partial, float* dweight) {
  for (const std::size_t i : grid_stride(size)) {
    float sum = 0.0f;
    for (int s = 0; s < splits; ++s) sum += partial[s * size + i];
    dweight[i] = sum;
  }
}

// Bias gradient: per output channel, sum of dy over (n, out_h, out_w).
struct DyValue {
  const float* dy;
  __device__ double2 operator()(std::size_t offset, int) const {
    return make_double2(dy[offset], 0.0);
  }
};
struct StoreFirst {
  float* out;
  __device__ void operator()(int ch, double a, double) const { out[ch] = static_cast<float>(a); }
};

}  // namespace

std::string conv2d_implementation(const Conv2dGeom& g) {
  return direct_conv_supports(g) ? "direct" : "native";
}

std::size_t conv2d_workspace_floats(const Conv2dGeom& g) {
  if (direct_conv_supports(g)) return direct_conv_workspace_floats(g);
  return static_cast<std::size_t>(weight_splits(g)) * g.k * g.c * g.kh * g.kw;
}

void conv2d_forward(cudaStream_t stream, const Conv2dGeom& g, const float* x, const float* weight,
                    const float* bias, float* y) {
  if (direct_conv_supports(g)) return direct_conv2d_forward(stream, g, x, weight, bias, y);
  if (g.n == 0 || g.k == 0) return;
  MNIST_LAUNCH(conv2d_forward_kernel, gemm_grid(g.k, g.n * g.out_h * g.out_w), kGemmThreads, 0,
               stream)
  (g, x, weight, bias, y);
  MNIST_CUDA_LAUNCH_CHECK(stream, "conv2d_forward_kernel");
}

void conv2d_forward_stats(cudaStream_t stream, const Conv2dGeom& g, const float* x,
                          const float* weight, const float* bias, float* y, float* sum,
                          float* sumsq, const BatchNormFinalize* bn, unsigned* counter,
                          float* workspace, const ReduceScratch& scratch) {
  if (direct_conv_supports(g)) {
    return direct_conv2d_forward_stats(stream, g, x, weight, bias, y, sum, sumsq, bn, counter,
                                       workspace);
  }
  conv2d_forward(stream, g, x, weight, bias, y);
  batch_norm_stats(stream, ChannelGeom{g.n, g.k, g.out_h * g.out_w}, y, sum, sumsq, scratch);
  if (bn)
    batch_norm_finalize(stream, g.k, bn->count, sum, sumsq, bn->epsilon, bn->decay, bn->mean,
                        bn->invstd, bn->running_mean, bn->running_var);
}

void conv2d_backward_data(cudaStream_t stream, const Conv2dGeom& g, const float* dy,
                          const float* weight, float* dx) {
  if (direct_conv_supports(g)) return direct_conv2d_backward_data(stream, g, dy, weight, dx);
  if (g.n == 0 || g.c == 0) return;
  MNIST_LAUNCH(conv2d_backward_data_kernel, gemm_grid(g.c, g.n * g.h * g.w), kGemmThreads, 0,
               stream)
  (g, dy, weight, dx);
  MNIST_CUDA_LAUNCH_CHECK(stream, "conv2d_backward_data_kernel");
}

void conv2d_backward(cudaStream_t stream, const Conv2dGeom& g, const float* x, const float* dy,
                     const float* weight, float* dweight, float* dbias, float* dx,
                     unsigned* counters, float* workspace, const ReduceScratch& scratch) {
  if (!dx || !direct_conv_supports(g)) {
    conv2d_backward_weights(stream, g, x, dy, dweight, dbias, counters, workspace, scratch);
    if (dx) conv2d_backward_data(stream, g, dy, weight, dx);
    return;
  }
  direct_conv2d_backward(stream, g, x, dy, weight, dweight, dx, counters, workspace);
  if (dbias) {
    const ChannelGeom bias_geom{g.n, g.k, g.out_h * g.out_w};
    channel_reduce(stream, bias_geom, scratch, DyValue{dy}, StoreFirst{dbias},
                   "conv2d_backward_bias");
  }
}

void conv2d_backward_weights(cudaStream_t stream, const Conv2dGeom& g, const float* x,
                             const float* dy, float* dweight, float* dbias, unsigned* counters,
                             float* workspace, const ReduceScratch& scratch) {
  const int patch = g.c * g.kh * g.kw;
  const std::size_t size = static_cast<std::size_t>(g.k) * patch;
  if (direct_conv_supports(g)) {
    direct_conv2d_backward_weights(stream, g, x, dy, dweight, counters, workspace);
  } else if (size > 0) {
    const int splits = weight_splits(g);
    const int reduction = g.n * g.out_h * g.out_w;
    // Whole K tiles per split, so splits never share a tile of the reduction.
    const int split_len = ceil_div(ceil_div(reduction, splits), kTileK) * kTileK;
    MNIST_LAUNCH(conv2d_backward_weights_kernel, gemm_grid(g.k, patch, splits), kGemmThreads, 0,
                 stream)
    (g, x, dy, split_len, workspace);
    MNIST_CUDA_LAUNCH_CHECK(stream, "conv2d_backward_weights_kernel");
    MNIST_LAUNCH(conv2d_backward_weights_reduce_kernel, grid_for(size), kThreads, 0, stream)
    (size, splits, workspace, dweight);
    MNIST_CUDA_LAUNCH_CHECK(stream, "conv2d_backward_weights_reduce_kernel");
  }
  if (dbias) {
    const ChannelGeom bias_geom{g.n, g.k, g.out_h * g.out_w};
    channel_reduce(stream, bias_geom, scratch, DyValue{dy}, StoreFirst{dbias},
                   "conv2d_backward_bias");
  }
}

}  // namespace mnist::cuda
