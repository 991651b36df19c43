#pragma once
// Inverted dropout with counter-based masks (contract in backend.hpp): element e of row i is kept
// when uniform01(philox4x32(step, first_sample + i, e, 0; key).v[0]) >= rate, and kept values are
// scaled by 1/(1 - rate). x, y, dy, dx: [n, per_sample]; may alias.

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/kernel_args.hpp"
#include "core/rng.hpp"

namespace mnist::cuda {

// The step is step->step (device memory), read when the kernel runs.
void dropout_forward(cudaStream_t stream, int n, int per_sample, float rate, RngKey key,
                     const StepScalars* step, uint32_t first_sample, const float* x,
                     float* y);  // assigns y
void dropout_backward(cudaStream_t stream, int n, int per_sample, float rate, RngKey key,
                      const StepScalars* step, uint32_t first_sample, const float* dy,
                      float* dx);  // assigns dx

}  // namespace mnist::cuda
