// Adam on a gradient that arrives as partial sums (per-block or per-producer partials of a fused
// step): one grid-stride loop over the flat buffer; each thread adds its element's partials in
// part order, in float, exactly as the chain add(partials[1], grads), add(partials[2], grads), ...
// would, stores the sum (callers check it for finiteness) and applies optimizer_rule.hpp's Adam
// element update. One kernel instead of parts - 1 additions and the update, and the gradient is
// read once.
#include "backend/cuda/fused_optimizer.hpp"

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/launch.cuh"
#include "backend/optimizer_rule.hpp"

namespace mnist::cuda {
namespace {

__global__ void adam_update_partials_kernel(std::size_t n, std::size_t n_decay, float lr,
                                            float beta1, float beta2, float epsilon,
                                            DecayRule<float> decay, float c1, float c2,
                                            float* params, const float* partials /* [parts, n] */,
                                            int parts, float* grads, float* m, float* v) {
  for (const std::size_t i : grid_stride(n)) {
    float g = partials[i];
    for (int p = 1; p < parts; ++p) g += partials[static_cast<std::size_t>(p) * n + i];
    grads[i] = g;
    float param = params[i], mi = m[i], vi = v[i];
    adam_element(i < n_decay, decay, lr, beta1, beta2, epsilon, c1, c2, param, g, mi, vi);
    params[i] = param;
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace

void adam_update_partials(cudaStream_t stream, std::size_t n, std::size_t n_decay,
                          const OptimizerStep& s, float* params, const float* partials, int parts,
                          float* grads, float* m, float* v) {
  MNIST_LAUNCH(adam_update_partials_kernel, grid_for(n), kThreads, 0, stream)
  (n, n_decay, s.lr, s.beta1, s.beta2, s.epsilon, decay_rule<float>(s),
   static_cast<float>(adam_bias_correction(s.beta1, s.step)),
   static_cast<float>(adam_bias_correction(s.beta2, s.step)), params, partials, parts, grads, m, v);
  MNIST_CUDA_LAUNCH_CHECK(stream, "adam_update_partials_kernel");
}

}  // namespace mnist::cuda
