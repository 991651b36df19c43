#pragma once
// Batch assembly from the resident dataset; contract as Backend::gather_batch.
//
// images uint8[num_images, pixels], labels uint8[num_images], indices int32[n] (callers guarantee
// 0 <= indices[i] < num_images). Assigns x[n, pixels] = images[indices[i], :] / 255 and
// y[n] = labels[indices[i]]. Threads: contiguous ranges of samples.

#include <cstdint>

namespace mnist::cpu {

template <class T>
void gather_batch(const uint8_t* images, const uint8_t* labels, int pixels, const int32_t* indices,
                  int n, T* x, int32_t* y, int threads);

}  // namespace mnist::cpu
