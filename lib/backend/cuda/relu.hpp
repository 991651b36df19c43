#pragma once
// ReLU over n contiguous floats (x and y may alias; so may dy and dx).

#include <cuda_runtime.h>

#include <cstddef>

namespace mnist::cuda {

void relu_forward(cudaStream_t stream, std::size_t n, const float* x, float* y);  // assigns y
// Assigns dx = dy where y > 0, else 0 (y is the forward output).
void relu_backward(cudaStream_t stream, std::size_t n, const float* y, const float* dy, float* dx);

}  // namespace mnist::cuda
