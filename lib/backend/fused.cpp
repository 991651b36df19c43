// The reference FusedKernels: each block as the chain of Backend primitives it stands for (the
// CPU backend's blocks but the conv block, and the oracle every fused kernel is tested against
// bit for bit); the conv block, which has no such chain, refuses, naming the backend, so a plan
// that asked for it where supports() said no fails loudly.
#include "backend/fused.hpp"

#include <algorithm>

#include "backend/backend.hpp"
#include "core/error.hpp"

namespace mnist {

// Every field named, in FusedShape's order: kind, conv, pool, bias, n, in, c, k.
FusedShape FusedShape::gathered_convolution(const Conv2dGeom& g) {
  return {FusedKind::gathered_convolution, g, PoolGeom{}, false, 0, 0, 0, 0};
}
FusedShape FusedShape::conv_block(const Conv2dGeom& g, const PoolGeom& pool, bool bias) {
  return {FusedKind::conv_block, g, pool, bias, 0, 0, 0, 0};
}
FusedShape FusedShape::dense_block(int n, int c) {
  return {FusedKind::dense_block, Conv2dGeom{}, PoolGeom{}, false, n, 0, c, 0};
}
FusedShape FusedShape::dense_head(int n, int in, int k) {
  return {FusedKind::dense_head, Conv2dGeom{}, PoolGeom{}, false, n, in, 0, k};
}
FusedShape FusedShape::dense_tail(int n, int in, int c, int k) {
  return {FusedKind::dense_tail, Conv2dGeom{}, PoolGeom{}, false, n, in, c, k};
}
FusedShape FusedShape::dense_backward(int n, int in, int out) {
  return {FusedKind::dense_backward, Conv2dGeom{}, PoolGeom{}, false, n, in, out, 0};
}

namespace {
[[noreturn]] void no_conv_block(const Backend& b, const char* op) {
  MNIST_THROW(RuntimeError,
              "{}: {} is not implemented by this engine (it does not support the conv block)",
              b.name(), op);
}
void check_dense_block(const Backend& b, const char* op, int n, int c, const DropoutArgs* dropout) {
  MNIST_CHECK(n >= 1 && c >= 1, "{}: {} needs n >= 1 samples and c >= 1 features, got n {}, c {}",
              b.name(), op, n, c);
  MNIST_CHECK(!dropout || (dropout->rate >= 0.0f && dropout->rate < 1.0f),
              "{}: {}: dropout rate {} is outside [0, 1)", b.name(), op, dropout->rate);
}
std::size_t product(int a, int b) {
  return static_cast<std::size_t>(a) * static_cast<std::size_t>(b);
}
}  // namespace

bool FusedKernels::supports(const FusedShape&) const {
  return false;
}

std::size_t FusedKernels::workspace_floats(const FusedShape& s) const {
  switch (s.kind) {
    case FusedKind::gathered_convolution:
    case FusedKind::dense_backward:
      return 0;
    case FusedKind::conv_block:  // the apply's output, which the convolution's backward reads
      return product(s.conv.n, s.conv.k) * product(s.conv.out_h, s.conv.out_w);
    case FusedKind::dense_block:  // the gradient at the batch norm, the ReLU's output, 2c sums
      return 2 * product(s.n, s.c) + 2 * static_cast<std::size_t>(s.c);
    case FusedKind::dense_head:  // logits, dlogits
      return 2 * product(s.n, s.k);
    case FusedKind::dense_tail:
      // The head's chain: the block's output, its gradient and the head's own workspace; the
      // forward needs 2c sums, the backward the gradient of the dense output (n * c).
      return std::max(
          2 * product(s.n, s.c) + workspace_floats(FusedShape::dense_head(s.n, s.c, s.k)),
          2 * static_cast<std::size_t>(s.c));
  }
  return 0;
}

void FusedKernels::conv2d_forward_stats(const Conv2dGeom& g, const float* x, const float* weight,
                                        const float* bias, float* y, float* sum, float* sumsq,
                                        const BatchNormFinalize* finalize, float* workspace) {
  Backend& b = backend();
  b.conv2d_forward(g, x, weight, bias, y, workspace);
  b.batch_norm_stats(ChannelGeom{g.n, g.k, g.out_h * g.out_w}, y, sum, sumsq);
  if (finalize) {
    b.batch_norm_finalize(g.k, finalize->count, sum, sumsq, finalize->epsilon, finalize->decay,
                          finalize->mean, finalize->invstd, finalize->running_mean,
                          finalize->running_var);
  }
}

void FusedKernels::bn_relu_pool_forward(const PoolGeom&, const float*, const float*, const float*,
                                        const float*, const float*, float*, uint8_t*) {
  no_conv_block(backend(), "bn_relu_pool_forward");
}
void FusedKernels::bn_relu_pool_backward_reduce(const PoolGeom&, const float*, const uint8_t*,
                                                const float*, const float*, const float*, float*,
                                                float*) {
  no_conv_block(backend(), "bn_relu_pool_backward_reduce");
}
void FusedKernels::bn_relu_pool_backward_apply(const PoolGeom&, const float*, const uint8_t*,
                                               const float*, const float*, const float*,
                                               const float*, const float*, const float*, double,
                                               float*) {
  no_conv_block(backend(), "bn_relu_pool_backward_apply");
}

void FusedKernels::conv2d_forward_batch_norm_gathered(const Conv2dGeom& g, const BatchGather& batch,
                                                      const float* weight, const float* bias,
                                                      float* y, float* sum, float* sumsq,
                                                      const BatchNormFinalize& bn,
                                                      float* workspace) {
  Backend& b = backend();
  MNIST_CHECK(batch.pixels == g.c * g.h * g.w,
              "{}: conv2d_forward_batch_norm_gathered: images of {} pixels for a {}x{}x{} input",
              b.name(), batch.pixels, g.c, g.h, g.w);
  b.gather_batch(batch, g.n);
  conv2d_forward_stats(g, batch.x, weight, bias, y, sum, sumsq, &bn, workspace);
}

void FusedKernels::dense_softmax_cross_entropy(int n, int in, int k, const float* x,
                                               const float* weight, const float* bias,
                                               const int32_t* labels, float grad_scale, float* dx,
                                               float* dweight, float* dbias, float* metrics,
                                               float* workspace) {
  Backend& b = backend();
  float* logits = workspace;
  float* dlogits = workspace + static_cast<std::size_t>(n) * static_cast<std::size_t>(k);
  b.dense_forward(n, in, k, x, weight, bias, logits);
  b.softmax_cross_entropy(n, k, logits, labels, grad_scale, dlogits, metrics);
  b.dense_backward_weights(n, in, k, x, dlogits, dweight, dbias);
  if (dx) b.dense_backward_data(n, in, k, dlogits, weight, dx);
}

void FusedKernels::dense_block_forward(int n, int c, const float* x, float epsilon, float decay,
                                       const float* gamma, const float* beta,
                                       const DropoutArgs* dropout, float* y, float* mean,
                                       float* invstd, float* running_mean, float* running_var,
                                       float* scratch) {
  Backend& b = backend();
  check_dense_block(b, "dense_block_forward", n, c, dropout);
  const ChannelGeom g{n, c, 1};
  const std::size_t values = static_cast<std::size_t>(n) * static_cast<std::size_t>(c);
  float* sum = scratch;
  float* sumsq = scratch + c;
  b.batch_norm_stats(g, x, sum, sumsq);
  b.batch_norm_finalize(c, static_cast<double>(n), sum, sumsq, epsilon, decay, mean, invstd,
                        running_mean, running_var);
  // Each step below reads and writes element i alone, so y serves as their input and output.
  b.batch_norm_apply(g, x, mean, invstd, gamma, beta, y);
  b.relu_forward(values, y, y);
  if (dropout) {
    b.dropout_forward(n, c, dropout->rate, dropout->key, dropout->step_scalars,
                      dropout->first_sample, y, y);
  }
}

void FusedKernels::dense_block_backward(int n, int c, const float* x, const float* mean,
                                        const float* invstd, const float* gamma, const float* beta,
                                        const DropoutArgs* dropout, const float* dy, float* dx,
                                        float* dgamma, float* dbeta, float* scratch) {
  Backend& b = backend();
  check_dense_block(b, "dense_block_backward", n, c, dropout);
  const ChannelGeom g{n, c, 1};
  const std::size_t values = static_cast<std::size_t>(n) * static_cast<std::size_t>(c);
  float* grad = scratch;           // the gradient that reaches the batch norm
  float* relu = scratch + values;  // the ReLU's output, recomputed
  float* sum_dy = scratch + 2 * values;
  float* sum_dy_xhat = sum_dy + c;
  const float* relu_dy = dy;
  if (dropout) {
    b.dropout_backward(n, c, dropout->rate, dropout->key, dropout->step_scalars,
                       dropout->first_sample, dy, grad);
    relu_dy = grad;
  }
  b.batch_norm_apply(g, x, mean, invstd, gamma, beta, relu);
  b.relu_forward(values, relu, relu);
  b.relu_backward(values, relu, relu_dy, grad);
  b.batch_norm_backward_reduce(g, grad, x, mean, invstd, sum_dy, sum_dy_xhat);
  if (dbeta) b.copy_on_device(dbeta, sum_dy, sizeof(float) * c);
  if (dgamma) b.copy_on_device(dgamma, sum_dy_xhat, sizeof(float) * c);
  if (dx) {
    b.batch_norm_backward_apply(g, grad, x, mean, invstd, gamma, sum_dy, sum_dy_xhat,
                                static_cast<double>(n), dx);
  }
}

void FusedKernels::dense_forward_batch_norm(int n, int in, int out, const float* x,
                                            const float* weight, const float* bias, float* y,
                                            const BatchNormFinalize& bn, float* workspace) {
  Backend& b = backend();
  check_dense_block(b, "dense_forward_batch_norm", n, out, nullptr);
  float* sum = workspace;
  float* sumsq = workspace + out;
  b.dense_forward(n, in, out, x, weight, bias, y);
  b.batch_norm_stats(ChannelGeom{n, out, 1}, y, sum, sumsq);
  b.batch_norm_finalize(out, bn.count, sum, sumsq, bn.epsilon, bn.decay, bn.mean, bn.invstd,
                        bn.running_mean, bn.running_var);
}

void FusedKernels::dense_block_softmax_cross_entropy(
    int n, int c, int k, const DenseBlockInput& block, const float* weight, const float* bias,
    const int32_t* labels, float grad_scale, float* dbn, float* sum_dy, float* sum_dy_xhat,
    float* dweight, float* dbias, float* metrics, float* workspace) {
  Backend& b = backend();
  const DropoutArgs* dropout = block.has_dropout ? &block.dropout : nullptr;
  check_dense_block(b, "dense_block_softmax_cross_entropy", n, c, dropout);
  const ChannelGeom g{n, c, 1};
  const std::size_t values = static_cast<std::size_t>(n) * static_cast<std::size_t>(c);
  float* a = workspace;            // the block's output, then the ReLU's output recomputed
  float* da = workspace + values;  // the head's input gradient
  float* head_workspace = workspace + 2 * values;
  b.batch_norm_apply(g, block.x, block.mean, block.invstd, block.gamma, block.beta, a);
  b.relu_forward(values, a, a);
  if (dropout) {
    b.dropout_forward(n, c, dropout->rate, dropout->key, dropout->step_scalars,
                      dropout->first_sample, a, a);
  }
  dense_softmax_cross_entropy(n, c, k, a, weight, bias, labels, grad_scale, da, dweight, dbias,
                              metrics, head_workspace);
  const float* relu_dy = da;
  if (dropout) {
    b.dropout_backward(n, c, dropout->rate, dropout->key, dropout->step_scalars,
                       dropout->first_sample, da, dbn);
    relu_dy = dbn;
  }
  b.batch_norm_apply(g, block.x, block.mean, block.invstd, block.gamma, block.beta, a);
  b.relu_forward(values, a, a);
  b.relu_backward(values, a, relu_dy, dbn);
  b.batch_norm_backward_reduce(g, dbn, block.x, block.mean, block.invstd, sum_dy, sum_dy_xhat);
}

void FusedKernels::dense_backward_batch_norm(int n, int in, int out, const float* x,
                                             const BatchNormGradient& bn, const float* weight,
                                             float* dweight, float* dbias, float* dx,
                                             float* workspace) {
  Backend& b = backend();
  check_dense_block(b, "dense_backward_batch_norm", n, out, nullptr);
  float* dy = workspace;
  b.batch_norm_backward_apply(ChannelGeom{n, out, 1}, bn.dy, bn.x, bn.mean, bn.invstd, bn.gamma,
                              bn.sum_dy, bn.sum_dy_xhat, bn.count, dy);
  dense_backward(n, in, out, x, dy, weight, dweight, dbias, dx);
}

void FusedKernels::dense_backward(int n, int in, int out, const float* x, const float* dy,
                                  const float* weight, float* dweight, float* dbias, float* dx) {
  Backend& b = backend();
  b.dense_backward_weights(n, in, out, x, dy, dweight, dbias);
  if (dx) b.dense_backward_data(n, in, out, dy, weight, dx);
}

void FusedKernels::conv_block_backward(const Conv2dGeom& g, const ConvBlockGradient& block,
                                       const float* x, const float* weight, float* dweight,
                                       float* dbias, float* dx, float* dconv, float* workspace) {
  Backend& b = backend();
  bn_relu_pool_backward_apply(block.pool, block.dy, block.mask, block.conv_out, block.mean,
                              block.invstd, block.gamma, block.sum_dy, block.sum_dy_xhat,
                              block.count, dconv);
  b.conv2d_backward(g, x, dconv, weight, dweight, dbias, dx, workspace);
}

}  // namespace mnist
