// ReLU: one grid-stride loop over the flat buffer, one element per thread per iteration.
#include "backend/cuda/relu.hpp"

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/launch.cuh"

namespace mnist::cuda {
namespace {

__global__ void relu_forward_kernel(std::size_t n, const float* x, float* y) {
  for (const std::size_t i : grid_stride(n)) {
    // NaN passes through: a ReLU that zeroed it would hide a diverged layer from the loss.
    const float v = x[i];
    y[i] = (v > 0.0f || isnan(v)) ? v : 0.0f;
  }
}

__global__ void relu_backward_kernel(std::size_t n, const float* y, const float* dy, float* dx) {
  for (const std::size_t i : grid_stride(n)) {
    dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
  }
}

}  // namespace

void relu_forward(cudaStream_t stream, std::size_t n, const float* x, float* y) {
  MNIST_LAUNCH(relu_forward_kernel, grid_for(n), kThreads, 0, stream)(n, x, y);
  MNIST_CUDA_LAUNCH_CHECK(stream, "relu_forward_kernel");
}

void relu_backward(cudaStream_t stream, std::size_t n, const float* y, const float* dy, float* dx) {
  MNIST_LAUNCH(relu_backward_kernel, grid_for(n), kThreads, 0, stream)(n, y, dy, dx);
  MNIST_CUDA_LAUNCH_CHECK(stream, "relu_backward_kernel");
}

}  // namespace mnist::cuda
