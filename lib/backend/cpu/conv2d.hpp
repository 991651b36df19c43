#pragma once
// 2-D convolution (cross-correlation) by im2col + GEMM; contracts as Backend::conv2d_*.
//
// x[n, c, h, w], weight[k, c, kh, kw], bias[k] or nullptr, y/dy[n, k, out_h, out_w] (Conv2dGeom).
// Threads: the batch is split into contiguous chunks of samples, one per thread; each thread
// unfolds its samples one at a time into its own slice of the workspace and runs single-threaded
// GEMMs on it. Weight gradients are summed per thread in the workspace, then added up in a fixed
// order, so results do not depend on timing.

#include <cstddef>

#include "backend/kernel_args.hpp"

namespace mnist::cpu {

// Workspace elements (of T) a call with this geometry and `threads` needs.
std::size_t conv2d_workspace_floats(const Conv2dGeom& g, int threads);

// Assigns y = conv(x, weight) + bias.
template <class T>
void conv2d_forward(const Conv2dGeom& g, const T* x, const T* weight, const T* bias, T* y,
                    T* workspace, int threads);

// Assigns dx[n, c, h, w] = gradient of sum(y * dy) with respect to x.
template <class T>
void conv2d_backward_data(const Conv2dGeom& g, const T* dy, const T* weight, T* dx, T* workspace,
                          int threads);

// Assigns dweight[k, c, kh, kw] and, when not nullptr, dbias[k] (sums over the batch).
template <class T>
void conv2d_backward_weights(const Conv2dGeom& g, const T* x, const T* dy, T* dweight, T* dbias,
                             T* workspace, int threads);

}  // namespace mnist::cpu
