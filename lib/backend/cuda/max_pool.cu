// Max pooling. Forward: one thread per output element (grid-stride), scanning its window.
// Backward gathers instead of scattering: one thread per INPUT element visits the outputs whose
// window covers it and adds their dy where argmax points back at it. Overlapping windows
// (stride < size) therefore need no atomics, the sum order is fixed, and every dx element is
// written.
#include "backend/cuda/max_pool.hpp"

#include <cfloat>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/launch.cuh"

namespace mnist::cuda {
namespace {

__global__ void max_pool_forward_kernel(PoolGeom g, const float* x, float* y, int32_t* argmax) {
  const std::size_t total = static_cast<std::size_t>(g.n) * g.c * g.out_h * g.out_w;
  for (const std::size_t i : grid_stride(total)) {
    const int ox = static_cast<int>(i % g.out_w), oy = static_cast<int>((i / g.out_w) % g.out_h);
    const std::size_t plane = i / (static_cast<std::size_t>(g.out_w) * g.out_h);  // n * c + ch
    const float* src = x + plane * g.h * g.w;
    float best = -FLT_MAX;
    int best_index = -1;
    for (int r = 0; r < g.size_h; ++r) {
      const int iy = oy * g.stride_h - g.pad_h + r;
      if (iy < 0 || iy >= g.h) continue;
      for (int s = 0; s < g.size_w; ++s) {
        const int ix = ox * g.stride_w - g.pad_w + s;
        if (ix < 0 || ix >= g.w) continue;
        const float v = src[iy * g.w + ix];
        if (best_index < 0 || v > best) {
          best = v;
          best_index = iy * g.w + ix;
        }
      }
    }
    // A window entirely in the padding (pad >= size) has no winner: output 0 and argmax -1, as the
    // CPU twin writes. (It used to write argmax 0, a real pixel, which differed from the oracle;
    // backward only visits windows that cover a pixel, so -1 is never matched there.)
    y[i] = best_index < 0 ? 0.0f : best;
    argmax[i] = best_index;
  }
}

__global__ void max_pool_backward_kernel(PoolGeom g, const float* dy, const int32_t* argmax,
                                         float* dx) {
  const std::size_t total = static_cast<std::size_t>(g.n) * g.c * g.h * g.w;
  for (const std::size_t i : grid_stride(total)) {
    const int ix = static_cast<int>(i % g.w), iy = static_cast<int>((i / g.w) % g.h);
    const std::size_t plane = i / (static_cast<std::size_t>(g.w) * g.h);
    const std::size_t out_base = plane * g.out_h * g.out_w;
    const int self = iy * g.w + ix;
    // Outputs oy with oy*stride - pad <= iy < oy*stride - pad + size.
    const int ty = iy + g.pad_h, tx = ix + g.pad_w;
    const int oy_lo = ty - g.size_h + 1 <= 0 ? 0 : (ty - g.size_h + g.stride_h) / g.stride_h;
    const int ox_lo = tx - g.size_w + 1 <= 0 ? 0 : (tx - g.size_w + g.stride_w) / g.stride_w;
    const int oy_hi = min(g.out_h - 1, ty / g.stride_h), ox_hi = min(g.out_w - 1, tx / g.stride_w);
    float sum = 0.0f;
    for (int oy = oy_lo; oy <= oy_hi; ++oy) {
      for (int ox = ox_lo; ox <= ox_hi; ++ox) {
        const std::size_t o = out_base + oy * g.out_w + ox;
        if (argmax[o] == self) sum += dy[o];
      }
    }
    dx[i] = sum;
  }
}

}  // namespace

void max_pool_forward(cudaStream_t stream, const PoolGeom& g, const float* x, float* y,
                      int32_t* argmax) {
  const std::size_t total = static_cast<std::size_t>(g.n) * g.c * g.out_h * g.out_w;
  MNIST_LAUNCH(max_pool_forward_kernel, grid_for(total), kThreads, 0, stream)(g, x, y, argmax);
  MNIST_CUDA_LAUNCH_CHECK(stream, "max_pool_forward_kernel");
}

void max_pool_backward(cudaStream_t stream, const PoolGeom& g, const float* dy,
                       const int32_t* argmax, float* dx) {
  const std::size_t total = static_cast<std::size_t>(g.n) * g.c * g.h * g.w;
  MNIST_LAUNCH(max_pool_backward_kernel, grid_for(total), kThreads, 0, stream)(g, dy, argmax, dx);
  MNIST_CUDA_LAUNCH_CHECK(stream, "max_pool_backward_kernel");
}

}  // namespace mnist::cuda
