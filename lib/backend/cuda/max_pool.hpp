#pragma once
// Max pooling kernels. x[n, c, h, w] -> y[n, c, out_h, out_w]; argmax int32[n, c, out_h, out_w]
// holds the winning position as a flat index iy * w + ix into the input plane. Padded positions
// never win; ties go to the first position in row-major window order.

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/kernel_args.hpp"

namespace mnist::cuda {

// Assigns y and argmax.
void max_pool_forward(cudaStream_t stream, const PoolGeom& g, const float* x, float* y,
                      int32_t* argmax);
// Assigns all of dx: each input element receives the sum of dy over the outputs it won (0 if none).
void max_pool_backward(cudaStream_t stream, const PoolGeom& g, const float* dy,
                       const int32_t* argmax, float* dx);

}  // namespace mnist::cuda
