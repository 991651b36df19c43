#pragma once
// Batch-norm kernels, split so the statistics can be all-reduced between the steps (see backend.hpp
// for the math). x, dy, dx, y: [n, c, hw]; every per-channel array has c floats.

#include <cuda_runtime.h>

#include "backend/cuda/channel_reduce.cuh"
#include "backend/kernel_args.hpp"

namespace mnist::cuda {

// Assigns sum[c] and sumsq[c] (accumulated in double, deterministic).
void batch_norm_stats(cudaStream_t stream, const ChannelGeom& g, const float* x, float* sum,
                      float* sumsq, const ReduceScratch& scratch);
// Assigns mean, invstd; running_mean/var = decay * running + (1 - decay) * batch (unbiased variance
// for running_var; with count <= 1 the biased one, since count/(count-1) is undefined).
void batch_norm_finalize(cudaStream_t stream, int c, double count, const float* sum,
                         const float* sumsq, float epsilon, float decay, float* mean, float* invstd,
                         float* running_mean, float* running_var);
// Assigns mean = running_mean, invstd = 1/sqrt(running_var + epsilon).
void batch_norm_inference_params(cudaStream_t stream, int c, const float* running_mean,
                                 const float* running_var, float epsilon, float* mean,
                                 float* invstd);
// Assigns y = (x - mean) * invstd * gamma + beta (gamma nullptr = 1, beta nullptr = 0).
void batch_norm_apply(cudaStream_t stream, const ChannelGeom& g, const float* x, const float* mean,
                      const float* invstd, const float* gamma, const float* beta, float* y);
// Assigns sum_dy[c] = sum dy and sum_dy_xhat[c] = sum dy * (x - mean) * invstd.
void batch_norm_backward_reduce(cudaStream_t stream, const ChannelGeom& g, const float* dy,
                                const float* x, const float* mean, const float* invstd,
                                float* sum_dy, float* sum_dy_xhat, const ReduceScratch& scratch);
// Assigns dx = gamma * invstd * (dy - sum_dy/count - xhat * sum_dy_xhat/count).
void batch_norm_backward_apply(cudaStream_t stream, const ChannelGeom& g, const float* dy,
                               const float* x, const float* mean, const float* invstd,
                               const float* gamma, const float* sum_dy, const float* sum_dy_xhat,
                               double count, float* dx);

}  // namespace mnist::cuda
