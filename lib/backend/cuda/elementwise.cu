// Elementwise helpers: each is one grid-stride loop, one element per thread per iteration.
#include "backend/cuda/elementwise.hpp"

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/launch.cuh"

namespace mnist::cuda {
namespace {

__global__ void fill_forward_kernel(float* dst, std::size_t n, float value) {
  for (const std::size_t i : grid_stride(n)) dst[i] = value;
}

__global__ void scale_forward_kernel(std::size_t n, float alpha, float* x) {
  for (const std::size_t i : grid_stride(n)) x[i] *= alpha;
}

__global__ void add_forward_kernel(std::size_t n, const float* x, float* y) {
  for (const std::size_t i : grid_stride(n)) y[i] += x[i];
}

__global__ void broadcast_rows_forward_kernel(std::size_t total, int out, const float* bias,
                                              float* y) {
  for (const std::size_t i : grid_stride(total)) y[i] = bias[i % out];
}

}  // namespace

void fill(cudaStream_t stream, float* dst, std::size_t n, float value) {
  MNIST_LAUNCH(fill_forward_kernel, grid_for(n), kThreads, 0, stream)(dst, n, value);
  MNIST_CUDA_LAUNCH_CHECK(stream, "fill_forward_kernel");
}

void scale(cudaStream_t stream, std::size_t n, float alpha, float* x) {
  MNIST_LAUNCH(scale_forward_kernel, grid_for(n), kThreads, 0, stream)(n, alpha, x);
  MNIST_CUDA_LAUNCH_CHECK(stream, "scale_forward_kernel");
}

void add(cudaStream_t stream, std::size_t n, const float* x, float* y) {
  MNIST_LAUNCH(add_forward_kernel, grid_for(n), kThreads, 0, stream)(n, x, y);
  MNIST_CUDA_LAUNCH_CHECK(stream, "add_forward_kernel");
}

void broadcast_rows(cudaStream_t stream, int n, int out, const float* bias, float* y) {
  const std::size_t total = static_cast<std::size_t>(n) * out;
  MNIST_LAUNCH(broadcast_rows_forward_kernel, grid_for(total), kThreads, 0, stream)
  (total, out, bias, y);
  MNIST_CUDA_LAUNCH_CHECK(stream, "broadcast_rows_forward_kernel");
}

}  // namespace mnist::cuda
