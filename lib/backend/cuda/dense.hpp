#pragma once
// Hand-written dense-layer SGEMMs. x[n, in], weight[out, in] (row-major), bias[out], y/dy[n, out].

#include <cuda_runtime.h>

#include "backend/cuda/channel_reduce.cuh"

namespace mnist::cuda {

// Assigns y = x weight^T + bias (bias may be nullptr).
void dense_forward(cudaStream_t stream, int n, int in, int out, const float* x, const float* weight,
                   const float* bias, float* y);
// Assigns dx = dy weight.
void dense_backward_data(cudaStream_t stream, int n, int in, int out, const float* dy,
                         const float* weight, float* dx);
// Assigns dweight = dy^T x and, when dbias is not nullptr, dbias[o] = sum over n of dy[:, o].
void dense_backward_weights(cudaStream_t stream, int n, int in, int out, const float* x,
                            const float* dy, float* dweight, float* dbias,
                            const ReduceScratch& scratch);
// dense_backward_weights, then dense_backward_data when dx is not nullptr: both GEMMs in one grid.
void dense_backward(cudaStream_t stream, int n, int in, int out, const float* x, const float* dy,
                    const float* weight, float* dweight, float* dbias, float* dx,
                    const ReduceScratch& scratch);
// Assigns dbias[o] = sum over n of dy[:, o] (shared with the cuBLAS engine).
void dense_backward_bias(cudaStream_t stream, int n, int out, const float* dy, float* dbias,
                         const ReduceScratch& scratch);

}  // namespace mnist::cuda
