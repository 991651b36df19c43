#pragma once
// The memory-bound half of a conv -> batch norm -> ReLU -> 2x2 max-pool block, fused: one pass
// forward and two backward instead of the eight full-size passes of the separate layers, and no
// batch-norm or ReLU output kept (the pooled output and one byte per pooled value suffice).
// Contracts as FusedKernels::bn_relu_pool_*; the math is exactly batch_norm_apply -> relu_forward
// -> max_pool_forward and their backward steps (ties: the first window element in row-major order).
//
// x: the convolution's output [n, c, h, w]; y, dy: [n, c, h/2, w/2] (PoolGeom with 2x2 windows,
// stride 2, no padding; odd last rows and columns are dropped, as max pooling does). mask: one byte
// per pooled value, bits 0-1 the winner's position in its window (row-major), bit 2 set when the
// winner passed the ReLU (> 0). Threads: planes (n*c) or channels split into contiguous ranges.

#include <cstdint>

#include "backend/kernel_args.hpp"

namespace mnist::cpu::native {

constexpr uint8_t kWinnerMask = 3, kPassedRelu = 4;

// True for the pooling the fused block handles: 2x2 windows, stride 2, no padding. Inline: the
// CUDA twin (cuda/conv_block.cu) applies the same rule.
inline bool conv_block_pool_supported(const PoolGeom& g) {
  return g.size_h == 2 && g.size_w == 2 && g.stride_h == 2 && g.stride_w == 2 && g.pad_h == 0 &&
         g.pad_w == 0 && g.out_h == g.h / 2 && g.out_w == g.w / 2 && g.out_h >= 1 && g.out_w >= 1;
}

// Assigns y = max_pool(relu((x - mean) * invstd * gamma + beta)) and mask (gamma nullptr = 1,
// beta nullptr = 0).
template <class T>
void bn_relu_pool_forward(const PoolGeom& g, const T* x, const T* mean, const T* invstd,
                          const T* gamma, const T* beta, T* y, uint8_t* mask, int threads);

// With dbn = the gradient reaching the batch-norm output (dy routed to each window's winner where
// it passed the ReLU, 0 elsewhere): assigns sum_dy[c] = sum of dbn and sum_dy_xhat[c] = sum of
// dbn * (x - mean) * invstd, as batch_norm_backward_reduce would.
template <class T>
void bn_relu_pool_backward_reduce(const PoolGeom& g, const T* dy, const uint8_t* mask, const T* x,
                                  const T* mean, const T* invstd, T* sum_dy, T* sum_dy_xhat,
                                  int threads);

// Assigns all of dx[n, c, h, w] = gamma * invstd * (dbn - sum_dy/count - xhat * sum_dy_xhat/count),
// as batch_norm_backward_apply would on dbn.
template <class T>
void bn_relu_pool_backward_apply(const PoolGeom& g, const T* dy, const uint8_t* mask, const T* x,
                                 const T* mean, const T* invstd, const T* gamma, const T* sum_dy,
                                 const T* sum_dy_xhat, double count, T* dx, int threads);

}  // namespace mnist::cpu::native
