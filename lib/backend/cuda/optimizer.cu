// Optimizers: one grid-stride loop over the flat buffer, one parameter per thread per iteration;
// every element reads its gradient and state once and writes them once (the whole Adam step fused).
// The per-element arithmetic is backend/optimizer_rule.hpp, shared with the CPU twin; the bias
// corrections 1/(1 - beta^t) are computed once per step in double: on the host, or, for a step
// captured once and replayed, by one thread advancing the StepScalars on the device with the same
// function (step_scalars_advance_kernel, or the last block of adam_update_advance_kernel), which
// the next step's Adam kernel then reads.
#include "backend/cuda/optimizer.hpp"

#include <cmath>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/launch.cuh"
#include "backend/optimizer_rule.hpp"

namespace mnist::cuda {
namespace {

// Set by arrive_last (launch.cuh) in adam_update_advance_kernel's blocks.
__shared__ int last_block;

// The per-step values come by value, or, when `from` is not null, from the StepScalars there.
__device__ __forceinline__ void adam_loop(std::size_t n, std::size_t n_decay, float lr, float beta1,
                                          float beta2, float epsilon, DecayRule<float> decay,
                                          float c1, float c2, const StepScalars* from,
                                          float* params, const float* grads, float* m, float* v) {
  if (from) {
    lr = from->lr;
    epsilon = from->epsilon;
    c1 = from->c1;
    c2 = from->c2;
    decay.shrink = from->shrink;
  }
  for (const std::size_t i : grid_stride(n)) {
    float p = params[i], mi = m[i], vi = v[i];
    adam_element(i < n_decay, decay, lr, beta1, beta2, epsilon, c1, c2, p, grads[i], mi, vi);
    params[i] = p;
    m[i] = mi;
    v[i] = vi;
  }
}

__global__ void adam_update_kernel(std::size_t n, std::size_t n_decay, float lr, float beta1,
                                   float beta2, float epsilon, DecayRule<float> decay, float c1,
                                   float c2, const StepScalars* from, float* params,
                                   const float* grads, float* m, float* v) {
  adam_loop(n, n_decay, lr, beta1, beta2, epsilon, decay, c1, c2, from, params, grads, m, v);
}

// Adam reading *s, then the step's scalars advanced by the last block: every block has read *s
// by the time it counts itself in, so the advance cannot change what any block used.
__global__ void adam_update_advance_kernel(std::size_t n, std::size_t n_decay, float beta1,
                                           float beta2, float l2, StepScalars* s,
                                           double next_epsilon, bool tensorflow_epsilon,
                                           unsigned* counter, float* params, const float* grads,
                                           float* m, float* v) {
  adam_loop(n, n_decay, 0.0f, beta1, beta2, 0.0f, DecayRule<float>{l2, 1.0f}, 1.0f, 1.0f, s, params,
            grads, m, v);
  if (!arrive_last(counter, last_block)) return;
  if (threadIdx.x == 0) *s = step_scalars_next(*s, beta1, beta2, next_epsilon, tensorflow_epsilon);
  depart_last(counter);
}

__global__ void sgd_update_kernel(std::size_t n, std::size_t n_decay, float lr, float momentum,
                                  bool nesterov, DecayRule<float> decay, float* params,
                                  const float* grads, float* velocity) {
  for (const std::size_t i : grid_stride(n)) {
    float p = params[i], vel = velocity[i];
    sgd_element(i < n_decay, decay, lr, momentum, nesterov, p, grads[i], vel);
    params[i] = p;
    velocity[i] = vel;
  }
}

__global__ void step_scalars_set_kernel(StepScalars values, StepScalars* s) {
  *s = values;
}

__global__ void step_scalars_advance_kernel(float beta1, float beta2, double epsilon,
                                            bool tensorflow_epsilon, StepScalars* s) {
  *s = step_scalars_next(*s, beta1, beta2, epsilon, tensorflow_epsilon);
}

}  // namespace

void adam_update(cudaStream_t stream, std::size_t n, std::size_t n_decay, const OptimizerStep& s,
                 float* params, const float* grads, float* m, float* v) {
  MNIST_LAUNCH(adam_update_kernel, grid_for(n), kThreads, 0, stream)
  (n, n_decay, s.lr, s.beta1, s.beta2, s.epsilon, decay_rule<float>(s),
   static_cast<float>(adam_bias_correction(s.beta1, s.step)),
   static_cast<float>(adam_bias_correction(s.beta2, s.step)), nullptr, params, grads, m, v);
  MNIST_CUDA_LAUNCH_CHECK(stream, "adam_update_kernel");
}

void adam_update(cudaStream_t stream, std::size_t n, std::size_t n_decay,
                 const OptimizerStep& constants, const StepScalars* step, float* params,
                 const float* grads, float* m, float* v) {
  MNIST_LAUNCH(adam_update_kernel, grid_for(n), kThreads, 0, stream)
  (n, n_decay, 0.0f, constants.beta1, constants.beta2, 0.0f, DecayRule<float>{constants.l2, 1.0f},
   1.0f, 1.0f, step, params, grads, m, v);
  MNIST_CUDA_LAUNCH_CHECK(stream, "adam_update_kernel");
}

void adam_update_and_advance(cudaStream_t stream, std::size_t n, std::size_t n_decay,
                             const OptimizerStep& constants, StepScalars* s, float* params,
                             const float* grads, float* m, float* v, double epsilon,
                             bool tensorflow_epsilon, unsigned* counter) {
  MNIST_LAUNCH(adam_update_advance_kernel, grid_for(n), kThreads, 0, stream)
  (n, n_decay, constants.beta1, constants.beta2, constants.l2, s, epsilon, tensorflow_epsilon,
   counter, params, grads, m, v);
  MNIST_CUDA_LAUNCH_CHECK(stream, "adam_update_advance_kernel");
}

// One thread: the values are a few scalars.
void step_scalars_set(cudaStream_t stream, StepScalars* s, const StepScalars& values) {
  MNIST_LAUNCH(step_scalars_set_kernel, 1, 1, 0, stream)(values, s);
  MNIST_CUDA_LAUNCH_CHECK(stream, "step_scalars_set_kernel");
}

void step_scalars_advance(cudaStream_t stream, StepScalars* s, float beta1, float beta2,
                          double epsilon, bool tensorflow_epsilon) {
  MNIST_LAUNCH(step_scalars_advance_kernel, 1, 1, 0, stream)
  (beta1, beta2, epsilon, tensorflow_epsilon, s);
  MNIST_CUDA_LAUNCH_CHECK(stream, "step_scalars_advance_kernel");
}

void sgd_update(cudaStream_t stream, std::size_t n, std::size_t n_decay, const OptimizerStep& s,
                float* params, const float* grads, float* velocity) {
  MNIST_LAUNCH(sgd_update_kernel, grid_for(n), kThreads, 0, stream)
  (n, n_decay, s.lr, s.momentum, s.nesterov, decay_rule<float>(s), params, grads, velocity);
  MNIST_CUDA_LAUNCH_CHECK(stream, "sgd_update_kernel");
}

}  // namespace mnist::cuda
