#pragma once
// Elementwise helpers over flat buffers of n values; contracts as
// Backend::fill/scale/add. Threads: contiguous element ranges; below
// kParallelMinElements the call stays on one thread.

#include <cstddef>

namespace mnist::cpu {

template <class T>
void fill(std::size_t n, T value, T* x, int threads);  // assigns x[i] = value

template <class T>
void scale(std::size_t n, T alpha, T* x, int threads);  // x *= alpha

template <class T>
void add(std::size_t n, const T* x, T* y, int threads);  // y += x

}  // namespace mnist::cpu
