// Optimizers: one grid-stride loop over the flat buffer, one parameter per thread per iteration;
// every element reads its gradient and state once and writes them once (the whole Adam step fused).
// The per-element arithmetic is backend/optimizer_rule.hpp, shared with the CPU twin; the bias
// corrections 1/(1 - beta^t) are computed once per step on the host in double.
#include "backend/cuda/optimizer.hpp"

#include <cmath>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/launch.cuh"
#include "backend/optimizer_rule.hpp"

namespace mnist::cuda {
namespace {

__global__ void adam_update_kernel(std::size_t n, std::size_t n_decay, float lr, float beta1,
                                   float beta2, float epsilon, DecayRule<float> decay, float c1,
                                   float c2, float* params, const float* grads, float* m,
                                   float* v) {
  for (const std::size_t i : grid_stride(n)) {
    float p = params[i], mi = m[i], vi = v[i];
    adam_element(i < n_decay, decay, lr, beta1, beta2, epsilon, c1, c2, p, grads[i], mi, vi);
    params[i] = p;
    m[i] = mi;
    v[i] = vi;
  }
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

}  // namespace

void adam_update(cudaStream_t stream, std::size_t n, std::size_t n_decay, const OptimizerStep& s,
                 float* params, const float* grads, float* m, float* v) {
  MNIST_LAUNCH(adam_update_kernel, grid_for(n), kThreads, 0, stream)
  (n, n_decay, s.lr, s.beta1, s.beta2, s.epsilon, decay_rule<float>(s),
   static_cast<float>(adam_bias_correction(s.beta1, s.step)),
   static_cast<float>(adam_bias_correction(s.beta2, s.step)), params, grads, m, v);
  MNIST_CUDA_LAUNCH_CHECK(stream, "adam_update_kernel");
}

void sgd_update(cudaStream_t stream, std::size_t n, std::size_t n_decay, const OptimizerStep& s,
                float* params, const float* grads, float* velocity) {
  MNIST_LAUNCH(sgd_update_kernel, grid_for(n), kThreads, 0, stream)
  (n, n_decay, s.lr, s.momentum, s.nesterov, decay_rule<float>(s), params, grads, velocity);
  MNIST_CUDA_LAUNCH_CHECK(stream, "sgd_update_kernel");
}

}  // namespace mnist::cuda
