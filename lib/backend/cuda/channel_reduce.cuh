#pragma once
// Deterministic per-channel sums over x[n, c, hw]-shaped data (batch-norm statistics and gradients,
// bias gradients), in two passes so that few channels with many values still fill the GPU.
//
// Pass 1 (channel_reduce_partial_kernel): grid (chunks, c). Block (b, ch) walks the values j = b *
// kThreads + t, stepping chunks * kThreads, of channel ch (j indexes (n, hw) in order), accumulates
// two doubles per thread from the functor `f(offset)` (offset into the NCHW buffer), reduces them
// in the block and writes partial[ch * chunks + b]. Pass 2 (channel_reduce_final_kernel): one
// thread per channel adds its chunks in a fixed order and hands the two sums to `store(ch, sum_a,
// sum_b)`. No atomics, so results repeat bit for bit.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/launch.cuh"
#include "backend/kernel_args.hpp"

namespace mnist::cuda {

// ChannelGeom::count() is host-only (kernel_args.hpp is plain C++); kernels use this twin.
__host__ __device__ __forceinline__ std::size_t values_per_channel(const ChannelGeom& g) {
  return static_cast<std::size_t>(g.n) * static_cast<std::size_t>(g.hw);
}

template <class F>
__global__ void __launch_bounds__(kThreads)
    channel_reduce_partial_kernel(ChannelGeom g, int chunks, F f, double2* partial) {
  __shared__ double shared[kThreads / 32];
  const int ch = blockIdx.y;
  const std::size_t count = values_per_channel(g);
  const std::size_t hw = static_cast<std::size_t>(g.hw);
  double a = 0.0, b = 0.0;
  for (std::size_t j = static_cast<std::size_t>(blockIdx.x) * kThreads + threadIdx.x; j < count;
       j += static_cast<std::size_t>(chunks) * kThreads) {
    const std::size_t sample = j / hw, pos = j % hw;
    const double2 v = f((sample * g.c + ch) * hw + pos, ch);
    a += v.x;
    b += v.y;
  }
  a = block_sum(a, shared);
  b = block_sum(b, shared);
  if (threadIdx.x == 0)
    partial[static_cast<std::size_t>(ch) * chunks + blockIdx.x] = make_double2(a, b);
}

template <class Store>
__global__ void channel_reduce_final_kernel(int c, int chunks, const double2* partial,
                                            Store store) {
  for (const std::size_t ch : grid_stride(c)) {
    double a = 0.0, b = 0.0;
    for (int i = 0; i < chunks; ++i) {
      a += partial[static_cast<std::size_t>(ch) * chunks + i].x;
      b += partial[static_cast<std::size_t>(ch) * chunks + i].y;
    }
    store(ch, a, b);
  }
}

// Scratch the backend hands to every reducing launcher: `capacity` double2 values on the device.
struct ReduceScratch {
  double2* partial = nullptr;
  std::size_t capacity = 0;
};

// Runs both passes. About 8 values per thread per chunk, at most 64 chunks, bounded by the scratch.
template <class F, class Store>
void channel_reduce(cudaStream_t stream, const ChannelGeom& g, const ReduceScratch& scratch, F f,
                    Store store, const char* what) {
  if (g.c <= 0) return;
  MNIST_CHECK(static_cast<std::size_t>(g.c) <= scratch.capacity,
              "{}: {} channels exceed the reduction scratch of {} entries", what, g.c,
              scratch.capacity);
  const std::size_t per_chunk = static_cast<std::size_t>(kThreads) * 8;
  std::size_t chunks = (g.count() + per_chunk - 1) / per_chunk;
  chunks = std::clamp<std::size_t>(chunks, 1, std::min<std::size_t>(64, scratch.capacity / g.c));
  MNIST_LAUNCH(channel_reduce_partial_kernel,
               dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(g.c)), kThreads, 0, stream)
  (g, static_cast<int>(chunks), f, scratch.partial);
  MNIST_CUDA_LAUNCH_CHECK(stream, what);
  MNIST_LAUNCH(channel_reduce_final_kernel, ceil_div(g.c, kThreads), kThreads, 0, stream)
  (g.c, static_cast<int>(chunks), scratch.partial, store);
  MNIST_CUDA_LAUNCH_CHECK(stream, what);
}

}  // namespace mnist::cuda
