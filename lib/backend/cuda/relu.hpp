#pragma once
// ReLU over n contiguous floats (x and y may alias; so may dy and dx).

#include <cuda_runtime.h>

#include <cstddef>

namespace mnist::cuda {

// Assigns y = max(x, 0); NaN stays NaN (so divergence reaches the loss).
void relu_forward(cudaStream_t stream, std::size_t n, const float* x, float* y);
// Assigns dx = dy where y > 0, else 0 (y is the forward output).
void relu_backward(cudaStream_t stream, std::size_t n, const float* y, const float* dy, float* dx);

}  // namespace mnist::cuda
