#pragma once
// Inverted dropout with counter-based masks; contracts as Backend::dropout_*.
//
// x, y, dy, dx: [n, per_sample]. Element e of the sample at global batch position first_sample + i
// is kept iff uniform01(philox4x32(counter = (step, first_sample + i, e, 0), key).v[0]) >= rate;
// kept values are multiplied by 1/(1 - rate) (computed in T), dropped ones become 0. The mask is a
// pure function of (key, step, global sample, element), so it does not depend on how the batch is
// split between calls, threads or devices. rate must lie in [0, 1).
// Threads: the n samples are split into contiguous ranges.

#include <cstdint>

#include "core/rng.hpp"

namespace mnist::cpu {

// Assigns y.
template <class T>
void dropout_forward(int n, int per_sample, float rate, RngKey key, uint32_t step,
                     uint32_t first_sample, const T* x, T* y, int threads);

// Assigns dx = dy where kept (times 1/(1 - rate)), else 0: the same mask as the forward call.
template <class T>
void dropout_backward(int n, int per_sample, float rate, RngKey key, uint32_t step,
                      uint32_t first_sample, const T* dy, T* dx, int threads);

}  // namespace mnist::cpu
