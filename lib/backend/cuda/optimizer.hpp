#pragma once
// Optimizer updates over the flat parameter buffer: one kernel each, elementwise.
// params, grads, m, v, velocity: [n]; elements [0, n_decay) are weights and receive weight decay.

#include <cuda_runtime.h>

#include <cstddef>

#include "backend/kernel_args.hpp"

namespace mnist::cuda {

// The step's values (lr, epsilon, bias corrections, decay factor) are read from *s (device
// memory); with `advance`, *s = step_scalars_next(*s, constants.beta1, constants.beta2,
// constants.configured_epsilon, constants.tensorflow_epsilon) in the same launch: the last block to
// finish (counter: the stream's block counter, launch.cuh arrive_last) advances *s after every
// block has read it.
//
// Adam: g' = g + l2 * p (i < n_decay); p *= shrink (i < n_decay); m = b1 m + (1-b1) g';
// v = b2 v + (1-b2) g'^2; p -= lr * (m c1) / (sqrt(v c2) + eps). Updates params, m, v in place.
void adam_update(cudaStream_t stream, std::size_t n, std::size_t n_decay,
                 const OptimizerStep& constants, StepScalars* s, bool advance, float* params,
                 const float* grads, float* m, float* v, unsigned* counter);
// SGD: g' = g + l2 * p (i < n_decay); p *= shrink (i < n_decay); vel = mu vel + g';
// p -= lr * vel, or with Nesterov p -= lr * (g' + mu vel). Updates params, velocity in place.
void sgd_update(cudaStream_t stream, std::size_t n, std::size_t n_decay,
                const OptimizerStep& constants, StepScalars* s, bool advance, float* params,
                const float* grads, float* velocity, unsigned* counter);
// *s = values: one single-thread kernel.
void step_scalars_set(cudaStream_t stream, StepScalars* s, const StepScalars& values);

}  // namespace mnist::cuda
