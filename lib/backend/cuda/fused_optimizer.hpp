#pragma once
// Optimizer updates that take their gradient as partial sums (see fused_optimizer.cu); contract:
// Backend::adam_update_partials.

#include <cuda_runtime.h>

#include <cstddef>

#include "backend/kernel_args.hpp"

namespace mnist::cuda {

// grads[i] = partials[0][i] + partials[1][i] + ... (float, in part order), then the Adam step of
// adam_update (optimizer.hpp) with that gradient. partials[parts, n]; assigns grads[n]; updates
// params, m, v in place. One kernel.
void adam_update_partials(cudaStream_t stream, std::size_t n, std::size_t n_decay,
                          const OptimizerStep& s, float* params, const float* partials, int parts,
                          float* grads, float* m, float* v);

}  // namespace mnist::cuda
