#pragma once
// Small elementwise helpers over n contiguous floats.

#include <cuda_runtime.h>

#include <cstddef>

namespace mnist::cuda {

void fill(cudaStream_t stream, float* dst, std::size_t n, float value);  // assigns dst
void scale(cudaStream_t stream, std::size_t n, float alpha, float* x);   // x *= alpha
void add(cudaStream_t stream, std::size_t n, const float* x, float* y);  // y += x
// Assigns y[i, o] = bias[o] for y[n, out] (used to seed a cuBLAS GEMM with beta = 1).
void broadcast_rows(cudaStream_t stream, int n, int out, const float* bias, float* y);

}  // namespace mnist::cuda
