#pragma once
// Launch-shape helpers shared by the kernel files (CUDA translation units only), and the one way
// every .cu file launches a kernel:
//
//   MNIST_LAUNCH(kernel, grid, block, shared_bytes, stream)(args...);
//
// Under nvcc this is kernel<<<grid, block, shared_bytes, stream>>>(args...). In the emulated build
// (MNIST_CUDA_EMULATION, see emulation/README.md) the same source compiles as plain C++ and the
// launch runs on the CPU, every CUDA thread a fiber; the kernel's name and the launch's file and
// line go with it, so an error the emulator detects names the launch that caused it.
// Either way the launch is counted on its stream first (stream_counts.cuh), so a backend reports
// how many kernels a step launched.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "backend/cuda/stream_counts.cuh"

#if defined(MNIST_CUDA_EMULATION)
#define MNIST_LAUNCH(kernel, grid, block, shared_bytes, stream)                            \
  ::mnist::cuda::count_kernel(stream),                                                     \
      ::mnist::cuda::emulation::make_launch(                                               \
          [](const auto&... mnist_launch_args) { kernel(mnist_launch_args...); }, #kernel, \
          __FILE__, __LINE__, (grid), (block), (shared_bytes), (stream))
#else
#define MNIST_LAUNCH(kernel, grid, block, shared_bytes, stream) \
  ::mnist::cuda::count_kernel(stream), kernel<<<(grid), (block), (shared_bytes), (stream)>>>
#endif

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

// The grid-stride loop: `for (const std::size_t i : grid_stride(begin, end))` visits, in this
// thread, i = begin + (global thread index) and then every (total threads in the grid) after it,
// while i < end. With grid_for(end - begin) blocks each thread takes one i or a few; the loop is
// correct for any grid. Indices are std::size_t: buffers may exceed 2^31 elements.
class GridStride {
 public:
  class Iterator {
   public:
    __device__ Iterator(std::size_t i, std::size_t step) : i_(i), step_(step) {}
    __device__ std::size_t operator*() const { return i_; }
    __device__ Iterator& operator++() {
      i_ += step_;
      return *this;
    }
    // "Not yet past the end": the last step may jump beyond `end`, never onto it exactly.
    __device__ bool operator!=(const Iterator& end) const { return i_ < end.i_; }

   private:
    std::size_t i_, step_;
  };
  __device__ GridStride(std::size_t begin, std::size_t end)
      : first_(begin + blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x),
        end_(end),
        step_(static_cast<std::size_t>(gridDim.x) * blockDim.x) {}
  __device__ Iterator begin() const { return Iterator(first_, step_); }
  __device__ Iterator end() const { return Iterator(end_, step_); }

 private:
  std::size_t first_, end_, step_;
};

__device__ __forceinline__ GridStride grid_stride(std::size_t begin, std::size_t end) {
  return GridStride(begin, end);
}
__device__ __forceinline__ GridStride grid_stride(std::size_t n) {
  return GridStride(0, n);
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

// One launch that reduces across its blocks ("last block"): every block writes its partial result,
// then all its threads call arrive_last. It returns true, in every thread, in the one block that
// arrives last: that block alone then reads every block's partial (through a volatile pointer:
// they were written by other blocks) and must call depart_last before it ends. `counter` is an
// unsigned in device memory that is 0 whenever no such kernel runs: CudaBackend owns
// kBlockCounters of them, zeroed when it is made, and depart_last sets one back to 0 for the next
// kernel on the stream (kernels on one stream never overlap, so the counters serve them all and no
// memset precedes a launch). A kernel may count a group of its blocks on another counter
// (`expected` blocks arrive there) before counting the groups' last blocks on the first.
// is_last: an int in the kernel file's shared memory (a namespace-scope __shared__ variable: the
// CUDA emulation cannot place a static of an inline function in its shared section).
constexpr int kBlockCounters = 256;  // 1 KB; a kernel may count its groups or tiles on many
__device__ __forceinline__ bool arrive_last(unsigned* counter, int& is_last, unsigned expected) {
  __threadfence();  // this block's partial is visible to the others before the count says so
  __syncthreads();
  const bool first = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
  if (first) is_last = atomicAdd(counter, 1u) == expected - 1 ? 1 : 0;
  __syncthreads();
  if (is_last) __threadfence();  // the others' partials are read after their counts
  return is_last != 0;
}
__device__ __forceinline__ bool arrive_last(unsigned* counter, int& is_last) {
  return arrive_last(counter, is_last, gridDim.x * gridDim.y * gridDim.z);
}
__device__ __forceinline__ void depart_last(unsigned* counter) {
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) *counter = 0u;
}

}  // namespace mnist::cuda
