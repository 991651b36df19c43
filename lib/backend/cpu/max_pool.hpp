#pragma once
// Max pooling; contracts as Backend::max_pool_*.
//
// x[n, c, h, w] -> y[n, c, out_h, out_w], argmax int32[n, c, out_h, out_w] holding the flat index
// (iy * w + ix) of the winner inside its input plane. Padded positions never win; among equal
// values the first in row-major window order wins. Threads: the n*c planes are split into
// contiguous ranges.

#include <cstdint>

#include "backend/kernel_args.hpp"

namespace mnist::cpu {

// Assigns y and argmax.
template <class T>
void max_pool_forward(const PoolGeom& g, const T* x, T* y, int32_t* argmax, int threads);

// Assigns all of dx[n, c, h, w]: dy routed to each window's winner (summed where windows overlap),
// zero elsewhere.
template <class T>
void max_pool_backward(const PoolGeom& g, const T* dy, const int32_t* argmax, T* dx, int threads);

}  // namespace mnist::cpu
