#pragma once
// Builds a batch from the device-resident dataset.

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/kernel_args.hpp"

namespace mnist::cuda {

// Assigns x[i, p] = images[indices[i], p] / 255 (float) and y[i] = labels[indices[i]] for i < n.
// images: uint8[num_images, pixels], labels: uint8[num_images], indices: int32[n]; the caller
// guarantees 0 <= indices[i] < num_images (the sampler produces them).
void gather_batch(cudaStream_t stream, const uint8_t* images, const uint8_t* labels, int pixels,
                  const int32_t* indices, int n, float* x, int32_t* y);
// The same with indices = ring + (step->step % ring_steps) * n, read on the device.
void gather_batch(cudaStream_t stream, const uint8_t* images, const uint8_t* labels, int pixels,
                  const int32_t* ring, int ring_steps, const StepScalars* step, int n, float* x,
                  int32_t* y);

}  // namespace mnist::cuda
