#pragma once
// Builds a batch from the device-resident dataset.

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/kernel_args.hpp"

namespace mnist::cuda {

// Backend::gather_batch: assigns b.x[i, p] = b.images[indices[i], p] / 255 (float) and
// b.y[i] = b.labels[indices[i]] for i < n, indices = b.ring + (b.step->step % b.ring_steps) * n
// read on the device (b.step nullptr: indices = b.ring). The caller guarantees
// 0 <= indices[i] < num_images (the sampler produces them).
void gather_batch(cudaStream_t stream, const BatchGather& b, int n);

}  // namespace mnist::cuda
