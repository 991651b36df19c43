#pragma once
// The memory-bound half of a conv -> batch norm -> ReLU -> 2x2 max-pool block, fused (see
// conv_block.cu): the CUDA twin of backend/cpu/native/conv_block.hpp, with its contracts, its mask
// encoding and its arithmetic. Contracts as FusedKernels::bn_relu_pool_*.
//
// x, dx: the convolution's output and its gradient [n, c, h, w]; y, dy: [n, c, h/2, w/2]; mask:
// one byte per pooled value, bits 0-1 the winner's position in its 2x2 window (row-major), bit 2
// set when the winner passed the ReLU (> 0). Every per-channel array has c floats; gamma nullptr
// means 1, beta nullptr 0.

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/channel_reduce.cuh"
#include "backend/kernel_args.hpp"

namespace mnist::cuda {

// True for the pooling these kernels take: 2x2 windows, stride 2, no padding, out = in / 2 (odd
// last rows and columns dropped), at least one pooled value per plane. The CPU twin's rule
// (cpu::native::conv_block_pool_supported).
bool conv_block_supports(const PoolGeom& g);

// Assigns y = max_pool(relu((x - mean) * invstd * gamma + beta)) and mask, bit for bit what the CPU
// twin assigns (y = x * a + b with a = invstd * gamma, b = beta - mean * a, each product and sum
// rounded on its own; ties go to the first window element in row-major order; NaN passes the
// ReLU). One kernel launch.
void bn_relu_pool_forward(cudaStream_t stream, const PoolGeom& g, const float* x, const float* mean,
                          const float* invstd, const float* gamma, const float* beta, float* y,
                          uint8_t* mask);

// With dbn = dy routed to each window's winner where it passed the ReLU (0 elsewhere): assigns
// sum_dy[c] = sum of dbn and sum_dy_xhat[c] = sum of dbn * (x - mean) * invstd. Summed in double
// in a fixed order (the same bits on every run). One kernel launch; its partials take c * chunks
// entries of `scratch` (at most scratch.capacity), its last block counts on `counter`, the
// stream's block counter (launch.cuh, arrive_last).
void bn_relu_pool_backward_reduce(cudaStream_t stream, const PoolGeom& g, const float* dy,
                                  const uint8_t* mask, const float* x, const float* mean,
                                  const float* invstd, float* sum_dy, float* sum_dy_xhat,
                                  unsigned* counter, const ReduceScratch& scratch);

// Assigns all of dx = gamma * invstd * (dbn - sum_dy/count - xhat * sum_dy_xhat/count), as
// batch_norm_backward_apply would on dbn, bit for bit what the CPU twin assigns. One kernel launch.
void bn_relu_pool_backward_apply(cudaStream_t stream, const PoolGeom& g, const float* dy,
                                 const uint8_t* mask, const float* x, const float* mean,
                                 const float* invstd, const float* gamma, const float* sum_dy,
                                 const float* sum_dy_xhat, double count, float* dx);

}  // namespace mnist::cuda
