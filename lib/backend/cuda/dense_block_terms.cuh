#pragma once
// The element-wise terms of a dense block (batch_norm -> relu (-> dropout) over a dense layer's
// output, one batch-norm channel per feature), as the fused kernels compute them: the block's own
// kernels (dense_block.cu) and the head that computes the block's output where it reads it
// (dense_head.cu, FusedKernels::dense_block_softmax_cross_entropy). One definition, so both round
// every product and sum as the CPU chain does, and agree with it and with each other bit for bit.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/dropout_mask.hpp"
#include "backend/kernel_args.hpp"

namespace mnist::cuda {

// The dropout that ends the block, as the kernels take it. The step comes from step_from->step
// (device memory) when the kernel runs.
struct DropoutTerms {
  bool on = false;
  float rate = 0.0f, scale = 1.0f;
  RngKey key{};
  const StepScalars* step_from = nullptr;
  uint32_t first_sample = 0;
};

inline DropoutTerms dropout_terms(const DropoutArgs* d) {
  DropoutTerms t;
  if (!d) return t;
  t.on = true;
  t.rate = d->rate;
  // dropout_forward's keep scale, 1 / (1 - rate) in float, as the CPU computes it.
  t.scale = 1.0f / (1.0f - d->rate);
  t.key = d->key;
  t.step_from = d->step_scalars;
  t.first_sample = d->first_sample;
  return t;
}

// 0 when there is no dropout (nothing reads it then).
__device__ __forceinline__ uint32_t dropout_step(const DropoutTerms& d) {
  return d.on ? static_cast<uint32_t>(d.step_from->step) : 0u;
}

// dropout_forward / dropout_backward of one value: v * scale where the mask keeps it, else 0.
__device__ __forceinline__ float dropped(const DropoutTerms& d, uint32_t step, int sample,
                                         int feature, float v) {
  if (!d.on) return v;
  const bool keep = dropout_keeps(d.key, step, d.first_sample + static_cast<uint32_t>(sample),
                                  static_cast<uint32_t>(feature), d.rate);
  return keep ? __fmul_rn(v, d.scale) : 0.0f;
}

// batch_norm_apply's y = x * a + b, two roundings, with a = invstd * gamma, b = beta - mean * a.
struct Affine {
  float a, b;
};
__device__ __forceinline__ Affine affine_of(int f, const float* mean, const float* invstd,
                                            const float* gamma, const float* beta) {
  Affine t;
  t.a = __fmul_rn(invstd[f], gamma ? gamma[f] : 1.0f);
  t.b = __fsub_rn(beta ? beta[f] : 0.0f, __fmul_rn(mean[f], t.a));
  return t;
}
__device__ __forceinline__ float normalized(float v, const Affine& t) {
  return __fadd_rn(__fmul_rn(v, t.a), t.b);
}

// The block's output of one input value: dropout(relu(x * a + b)). ReLU as relu_forward on the CPU:
// only values below zero become 0 (NaN and -0 pass).
__device__ __forceinline__ float block_output(const DropoutTerms& d, uint32_t step, int sample,
                                              int feature, float x, const Affine& t) {
  const float v = normalized(x, t);
  return dropped(d, step, sample, feature, v < 0.0f ? 0.0f : v);
}

// The gradient the chain hands batch_norm_backward_reduce from the gradient dy of the block's
// output: dropout_backward, then relu_backward, which passes it where relu(x * a + b) > 0, that is
// where x * a + b > 0.
__device__ __forceinline__ float block_gradient(const DropoutTerms& d, uint32_t step, int sample,
                                                int feature, float x, const Affine& t, float dy) {
  const float g = dropped(d, step, sample, feature, dy);
  return normalized(x, t) > 0.0f ? g : 0.0f;
}

}  // namespace mnist::cuda
