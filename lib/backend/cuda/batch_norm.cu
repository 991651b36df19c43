// Batch norm. The two reductions (stats, backward_reduce) use channel_reduce.cuh: grid (chunks, c),
// double accumulation, then one thread per channel adds the chunks in order. finalize and
// inference_params are one thread per channel. apply and backward_apply are grid-stride elementwise
// loops that find their channel as (i / hw) % c.
#include "backend/cuda/batch_norm.hpp"

#include "backend/batch_norm_rule.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/launch.cuh"

namespace mnist::cuda {
namespace {

struct StatsValue {
  const float* x;
  __device__ double2 operator()(std::size_t offset, int) const {
    const double v = x[offset];
    return make_double2(v, v * v);
  }
};

struct BackwardValue {
  const float *dy, *x, *mean, *invstd;
  __device__ double2 operator()(std::size_t offset, int ch) const {
    const double d = dy[offset];
    const double xhat = (static_cast<double>(x[offset]) - mean[ch]) * invstd[ch];
    return make_double2(d, d * xhat);
  }
};

struct StoreBoth {
  float *a, *b;
  __device__ void operator()(int ch, double va, double vb) const {
    a[ch] = static_cast<float>(va);
    b[ch] = static_cast<float>(vb);
  }
};

__global__ void batch_norm_finalize_kernel(int c, double count, const float* sum,
                                           const float* sumsq, float epsilon, float decay,
                                           float* mean, float* invstd, float* running_mean,
                                           float* running_var) {
  // The arithmetic is the CPU twin's (backend/batch_norm_rule.hpp), bit for bit.
  for (const std::size_t ch : grid_stride(c))
    batch_norm_finalize_channel(count, static_cast<double>(sum[ch]), static_cast<double>(sumsq[ch]),
                                epsilon, decay, mean[ch], invstd[ch], running_mean[ch],
                                running_var[ch]);
}

__global__ void batch_norm_inference_params_kernel(int c, const float* running_mean,
                                                   const float* running_var, float epsilon,
                                                   float* mean, float* invstd) {
  for (const std::size_t ch : grid_stride(c)) {
    mean[ch] = running_mean[ch];
    invstd[ch] =
        static_cast<float>(batch_norm_invstd(static_cast<double>(running_var[ch]), epsilon));
  }
}

__global__ void batch_norm_apply_kernel(ChannelGeom g, const float* x, const float* mean,
                                        const float* invstd, const float* gamma, const float* beta,
                                        float* y) {
  const std::size_t total = values_per_channel(g) * g.c;
  for (const std::size_t i : grid_stride(total)) {
    const int ch = static_cast<int>((i / g.hw) % g.c);
    const float scale = gamma ? gamma[ch] : 1.0f;
    const float shift = beta ? beta[ch] : 0.0f;
    y[i] = (x[i] - mean[ch]) * invstd[ch] * scale + shift;
  }
}

__global__ void batch_norm_backward_apply_kernel(ChannelGeom g, const float* dy, const float* x,
                                                 const float* mean, const float* invstd,
                                                 const float* gamma, const float* sum_dy,
                                                 const float* sum_dy_xhat, float inv_count,
                                                 float* dx) {
  const std::size_t total = values_per_channel(g) * g.c;
  for (const std::size_t i : grid_stride(total)) {
    const int ch = static_cast<int>((i / g.hw) % g.c);
    const float xhat = (x[i] - mean[ch]) * invstd[ch];
    const float scale = gamma ? gamma[ch] : 1.0f;
    dx[i] =
        scale * invstd[ch] * (dy[i] - sum_dy[ch] * inv_count - xhat * sum_dy_xhat[ch] * inv_count);
  }
}

}  // namespace

void batch_norm_stats(cudaStream_t stream, const ChannelGeom& g, const float* x, float* sum,
                      float* sumsq, const ReduceScratch& scratch) {
  channel_reduce(stream, g, scratch, StatsValue{x}, StoreBoth{sum, sumsq}, "batch_norm_stats");
}

void batch_norm_finalize(cudaStream_t stream, int c, double count, const float* sum,
                         const float* sumsq, float epsilon, float decay, float* mean, float* invstd,
                         float* running_mean, float* running_var) {
  if (c <= 0) return;
  MNIST_LAUNCH(batch_norm_finalize_kernel, ceil_div(c, kThreads), kThreads, 0, stream)
  (c, count, sum, sumsq, epsilon, decay, mean, invstd, running_mean, running_var);
  MNIST_CUDA_LAUNCH_CHECK(stream, "batch_norm_finalize_kernel");
}

void batch_norm_inference_params(cudaStream_t stream, int c, const float* running_mean,
                                 const float* running_var, float epsilon, float* mean,
                                 float* invstd) {
  if (c <= 0) return;
  MNIST_LAUNCH(batch_norm_inference_params_kernel, ceil_div(c, kThreads), kThreads, 0, stream)
  (c, running_mean, running_var, epsilon, mean, invstd);
  MNIST_CUDA_LAUNCH_CHECK(stream, "batch_norm_inference_params_kernel");
}

void batch_norm_apply(cudaStream_t stream, const ChannelGeom& g, const float* x, const float* mean,
                      const float* invstd, const float* gamma, const float* beta, float* y) {
  MNIST_LAUNCH(batch_norm_apply_kernel, grid_for(g.count() * g.c), kThreads, 0, stream)
  (g, x, mean, invstd, gamma, beta, y);
  MNIST_CUDA_LAUNCH_CHECK(stream, "batch_norm_apply_kernel");
}

void batch_norm_backward_reduce(cudaStream_t stream, const ChannelGeom& g, const float* dy,
                                const float* x, const float* mean, const float* invstd,
                                float* sum_dy, float* sum_dy_xhat, const ReduceScratch& scratch) {
  channel_reduce(stream, g, scratch, BackwardValue{dy, x, mean, invstd},
                 StoreBoth{sum_dy, sum_dy_xhat}, "batch_norm_backward_reduce");
}

void batch_norm_backward_apply(cudaStream_t stream, const ChannelGeom& g, const float* dy,
                               const float* x, const float* mean, const float* invstd,
                               const float* gamma, const float* sum_dy, const float* sum_dy_xhat,
                               double count, float* dx) {
  const float inv_count = count > 0 ? static_cast<float>(1.0 / count) : 0.0f;
  MNIST_LAUNCH(batch_norm_backward_apply_kernel, grid_for(g.count() * g.c), kThreads, 0, stream)
  (g, dy, x, mean, invstd, gamma, sum_dy, sum_dy_xhat, inv_count, dx);
  MNIST_CUDA_LAUNCH_CHECK(stream, "batch_norm_backward_apply_kernel");
}

}  // namespace mnist::cuda
