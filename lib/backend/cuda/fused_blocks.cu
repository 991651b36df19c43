// The CUDA engines' fused kernels (fused_blocks.hpp): for each block, the sizes its kernel takes,
// the checks it needs and its launch, or the reference chain where it does not take them.
#include "backend/cuda/fused_blocks.hpp"

#include <algorithm>

#include "backend/backend.hpp"
#include "backend/cuda/conv_block.hpp"
#include "backend/cuda/conv_block_gradient.cuh"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/dense.hpp"
#include "backend/cuda/dense_block.hpp"
#include "backend/cuda/dense_head.hpp"
#include "backend/cuda/direct_conv.hpp"
#include "core/error.hpp"

namespace mnist::cuda {

void FusedBlocks::check_pool(const PoolGeom& g, const char* op) const {
  MNIST_CHECK(g.n >= 0 && g.c >= 0 && conv_block_supports(g),
              "{}: {} takes 2x2 pooling with stride 2, no padding and out = in / 2; got n {}, "
              "c {}, {}x{} -> {}x{}, window {}x{}, stride {}x{}, padding {}x{}",
              backend().name(), op, g.n, g.c, g.h, g.w, g.out_h, g.out_w, g.size_h, g.size_w,
              g.stride_h, g.stride_w, g.pad_h, g.pad_w);
}

void FusedBlocks::check_dropout(const DropoutArgs* dropout, const char* op) const {
  MNIST_CHECK(!dropout || (dropout->rate >= 0.0f && dropout->rate < 1.0f),
              "{}: {}: dropout rate {} is outside [0, 1)", backend().name(), op, dropout->rate);
}

void EngineFusedKernels::activate() const {
  MNIST_CUDA_CHECK(cudaSetDevice(r_.device));
}

bool EngineFusedKernels::supports(const FusedShape& s) const {
  return s.kind == FusedKind::dense_backward && dense_.fuses_backward();
}

void EngineFusedKernels::dense_backward(int n, int in, int out, const float* x, const float* dy,
                                        const float* weight, float* dweight, float* dbias,
                                        float* dx) {
  if (!dense_.fuses_backward())
    return FusedKernels::dense_backward(n, in, out, x, dy, weight, dweight, dbias, dx);
  activate();
  dense_.backward(n, in, out, x, dy, weight, dweight, dbias, dx);
}

void EngineFusedKernels::conv2d_forward_stats(const Conv2dGeom& g, const float* x,
                                              const float* weight, const float* bias, float* y,
                                              float* sum, float* sumsq,
                                              const BatchNormFinalize* finalize, float* workspace) {
  activate();
  if (!convolutions_.fuses(g))
    return FusedKernels::conv2d_forward_stats(g, x, weight, bias, y, sum, sumsq, finalize,
                                              workspace);
  convolutions_.forward_stats(g, x, weight, bias, y, sum, sumsq, finalize, workspace);
}

bool FusedBlocks::supports(const FusedShape& s) const {
  switch (s.kind) {
    case FusedKind::gathered_convolution:
      return direct_conv_gathers(s.conv);
    case FusedKind::conv_block:
      return conv_block_supports(s.pool);
    case FusedKind::dense_block:
    case FusedKind::dense_head:  // sizes the kernel does not take run the chain
      return true;
    case FusedKind::dense_tail:
      return takes_dense_tail(s.c, s.k);
    case FusedKind::dense_backward:
      return EngineFusedKernels::supports(s);
  }
  return false;
}

std::size_t FusedBlocks::workspace_floats(const FusedShape& s) const {
  const std::size_t chains = FusedKernels::workspace_floats(s);
  switch (s.kind) {
    case FusedKind::conv_block:
      return conv_block_uses_dconv(s.conv, s.pool, s.bias) ? chains : 0;
    case FusedKind::dense_head:
      return dense_head_supports(s.n, s.in, s.k) ? dense_head_workspace_floats(s.n, s.in, s.k)
                                                 : chains;
    case FusedKind::dense_tail: {
      // dense_forward_batch_norm runs its kernel for every size; the head and the backward only
      // for the sizes they take (the others run the chains). The n * c: a dense layer with a
      // bias takes the chain in its backward.
      const int n = s.n, in = s.in, c = s.c, k = s.k;
      std::size_t floats = std::max(chains, dense_forward_batch_norm_workspace_floats(n, in, c));
      if (c <= kDenseBatchNormFeatures)
        floats = std::max(floats, dense_backward_batch_norm_workspace_floats(n, in, c));
      if (takes_dense_tail(c, k)) {
        floats = std::max({floats, dense_head_workspace_floats(n, c, k),
                           static_cast<std::size_t>(std::max(n, 1)) * static_cast<std::size_t>(c)});
      }
      return floats;
    }
    case FusedKind::gathered_convolution:
    case FusedKind::dense_block:
    case FusedKind::dense_backward:
      break;
  }
  return chains;
}

bool FusedBlocks::conv_block_uses_dconv(const Conv2dGeom& g, const PoolGeom& pool,
                                        bool bias) const {
  return bias || !direct_conv_supports(g) || pool.c > kBlockGradientChannels;
}

void FusedBlocks::conv2d_forward_batch_norm_gathered(const Conv2dGeom& g, const BatchGather& batch,
                                                     const float* weight, const float* bias,
                                                     float* y, float* sum, float* sumsq,
                                                     const BatchNormFinalize& bn,
                                                     float* workspace) {
  if (!supports(FusedShape::gathered_convolution(g)))
    return FusedKernels::conv2d_forward_batch_norm_gathered(g, batch, weight, bias, y, sum, sumsq,
                                                            bn, workspace);
  activate();
  direct_conv2d_forward_gathered(r_.stream, g, batch, weight, bias, y, sum, sumsq, &bn,
                                 r_.block_counter, workspace);
}

void FusedBlocks::bn_relu_pool_forward(const PoolGeom& g, const float* x, const float* mean,
                                       const float* invstd, const float* gamma, const float* beta,
                                       float* y, uint8_t* mask) {
  activate();
  check_pool(g, "bn_relu_pool_forward");
  cuda::bn_relu_pool_forward(r_.stream, g, x, mean, invstd, gamma, beta, y, mask);
}
void FusedBlocks::bn_relu_pool_backward_reduce(const PoolGeom& g, const float* dy,
                                               const uint8_t* mask, const float* x,
                                               const float* mean, const float* invstd,
                                               float* sum_dy, float* sum_dy_xhat) {
  activate();
  check_pool(g, "bn_relu_pool_backward_reduce");
  cuda::bn_relu_pool_backward_reduce(r_.stream, g, dy, mask, x, mean, invstd, sum_dy, sum_dy_xhat,
                                     r_.block_counter, r_.scratch);
}
void FusedBlocks::bn_relu_pool_backward_apply(const PoolGeom& g, const float* dy,
                                              const uint8_t* mask, const float* x,
                                              const float* mean, const float* invstd,
                                              const float* gamma, const float* sum_dy,
                                              const float* sum_dy_xhat, double count, float* dx) {
  activate();
  check_pool(g, "bn_relu_pool_backward_apply");
  cuda::bn_relu_pool_backward_apply(r_.stream, g, dy, mask, x, mean, invstd, gamma, sum_dy,
                                    sum_dy_xhat, count, dx);
}
void FusedBlocks::conv_block_backward(const Conv2dGeom& g, const ConvBlockGradient& block,
                                      const float* x, const float* weight, float* dweight,
                                      float* dbias, float* dx, float* dconv, float* workspace) {
  activate();
  if (conv_block_uses_dconv(g, block.pool, dbias != nullptr)) {
    MNIST_CHECK(dconv, "{}: conv_block_backward needs its dconv scratch for these sizes",
                backend().name());
    return FusedKernels::conv_block_backward(g, block, x, weight, dweight, dbias, dx, dconv,
                                             workspace);
  }
  check_pool(block.pool, "conv_block_backward");
  direct_conv2d_backward_block(r_.stream, g, block, x, weight, dweight, dx, r_.block_counter,
                               workspace);
}

// The fused kernels need no scratch.
void FusedBlocks::dense_block_forward(int n, int c, const float* x, float epsilon, float decay,
                                      const float* gamma, const float* beta,
                                      const DropoutArgs* dropout, float* y, float* mean,
                                      float* invstd, float* running_mean, float* running_var,
                                      float*) {
  activate();
  MNIST_CHECK(n >= 1 && c >= 1 && x && y && mean && invstd && running_mean && running_var,
              "{}: dense_block_forward needs n >= 1 samples, c >= 1 features (got n {}, c {}), "
              "x, y, mean, invstd and the running statistics",
              backend().name(), n, c);
  check_dropout(dropout, "dense_block_forward");
  cuda::dense_block_forward(r_.stream, n, c, x, epsilon, decay, gamma, beta, dropout, y, mean,
                            invstd, running_mean, running_var);
}
void FusedBlocks::dense_block_backward(int n, int c, const float* x, const float* mean,
                                       const float* invstd, const float* gamma, const float* beta,
                                       const DropoutArgs* dropout, const float* dy, float* dx,
                                       float* dgamma, float* dbeta, float*) {
  activate();
  MNIST_CHECK(n >= 1 && c >= 1 && x && mean && invstd && dy,
              "{}: dense_block_backward needs n >= 1 samples, c >= 1 features (got n {}, c {}), "
              "x, mean, invstd and dy",
              backend().name(), n, c);
  check_dropout(dropout, "dense_block_backward");
  cuda::dense_block_backward(r_.stream, n, c, x, mean, invstd, gamma, beta, dropout, dy, dx, dgamma,
                             dbeta);
}

bool FusedBlocks::takes_dense_tail(int c, int k) const {
  return c <= kDenseBatchNormFeatures && dense_head_supports(1, c, k);
}
void FusedBlocks::dense_softmax_cross_entropy(int n, int in, int k, const float* x,
                                              const float* weight, const float* bias,
                                              const int32_t* labels, float grad_scale, float* dx,
                                              float* dweight, float* dbias, float* metrics,
                                              float* workspace) {
  if (!dense_head_supports(n, in, k)) {
    return FusedKernels::dense_softmax_cross_entropy(n, in, k, x, weight, bias, labels, grad_scale,
                                                     dx, dweight, dbias, metrics, workspace);
  }
  activate();
  cuda::dense_softmax_cross_entropy(r_.stream, n, in, k, x, weight, bias, labels, grad_scale, dx,
                                    dweight, dbias, metrics, workspace, r_.block_counter);
}
void FusedBlocks::dense_forward_batch_norm(int n, int in, int out, const float* x,
                                           const float* weight, const float* bias, float* y,
                                           const BatchNormFinalize& bn, float* workspace) {
  activate();
  cuda::dense_forward_batch_norm(r_.stream, n, in, out, x, weight, bias, y, bn, workspace,
                                 r_.block_counter);
}
void FusedBlocks::dense_block_softmax_cross_entropy(
    int n, int c, int k, const DenseBlockInput& block, const float* weight, const float* bias,
    const int32_t* labels, float grad_scale, float* dbn, float* sum_dy, float* sum_dy_xhat,
    float* dweight, float* dbias, float* metrics, float* workspace) {
  if (!takes_dense_tail(c, k)) {
    return FusedKernels::dense_block_softmax_cross_entropy(n, c, k, block, weight, bias, labels,
                                                           grad_scale, dbn, sum_dy, sum_dy_xhat,
                                                           dweight, dbias, metrics, workspace);
  }
  activate();
  check_dropout(block.has_dropout ? &block.dropout : nullptr, "dense_block_softmax_cross_entropy");
  cuda::dense_block_softmax_cross_entropy(r_.stream, n, c, k, block, weight, bias, labels,
                                          grad_scale, dbn, sum_dy, sum_dy_xhat, dweight, dbias,
                                          metrics, workspace, r_.block_counter);
}
void FusedBlocks::dense_backward_batch_norm(int n, int in, int out, const float* x,
                                            const BatchNormGradient& bn, const float* weight,
                                            float* dweight, float* dbias, float* dx,
                                            float* workspace) {
  if (dbias || out > kDenseBatchNormFeatures) {
    return FusedKernels::dense_backward_batch_norm(n, in, out, x, bn, weight, dweight, dbias, dx,
                                                   workspace);
  }
  activate();
  cuda::dense_backward_batch_norm(r_.stream, n, in, out, x, bn, weight, dweight, dx, workspace,
                                  r_.block_counter);
}

}  // namespace mnist::cuda
