#pragma once
// The dropout mask rule, written once for the CPU and CUDA twins (which must agree bit for bit):
// element `element` of the sample at global batch position `sample` is kept at step `step` iff
//   uniform01(philox4x32(counter = (step, sample, element, 0), key).v[0]) >= rate,
// and kept values are scaled by 1 / (1 - rate) (inverted dropout).

#include <cstdint>

#include "core/host_device.hpp"
#include "core/rng.hpp"

namespace mnist {

MNIST_HD bool dropout_keeps(RngKey key, uint32_t step, uint32_t sample, uint32_t element,
                            float rate) {
  return uniform01(philox4x32(step, sample, element, 0u, key.k0, key.k1).v[0]) >= rate;
}

}  // namespace mnist
