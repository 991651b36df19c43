#pragma once
// Hand-written convolution kernels: the direct kernels (direct_conv.hpp) for the geometries they
// support, else an implicit GEMM over shared-memory tiles (see conv2d.cu).
// Shapes follow Conv2dGeom: x[n, c, h, w], weight[k, c, kh, kw], bias[k], y/dy[n, k, out_h, out_w].

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "backend/kernel_args.hpp"

namespace mnist::cuda {

// Which kernels run `g`: "direct" (direct_conv.hpp) or "native" (the tiled implicit GEMM).
std::string conv2d_implementation(const Conv2dGeom& g);

// Floats of scratch conv2d_backward_weights and conv2d_forward_stats need (the direct kernels'
// per-block partial sums or the implicit GEMM's split-K partial products); the other two use none.
std::size_t conv2d_workspace_floats(const Conv2dGeom& g);

// Assigns y = conv(x, weight) + bias (bias may be nullptr).
void conv2d_forward(cudaStream_t stream, const Conv2dGeom& g, const float* x, const float* weight,
                    const float* bias, float* y);
// conv2d_forward, then sum[k] and sumsq[k] of y over (n, out_h, out_w) (batch_norm_stats), then,
// when bn is not nullptr, batch_norm_finalize of them (FusedKernels::conv2d_forward_stats). The
// direct kernels do all of it in the convolution's launch (its last block reduces and finalizes,
// using `counter`, the stream's block counter); the implicit GEMM path runs batch_norm_stats and
// batch_norm_finalize after it. workspace: at least conv2d_workspace_floats(g) floats.
struct ReduceScratch;
void conv2d_forward_stats(cudaStream_t stream, const Conv2dGeom& g, const float* x,
                          const float* weight, const float* bias, float* y, float* sum,
                          float* sumsq, const BatchNormFinalize* bn, unsigned* counter,
                          float* workspace, const ReduceScratch& scratch);
// Assigns dx[n, c, h, w] = transposed convolution of dy with weight.
void conv2d_backward_data(cudaStream_t stream, const Conv2dGeom& g, const float* dy,
                          const float* weight, float* dx);
// Assigns dweight[k, c, kh, kw] = sum over (n, out_h, out_w) of dy * x-patch, and dbias[k] = sum of
// dy when dbias is not nullptr. workspace: at least conv2d_workspace_floats(g) floats. counters:
// the stream's block counters (launch.cuh), on which the direct kernels add their blocks' sums.
void conv2d_backward_weights(cudaStream_t stream, const Conv2dGeom& g, const float* x,
                             const float* dy, float* dweight, float* dbias, unsigned* counters,
                             float* workspace, const ReduceScratch& scratch);
// conv2d_backward_weights, then conv2d_backward_data when dx is not nullptr; the direct kernels
// run both directions in one grid (direct_conv2d_backward).
void conv2d_backward(cudaStream_t stream, const Conv2dGeom& g, const float* x, const float* dy,
                     const float* weight, float* dweight, float* dbias, float* dx,
                     unsigned* counters, float* workspace, const ReduceScratch& scratch);

}  // namespace mnist::cuda
