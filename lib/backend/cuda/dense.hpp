#pragma once
// Hand-written dense-layer SGEMMs. x[n, in], weight[out, in] (row-major), bias[out], y/dy[n, out].

#include <cuda_runtime.h>

#include <cstddef>

#include "backend/cuda/channel_reduce.cuh"
#include "backend/kernel_args.hpp"

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

// The dense tail's two (FusedKernels::dense_forward_batch_norm, dense_backward_batch_norm), one
// launch each. The largest dense output whose batch norm's backward apply dense_backward_batch_norm
// computes as it stages dy (its features' terms sit in a shared-memory table).
constexpr int kDenseBatchNormFeatures = 128;
// Floats of workspace dense_forward_batch_norm needs (8-byte aligned); never decreases with n.
std::size_t dense_forward_batch_norm_workspace_floats(int n, int in, int out);
// dense_forward, then the batch norm's statistics of y [n, out] (hw = 1) finalized with bn in the
// last block; where the tiles are few, each tile's k is split over several blocks (added in a
// fixed order). counters: the stream's block counters (launch.cuh, arrive_last), one per tile
// and one for the tiles.
void dense_forward_batch_norm(cudaStream_t stream, int n, int in, int out, const float* x,
                              const float* weight, const float* bias, float* y,
                              const BatchNormFinalize& bn, float* workspace, unsigned* counters);
// Floats of workspace dense_backward_batch_norm needs (0 where it does not split the weights'
// sums over the batch); never decreases with n.
std::size_t dense_backward_batch_norm_workspace_floats(int n, int in, int out);
// dense_backward (no bias) of dy = batch_norm_backward_apply(g), computed where it is read, the
// weights' sums split over the batch in a fixed order (workspace and the stream's block counters,
// launch.cuh, one per weight tile). Assigns dweight and, when not nullptr, dx.
// out <= kDenseBatchNormFeatures.
void dense_backward_batch_norm(cudaStream_t stream, int n, int in, int out, const float* x,
                               const BatchNormGradient& g, const float* weight, float* dweight,
                               float* dx, float* workspace, unsigned* counters);
}  // namespace mnist::cuda
