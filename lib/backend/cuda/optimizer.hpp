#pragma once
// Optimizer updates over the flat parameter buffer: one kernel each, elementwise.
// params, grads, m, v, velocity: [n]; elements [0, n_decay) are weights and receive weight decay.

#include <cuda_runtime.h>

#include <cstddef>

#include "backend/kernel_args.hpp"

namespace mnist::cuda {

// g' = g + l2 * p (i < n_decay); m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
// p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps); then p -= lr * wd * p_old (i <
// n_decay). Updates params, m, v in place.
void adam_update(cudaStream_t stream, std::size_t n, std::size_t n_decay, const OptimizerStep& s,
                 float* params, const float* grads, float* m, float* v);
// Adam with lr, epsilon, bias corrections and decay factor read from `step` (device memory).
void adam_update(cudaStream_t stream, std::size_t n, std::size_t n_decay,
                 const OptimizerStep& constants, const StepScalars* step, float* params,
                 const float* grads, float* m, float* v);
// Adam reading *s as above, then *s = step_scalars_next(*s, constants.beta1, constants.beta2,
// epsilon, tensorflow_epsilon), in one launch: the last block to finish (counter: the stream's
// block counter, launch.cuh arrive_last) advances *s after every block has read it.
void adam_update_and_advance(cudaStream_t stream, std::size_t n, std::size_t n_decay,
                             const OptimizerStep& constants, StepScalars* s, float* params,
                             const float* grads, float* m, float* v, double epsilon,
                             bool tensorflow_epsilon, unsigned* counter);
// *s = values; *s = step_scalars_next(*s, ...): one single-thread kernel each.
void step_scalars_set(cudaStream_t stream, StepScalars* s, const StepScalars& values);
void step_scalars_advance(cudaStream_t stream, StepScalars* s, float beta1, float beta2,
                          double epsilon, bool tensorflow_epsilon);
// g' = g + l2 * p (i < n_decay); vel = mu vel + g'; p -= lr * vel, or with Nesterov
// p -= lr * (g' + mu vel); then p -= lr * wd * p_old (i < n_decay). Updates params, velocity.
void sgd_update(cudaStream_t stream, std::size_t n, std::size_t n_decay, const OptimizerStep& s,
                float* params, const float* grads, float* velocity);

}  // namespace mnist::cuda
