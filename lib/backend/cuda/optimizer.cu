// Optimizers: one grid-stride loop over the flat buffer, one parameter per thread per iteration;
// every element reads its gradient and state once and writes them once (the whole Adam step fused).
// The per-element arithmetic is backend/optimizer_rule.hpp, shared with the CPU twin; the bias
// corrections 1/(1 - beta^t) are computed once per step in double: on the host (the eager step
// sets the StepScalars every kernel reads), or, for a step captured once and replayed, by the last
// block of the update advancing them on the device with the same function, step_scalars_next.
#include "backend/cuda/optimizer.hpp"

#include <cmath>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/launch.cuh"
#include "backend/optimizer_rule.hpp"

namespace mnist::cuda {
namespace {

// Set by arrive_last (launch.cuh) in the blocks of an update that advances the step's values.
__shared__ int last_block;

// The step's values are read from *s by every thread; with `advance`, the last block to finish
// moves *s on to the next step's: every block has read *s by the time it counts itself in, so the
// advance cannot change what any block used.
__device__ __forceinline__ void advance_after_all(bool advance, unsigned* counter, StepScalars* s,
                                                  float beta1, float beta2, double epsilon,
                                                  bool tensorflow_epsilon) {
  if (!advance || !arrive_last(counter, last_block)) return;
  if (threadIdx.x == 0) *s = step_scalars_next(*s, beta1, beta2, epsilon, tensorflow_epsilon);
  depart_last(counter);
}

__global__ void adam_update_kernel(std::size_t n, std::size_t n_decay, float beta1, float beta2,
                                   float l2, StepScalars* s, bool advance, double epsilon,
                                   bool tensorflow_epsilon, unsigned* counter, float* params,
                                   const float* grads, float* m, float* v) {
  const float lr = s->lr, eps = s->epsilon, c1 = s->c1, c2 = s->c2;
  const DecayRule<float> decay{l2, s->shrink};
  for (const std::size_t i : grid_stride(n)) {
    float p = params[i], mi = m[i], vi = v[i];
    adam_element(i < n_decay, decay, lr, beta1, beta2, eps, c1, c2, p, grads[i], mi, vi);
    params[i] = p;
    m[i] = mi;
    v[i] = vi;
  }
  advance_after_all(advance, counter, s, beta1, beta2, epsilon, tensorflow_epsilon);
}

__global__ void sgd_update_kernel(std::size_t n, std::size_t n_decay, float momentum, bool nesterov,
                                  float l2, StepScalars* s, bool advance, float beta1, float beta2,
                                  double epsilon, bool tensorflow_epsilon, unsigned* counter,
                                  float* params, const float* grads, float* velocity) {
  const float lr = s->lr;
  const DecayRule<float> decay{l2, s->shrink};
  for (const std::size_t i : grid_stride(n)) {
    float p = params[i], vel = velocity[i];
    sgd_element(i < n_decay, decay, lr, momentum, nesterov, p, grads[i], vel);
    params[i] = p;
    velocity[i] = vel;
  }
  advance_after_all(advance, counter, s, beta1, beta2, epsilon, tensorflow_epsilon);
}

__global__ void step_scalars_set_kernel(StepScalars values, StepScalars* s) {
  *s = values;
}

}  // namespace

void adam_update(cudaStream_t stream, std::size_t n, std::size_t n_decay,
                 const OptimizerStep& constants, StepScalars* s, bool advance, float* params,
                 const float* grads, float* m, float* v, unsigned* counter) {
  MNIST_LAUNCH(adam_update_kernel, grid_for(n), kThreads, 0, stream)
  (n, n_decay, constants.beta1, constants.beta2, constants.l2, s, advance,
   constants.configured_epsilon, constants.tensorflow_epsilon, counter, params, grads, m, v);
  MNIST_CUDA_LAUNCH_CHECK(stream, "adam_update_kernel");
}

void sgd_update(cudaStream_t stream, std::size_t n, std::size_t n_decay,
                const OptimizerStep& constants, StepScalars* s, bool advance, float* params,
                const float* grads, float* velocity, unsigned* counter) {
  MNIST_LAUNCH(sgd_update_kernel, grid_for(n), kThreads, 0, stream)
  (n, n_decay, constants.momentum, constants.nesterov, constants.l2, s, advance, constants.beta1,
   constants.beta2, constants.configured_epsilon, constants.tensorflow_epsilon, counter, params,
   grads, velocity);
  MNIST_CUDA_LAUNCH_CHECK(stream, "sgd_update_kernel");
}

// One thread: the values are a few scalars.
void step_scalars_set(cudaStream_t stream, StepScalars* s, const StepScalars& values) {
  MNIST_LAUNCH(step_scalars_set_kernel, 1, 1, 0, stream)(values, s);
  MNIST_CUDA_LAUNCH_CHECK(stream, "step_scalars_set_kernel");
}

}  // namespace mnist::cuda
