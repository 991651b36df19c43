#pragma once
// Rectified linear unit over n values; contracts as Backend::relu_*.
// Threads: the n values are split into contiguous ranges (one call runs single-threaded below
// kParallelMinElements). x and y may be the same buffer; so may dy and dx.

#include <cstddef>

namespace mnist::cpu {

// Assigns y = max(x, 0). NaN stays NaN so that divergence is not hidden.
template <class T>
void relu_forward(std::size_t n, const T* x, T* y, int threads);

// Assigns dx = dy where y > 0, else 0; y is the forward output.
template <class T>
void relu_backward(std::size_t n, const T* y, const T* dy, T* dx, int threads);

}  // namespace mnist::cpu
