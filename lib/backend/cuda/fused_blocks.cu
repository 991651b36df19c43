// The fused blocks (fused_blocks.hpp): the checks each block's kernels need, then their launch.
#include "backend/cuda/fused_blocks.hpp"

#include <algorithm>

#include "backend/cuda/conv_block.hpp"
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
              name_, op, g.n, g.c, g.h, g.w, g.out_h, g.out_w, g.size_h, g.size_w, g.stride_h,
              g.stride_w, g.pad_h, g.pad_w);
}

void FusedBlocks::check_dropout(const DropoutArgs* dropout, const char* op) const {
  MNIST_CHECK(!dropout || (dropout->rate >= 0.0f && dropout->rate < 1.0f),
              "{}: {}: dropout rate {} is outside [0, 1)", name_, op, dropout->rate);
}

bool FusedBlocks::takes_gathered_convolution(const Conv2dGeom& g) const {
  return direct_conv_gathers(g);
}
void FusedBlocks::conv2d_forward_batch_norm_gathered(const Conv2dGeom& g, const BatchGather& batch,
                                                     const float* weight, const float* bias,
                                                     float* y, float* sum, float* sumsq,
                                                     const BatchNormFinalize& bn,
                                                     float* workspace) {
  direct_conv2d_forward_gathered(r_.stream, g, batch, weight, bias, y, sum, sumsq, &bn,
                                 r_.block_counter, workspace);
}

bool FusedBlocks::takes_conv_block(const PoolGeom& g) const {
  return conv_block_supports(g);
}
void FusedBlocks::bn_relu_pool_forward(const PoolGeom& g, const float* x, const float* mean,
                                       const float* invstd, const float* gamma, const float* beta,
                                       float* y, uint8_t* mask) {
  check_pool(g, "bn_relu_pool_forward");
  cuda::bn_relu_pool_forward(r_.stream, g, x, mean, invstd, gamma, beta, y, mask);
}
void FusedBlocks::bn_relu_pool_backward_reduce(const PoolGeom& g, const float* dy,
                                               const uint8_t* mask, const float* x,
                                               const float* mean, const float* invstd,
                                               float* sum_dy, float* sum_dy_xhat) {
  check_pool(g, "bn_relu_pool_backward_reduce");
  cuda::bn_relu_pool_backward_reduce(r_.stream, g, dy, mask, x, mean, invstd, sum_dy, sum_dy_xhat,
                                     r_.block_counter, r_.scratch);
}
void FusedBlocks::bn_relu_pool_backward_apply(const PoolGeom& g, const float* dy,
                                              const uint8_t* mask, const float* x,
                                              const float* mean, const float* invstd,
                                              const float* gamma, const float* sum_dy,
                                              const float* sum_dy_xhat, double count, float* dx) {
  check_pool(g, "bn_relu_pool_backward_apply");
  cuda::bn_relu_pool_backward_apply(r_.stream, g, dy, mask, x, mean, invstd, gamma, sum_dy,
                                    sum_dy_xhat, count, dx);
}
void FusedBlocks::conv_block_backward(const Conv2dGeom& g, const ConvBlockGradient& block,
                                      const float* x, const float* weight, float* dweight,
                                      float* dx, float* workspace) {
  check_pool(block.pool, "conv_block_backward");
  direct_conv2d_backward_block(r_.stream, g, block, x, weight, dweight, dx, r_.block_counter,
                               workspace);
}

// The fused kernels need no scratch.
void FusedBlocks::dense_block_forward(int n, int c, const float* x, float epsilon, float decay,
                                      const float* gamma, const float* beta,
                                      const DropoutArgs* dropout, float* y, float* mean,
                                      float* invstd, float* running_mean, float* running_var) {
  MNIST_CHECK(n >= 1 && c >= 1 && x && y && mean && invstd && running_mean && running_var,
              "{}: dense_block_forward needs n >= 1 samples, c >= 1 features (got n {}, c {}), "
              "x, y, mean, invstd and the running statistics",
              name_, n, c);
  check_dropout(dropout, "dense_block_forward");
  cuda::dense_block_forward(r_.stream, n, c, x, epsilon, decay, gamma, beta, dropout, y, mean,
                            invstd, running_mean, running_var);
}
void FusedBlocks::dense_block_backward(int n, int c, const float* x, const float* mean,
                                       const float* invstd, const float* gamma, const float* beta,
                                       const DropoutArgs* dropout, const float* dy, float* dx,
                                       float* dgamma, float* dbeta) {
  MNIST_CHECK(n >= 1 && c >= 1 && x && mean && invstd && dy,
              "{}: dense_block_backward needs n >= 1 samples, c >= 1 features (got n {}, c {}), "
              "x, mean, invstd and dy",
              name_, n, c);
  check_dropout(dropout, "dense_block_backward");
  cuda::dense_block_backward(r_.stream, n, c, x, mean, invstd, gamma, beta, dropout, dy, dx, dgamma,
                             dbeta);
}

bool FusedBlocks::takes_dense_tail(int c, int k) const {
  return c <= kDenseBatchNormFeatures && dense_head_supports(1, c, k);
}
std::size_t FusedBlocks::dense_tail_workspace_floats(int n, int in, int c, int k,
                                                     std::size_t chains) const {
  // dense_forward_batch_norm runs its kernel for every size; the head and the backward only for
  // the sizes they take (the others run the chains). The n * c: a dense layer with a bias takes
  // the chain in its backward.
  std::size_t floats = std::max(chains, dense_forward_batch_norm_workspace_floats(n, in, c));
  if (c <= kDenseBatchNormFeatures)
    floats = std::max(floats, dense_backward_batch_norm_workspace_floats(n, in, c));
  if (takes_dense_tail(c, k)) {
    floats = std::max({floats, dense_head_workspace_floats(n, c, k),
                       static_cast<std::size_t>(std::max(n, 1)) * static_cast<std::size_t>(c)});
  }
  return floats;
}
void FusedBlocks::dense_forward_batch_norm(int n, int in, int out, const float* x,
                                           const float* weight, const float* bias, float* y,
                                           const BatchNormFinalize& bn, float* workspace) {
  cuda::dense_forward_batch_norm(r_.stream, n, in, out, x, weight, bias, y, bn, workspace,
                                 r_.block_counter);
}
void FusedBlocks::dense_block_softmax_cross_entropy(
    int n, int c, int k, const DenseBlockInput& block, const float* weight, const float* bias,
    const int32_t* labels, float grad_scale, float* dbn, float* sum_dy, float* sum_dy_xhat,
    float* dweight, float* dbias, float* metrics, float* workspace) {
  check_dropout(block.has_dropout ? &block.dropout : nullptr, "dense_block_softmax_cross_entropy");
  cuda::dense_block_softmax_cross_entropy(r_.stream, n, c, k, block, weight, bias, labels,
                                          grad_scale, dbn, sum_dy, sum_dy_xhat, dweight, dbias,
                                          metrics, workspace, r_.block_counter);
}
bool FusedBlocks::takes_dense_backward_batch_norm(int out, bool bias) const {
  return !bias && out <= kDenseBatchNormFeatures;
}
void FusedBlocks::dense_backward_batch_norm(int n, int in, int out, const float* x,
                                            const BatchNormGradient& bn, const float* weight,
                                            float* dweight, float* dx, float* workspace) {
  cuda::dense_backward_batch_norm(r_.stream, n, in, out, x, bn, weight, dweight, dx, workspace,
                                  r_.block_counter);
}

}  // namespace mnist::cuda
