// Dropout: one grid-stride loop over n * per_sample elements; each element draws its own Philox
// block from (step, global sample, element), so the mask is independent of the launch shape, of the
// device and of how the batch was split between workers. Forward and backward regenerate the same
// mask instead of storing it. The step comes from the step's StepScalars in device memory, where
// every thread reads it (the same kernel eager and in a step captured once and replayed).
#include "backend/cuda/dropout.hpp"

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/launch.cuh"
#include "backend/dropout_mask.hpp"
#include "backend/kernel_args.hpp"

namespace mnist::cuda {
namespace {

// One grid-stride pass: out = in * scale where the mask keeps the element, else 0. Forward and
// backward are the same masked scaling; two kernels keep the <op>_<direction> names.
__device__ __forceinline__ void apply_mask(int n, int per_sample, float rate, float scale,
                                           RngKey key, uint32_t step, uint32_t first_sample,
                                           const float* in, float* out) {
  const std::size_t total = static_cast<std::size_t>(n) * per_sample;
  for (const std::size_t i : grid_stride(total)) {
    const uint32_t row = static_cast<uint32_t>(i / per_sample);
    const uint32_t element = static_cast<uint32_t>(i % per_sample);
    out[i] = dropout_keeps(key, step, first_sample + row, element, rate) ? in[i] * scale : 0.0f;
  }
}

__global__ void dropout_forward_kernel(int n, int per_sample, float rate, float scale, RngKey key,
                                       const StepScalars* step, uint32_t first_sample,
                                       const float* x, float* y) {
  apply_mask(n, per_sample, rate, scale, key, static_cast<uint32_t>(step->step), first_sample, x,
             y);
}

__global__ void dropout_backward_kernel(int n, int per_sample, float rate, float scale, RngKey key,
                                        const StepScalars* step, uint32_t first_sample,
                                        const float* dy, float* dx) {
  apply_mask(n, per_sample, rate, scale, key, static_cast<uint32_t>(step->step), first_sample, dy,
             dx);
}

// rate = 1 drops everything; the scale is then never used, so keep it finite.
float keep_scale(float rate) {
  return rate < 1.0f ? 1.0f / (1.0f - rate) : 0.0f;
}

}  // namespace

void dropout_forward(cudaStream_t stream, int n, int per_sample, float rate, RngKey key,
                     const StepScalars* step, uint32_t first_sample, const float* x, float* y) {
  const std::size_t total = static_cast<std::size_t>(n) * per_sample;
  MNIST_LAUNCH(dropout_forward_kernel, grid_for(total), kThreads, 0, stream)
  (n, per_sample, rate, keep_scale(rate), key, step, first_sample, x, y);
  MNIST_CUDA_LAUNCH_CHECK(stream, "dropout_forward_kernel");
}

void dropout_backward(cudaStream_t stream, int n, int per_sample, float rate, RngKey key,
                      const StepScalars* step, uint32_t first_sample, const float* dy, float* dx) {
  const std::size_t total = static_cast<std::size_t>(n) * per_sample;
  MNIST_LAUNCH(dropout_backward_kernel, grid_for(total), kThreads, 0, stream)
  (n, per_sample, rate, keep_scale(rate), key, step, first_sample, dy, dx);
  MNIST_CUDA_LAUNCH_CHECK(stream, "dropout_backward_kernel");
}

}  // namespace mnist::cuda
