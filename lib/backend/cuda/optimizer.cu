// Optimizers: one grid-stride loop over the flat buffer, one parameter per thread per iteration;
// every element reads its gradient and state once and writes them once (the whole Adam step fused).
// Bias corrections 1 - beta^t are computed once on the host in double.
#include "backend/cuda/optimizer.hpp"

#include <cmath>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/launch.cuh"

namespace mnist::cuda {
namespace {

__global__ void adam_update_kernel(std::size_t n, std::size_t n_decay, float lr, float beta1,
                                   float beta2, float epsilon, float l2, float decoupled_wd,
                                   float bias_correction1, float bias_correction2, float* params,
                                   const float* grads, float* m, float* v) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const bool decay = i < n_decay;
    const float p = params[i];
    const float g = decay ? grads[i] + l2 * p : grads[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float updated = p - lr * (mi / bias_correction1) / (sqrtf(vi / bias_correction2) + epsilon);
    if (decay) updated -= lr * decoupled_wd * p;
    params[i] = updated;
  }
}

__global__ void sgd_update_kernel(std::size_t n, std::size_t n_decay, float lr, float momentum,
                                  bool nesterov, float l2, float decoupled_wd, float* params,
                                  const float* grads, float* velocity) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const bool decay = i < n_decay;
    const float p = params[i];
    const float g = decay ? grads[i] + l2 * p : grads[i];
    const float vel = momentum * velocity[i] + g;
    velocity[i] = vel;
    float updated = p - lr * (nesterov ? g + momentum * vel : vel);
    if (decay) updated -= lr * decoupled_wd * p;
    params[i] = updated;
  }
}

}  // namespace

void adam_update(cudaStream_t stream, std::size_t n, std::size_t n_decay, const OptimizerStep& s,
                 float* params, const float* grads, float* m, float* v) {
  const double t = static_cast<double>(s.step);
  const float bias_correction1 =
      static_cast<float>(1.0 - std::pow(static_cast<double>(s.beta1), t));
  const float bias_correction2 =
      static_cast<float>(1.0 - std::pow(static_cast<double>(s.beta2), t));
  adam_update_kernel<<<grid_for(n), kThreads, 0, stream>>>(
      n, n_decay, s.lr, s.beta1, s.beta2, s.epsilon, s.l2, s.decoupled_wd, bias_correction1,
      bias_correction2, params, grads, m, v);
  MNIST_CUDA_LAUNCH_CHECK(stream, "adam_update_kernel");
}

void sgd_update(cudaStream_t stream, std::size_t n, std::size_t n_decay, const OptimizerStep& s,
                float* params, const float* grads, float* velocity) {
  sgd_update_kernel<<<grid_for(n), kThreads, 0, stream>>>(
      n, n_decay, s.lr, s.momentum, s.nesterov, s.l2, s.decoupled_wd, params, grads, velocity);
  MNIST_CUDA_LAUNCH_CHECK(stream, "sgd_update_kernel");
}

}  // namespace mnist::cuda
