#pragma once
// Launch-shape helpers shared by the kernel files (CUDA translation units only).

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

namespace mnist::cuda {

constexpr int kThreads = 256;
// Grid-stride kernels never need more blocks than this to fill an H200 (132 SMs x 16 blocks x 2).
constexpr std::size_t kMaxGridBlocks = 4224;

// Blocks for a grid-stride loop over `n` items with kThreads per block; at least 1 so n = 0 is a
// no-op launch rather than an invalid configuration.
inline unsigned grid_for(std::size_t n) {
  const std::size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<std::size_t>(blocks, 1, kMaxGridBlocks));
}

inline int ceil_div(int a, int b) {
  return (a + b - 1) / b;
}

// Sum of a double over a block of kThreads threads; the result is valid in thread 0 only.
__device__ __forceinline__ double block_sum(double value, double* shared /* [kThreads / 32] */) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_down_sync(0xffffffffu, value, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  value = 0.0;
  if (warp == 0) {
    value = lane < kThreads / 32 ? shared[lane] : 0.0;
    for (int offset = 16; offset > 0; offset /= 2)
      value += __shfl_down_sync(0xffffffffu, value, offset);
  }
  __syncthreads();  // `shared` may be reused by the caller's next block_sum
  return value;
}

}  // namespace mnist::cuda
