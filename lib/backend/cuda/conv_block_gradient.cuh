#pragma once
// The batch-norm backward apply of a fused conv block (conv2d -> batch_norm -> relu -> 2x2
// max_pool), element by element: what bn_relu_pool_backward_apply (conv_block.cu) writes to dx,
// written once so that a kernel may also compute an element where it needs it instead of reading
// it from memory (the convolution's backward stages it this way in direct_conv.cu,
// FusedKernels::conv_block_backward), with the same bits.
//
// The element (sample, ch, y, x) of the convolution's output gets
//   d = dy at its 2x2 window when it is the window's winner and passed the ReLU, else 0,
//   dx = k * (d - mean_dy - (x - mean) * invstd * mean_dy_xhat),
// every product and sum rounded on its own, as the CPU twin (backend/cpu/native/conv_block.cpp).

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cpu/native/conv_block.hpp"
#include "backend/kernel_args.hpp"

namespace mnist::cuda {

// One channel's terms of the backward apply, as the CPU twin computes them.
struct ApplyTerms {
  float k, mean_dy, mean_dy_xhat, mean, invstd;
};

__device__ __forceinline__ ApplyTerms apply_terms(int ch, const float* mean, const float* invstd,
                                                  const float* gamma, const float* sum_dy,
                                                  const float* sum_dy_xhat, double count) {
  ApplyTerms t;
  t.k = __fmul_rn(gamma ? gamma[ch] : 1.0f, invstd[ch]);
  t.mean_dy = static_cast<float>(sum_dy[ch] / count);
  t.mean_dy_xhat = static_cast<float>(sum_dy_xhat[ch] / count);
  t.mean = mean[ch];
  t.invstd = invstd[ch];
  return t;
}

// k * (d - mean_dy - (v - mean) * invstd * mean_dy_xhat), rounded step by step as the CPU does.
__device__ __forceinline__ float apply_value(float d, float v, const ApplyTerms& t) {
  const float xhat_term = __fmul_rn(__fmul_rn(__fsub_rn(v, t.mean), t.invstd), t.mean_dy_xhat);
  return __fmul_rn(t.k, __fsub_rn(__fsub_rn(d, t.mean_dy), xhat_term));
}

// A source of the values a convolution's backward stages (its dy), element (sample, ch, y, x) at
// `offset` in [n, c, h, w]: Plain reads them from memory; BlockGradient computes them from the
// block's pooled gradient, mask and convolution output. prepare() runs once per block before the
// first element (every thread calls it; it may hold a barrier).
struct PlainSource {
  const float* p;
  __device__ void prepare(ApplyTerms*) {}
  __device__ float operator()(int, int, int, int, std::size_t offset) const { return p[offset]; }
};

// The largest block BlockGradient takes: its channels' terms sit in a shared-memory table.
constexpr int kBlockGradientChannels = 32;

struct BlockGradientSource {
  ConvBlockGradient b;
  const ApplyTerms* terms = nullptr;  // shared memory, from prepare()
  __device__ void prepare(ApplyTerms* table) {
    for (int ch = threadIdx.x; ch < b.pool.c; ch += blockDim.x)
      table[ch] = apply_terms(ch, b.mean, b.invstd, b.gamma, b.sum_dy, b.sum_dy_xhat, b.count);
    terms = table;
    __syncthreads();
  }
  // Branch-free, so that a caller's batch of elements has all its loads in flight together: the
  // window's mask and gradient are read even where the element gets none (at a clamped window for
  // a dropped odd row or column), then selected.
  __device__ float operator()(int sample, int ch, int y, int x, std::size_t offset) const {
    const int py = y >> 1, px = x >> 1;
    const bool pooled = py < b.pool.out_h && px < b.pool.out_w;  // else a dropped odd row/column
    const std::size_t o = ((static_cast<std::size_t>(sample) * b.pool.c + ch) * b.pool.out_h +
                           min(py, b.pool.out_h - 1)) *
                              b.pool.out_w +
                          min(px, b.pool.out_w - 1);
    const uint8_t mk = b.mask[o];
    const float g = b.dy[o];
    const float v = b.conv_out[offset];
    const int position = ((y & 1) << 1) | (x & 1);
    const bool routed =
        pooled && (mk & cpu::native::kPassedRelu) && (mk & cpu::native::kWinnerMask) == position;
    return apply_value(routed ? g : 0.0f, v, terms[ch]);
  }
};

}  // namespace mnist::cuda
