#pragma once
// Batch normalisation in five steps; contracts as Backend::batch_norm_*.
//
// x, y, dy, dx: [n, c, hw] (ChannelGeom); per-channel vectors have c values. Training forward is
// stats -> (optional all-reduce of sum, sumsq) -> finalize -> apply; training backward is
// backward_reduce -> (optional all-reduce) -> backward_apply. Evaluation uses inference_params ->
// apply, and its backward is backward_apply with sum_dy = sum_dy_xhat = 0 (statistics are
// constants). Sums are accumulated in double. Threads: reductions split the channels into
// contiguous ranges (each channel summed by one thread in a fixed order); apply steps split the n*c
// planes.

#include "backend/kernel_args.hpp"

namespace mnist::cpu {

// Assigns sum[c] = sum over (n, hw) of x and sumsq[c] = sum of x^2.
template <class T>
void batch_norm_stats(const ChannelGeom& g, const T* x, T* sum, T* sumsq, int threads);

// From sums over `count` values: assigns mean[c] and invstd[c] = 1/sqrt(var + epsilon) with the
// biased variance var = sumsq/count - mean^2 (clamped at 0); updates running_mean and running_var
// in place as decay*running + (1-decay)*batch, where the batch variance is the unbiased
// var*count/(count-1) (var itself when count <= 1). Computed in double.
template <class T>
void batch_norm_finalize(int c, double count, const T* sum, const T* sumsq, float epsilon,
                         float decay, T* mean, T* invstd, T* running_mean, T* running_var);

// Assigns mean = running_mean and invstd = 1/sqrt(running_var + epsilon).
template <class T>
void batch_norm_inference_params(int c, const T* running_mean, const T* running_var, float epsilon,
                                 T* mean, T* invstd);

// Assigns y = (x - mean) * invstd * gamma + beta (gamma nullptr = 1, beta nullptr = 0).
template <class T>
void batch_norm_apply(const ChannelGeom& g, const T* x, const T* mean, const T* invstd,
                      const T* gamma, const T* beta, T* y, int threads);

// Assigns sum_dy[c] = sum of dy and sum_dy_xhat[c] = sum of dy * (x - mean) * invstd. These are
// also the gradients of beta and gamma.
template <class T>
void batch_norm_backward_reduce(const ChannelGeom& g, const T* dy, const T* x, const T* mean,
                                const T* invstd, T* sum_dy, T* sum_dy_xhat, int threads);

// Assigns dx = gamma * invstd * (dy - sum_dy/count - xhat * sum_dy_xhat/count) with
// xhat = (x - mean) * invstd; count and the sums cover the whole normalisation group.
template <class T>
void batch_norm_backward_apply(const ChannelGeom& g, const T* dy, const T* x, const T* mean,
                               const T* invstd, const T* gamma, const T* sum_dy,
                               const T* sum_dy_xhat, double count, T* dx, int threads);

}  // namespace mnist::cpu
