// Backend methods with a default: conv2d_forward_stats, conv2d_backward, conv_block_backward,
// dense_backward, conv2d_forward_batch_norm, adam_update_and_advance, dense_softmax_cross_entropy,
// the dense block's two calls and the dense tail's three compose the calls
// they stand for (the CPU backend's fused ops, the oracle of the CUDA kernels); the fused conv
// block's, which only some engines implement (see backend.hpp), refuse, naming the backend, so a
// model that asked for a fused block where fuses_conv_block() said no fails loudly; so do the
// capture calls on a backend that cannot capture.
#include "backend/backend.hpp"

#include <algorithm>

#include "build_info.hpp"
#include "core/error.hpp"

namespace mnist {

std::vector<Engine> cuda_engines() {
  std::vector<Engine> out;
  if (!MNIST_HAVE_CUDA) return out;
  for (Engine e : engines_run_by(/*cuda=*/true)) {
    if (e != Engine::cudnn || MNIST_HAVE_CUDNN) out.push_back(e);
  }
  return out;
}

namespace {
[[noreturn]] void no_fused_block(const Backend& b, const char* op) {
  MNIST_THROW(RuntimeError, "{}: {} is not implemented by this engine (fuses_conv_block is false)",
              b.name(), op);
}
[[noreturn]] void no_capture(const Backend& b, const char* op) {
  MNIST_THROW(RuntimeError, "{}: {} needs a backend that captures (supports_capture is false)",
              b.name(), op);
}
}  // namespace

void Backend::begin_capture() {
  no_capture(*this, "begin_capture");
}
std::unique_ptr<Backend::Captured> Backend::end_capture() {
  no_capture(*this, "end_capture");
}
void Backend::replay(const Captured&) {
  no_capture(*this, "replay");
}

void Backend::conv2d_forward_stats(const Conv2dGeom& g, const float* x, const float* weight,
                                   const float* bias, float* y, float* sum, float* sumsq,
                                   float* workspace) {
  conv2d_forward(g, x, weight, bias, y, workspace);
  batch_norm_stats(ChannelGeom{g.n, g.k, g.out_h * g.out_w}, y, sum, sumsq);
}

void Backend::conv2d_backward(const Conv2dGeom& g, const float* x, const float* dy,
                              const float* weight, float* dweight, float* dbias, float* dx,
                              float* workspace) {
  conv2d_backward_weights(g, x, dy, dweight, dbias, workspace);
  if (dx) conv2d_backward_data(g, dy, weight, dx, workspace);
}

void Backend::conv_block_backward(const Conv2dGeom& g, const ConvBlockGradient& block,
                                  const float* x, const float* weight, float* dweight, float* dbias,
                                  float* dx, float* dconv, float* workspace) {
  bn_relu_pool_backward_apply(block.pool, block.dy, block.mask, block.conv_out, block.mean,
                              block.invstd, block.gamma, block.sum_dy, block.sum_dy_xhat,
                              block.count, dconv);
  conv2d_backward(g, x, dconv, weight, dweight, dbias, dx, workspace);
}

void Backend::dense_backward(int n, int in, int out, const float* x, const float* dy,
                             const float* weight, float* dweight, float* dbias, float* dx) {
  dense_backward_weights(n, in, out, x, dy, dweight, dbias);
  if (dx) dense_backward_data(n, in, out, dy, weight, dx);
}

void Backend::conv2d_forward_batch_norm(const Conv2dGeom& g, const float* x, const float* weight,
                                        const float* bias, float* y, float* sum, float* sumsq,
                                        const BatchNormFinalize& bn, float* workspace) {
  conv2d_forward_stats(g, x, weight, bias, y, sum, sumsq, workspace);
  batch_norm_finalize(g.k, bn.count, sum, sumsq, bn.epsilon, bn.decay, bn.mean, bn.invstd,
                      bn.running_mean, bn.running_var);
}

void Backend::gather(const BatchGather& batch, int n) {
  if (batch.step)
    gather_batch(batch.images, batch.labels, batch.pixels, batch.ring, batch.ring_steps, batch.step,
                 n, batch.x, batch.y);
  else
    gather_batch(batch.images, batch.labels, batch.pixels, batch.ring, n, batch.x, batch.y);
}

void Backend::conv2d_forward_batch_norm_gathered(const Conv2dGeom& g, const BatchGather& batch,
                                                 const float* weight, const float* bias, float* y,
                                                 float* sum, float* sumsq,
                                                 const BatchNormFinalize& bn, float* workspace) {
  MNIST_CHECK(batch.pixels == g.c * g.h * g.w,
              "{}: conv2d_forward_batch_norm_gathered: images of {} pixels for a {}x{}x{} input",
              name(), batch.pixels, g.c, g.h, g.w);
  gather(batch, g.n);
  conv2d_forward_batch_norm(g, batch.x, weight, bias, y, sum, sumsq, bn, workspace);
}

void Backend::adam_update_and_advance(std::size_t n, std::size_t n_decay,
                                      const OptimizerStep& constants, StepScalars* s, float* params,
                                      const float* grads, float* m, float* v, double epsilon,
                                      bool tensorflow_epsilon) {
  adam_update(n, n_decay, constants, s, params, grads, m, v);
  step_scalars_advance(s, constants.beta1, constants.beta2, epsilon, tensorflow_epsilon);
}

std::size_t Backend::dense_softmax_cross_entropy_workspace_floats(int n, int in, int k) {
  (void)in;
  return 2 * static_cast<std::size_t>(n) * static_cast<std::size_t>(k);  // logits, dlogits
}

void Backend::dense_softmax_cross_entropy(int n, int in, int k, const float* x, const float* weight,
                                          const float* bias, const int32_t* labels,
                                          float grad_scale, float* dx, float* dweight, float* dbias,
                                          float* metrics, float* workspace) {
  float* logits = workspace;
  float* dlogits = workspace + static_cast<std::size_t>(n) * static_cast<std::size_t>(k);
  dense_forward(n, in, k, x, weight, bias, logits);
  softmax_cross_entropy(n, k, logits, labels, grad_scale, dlogits, metrics);
  dense_backward_weights(n, in, k, x, dlogits, dweight, dbias);
  if (dx) dense_backward_data(n, in, k, dlogits, weight, dx);
}

namespace {
void check_dense_block(const Backend& b, const char* op, int n, int c, const DropoutArgs* dropout) {
  MNIST_CHECK(n >= 1 && c >= 1, "{}: {} needs n >= 1 samples and c >= 1 features, got n {}, c {}",
              b.name(), op, n, c);
  MNIST_CHECK(!dropout || (dropout->rate >= 0.0f && dropout->rate < 1.0f),
              "{}: {}: dropout rate {} is outside [0, 1)", b.name(), op, dropout->rate);
}
}  // namespace

void Backend::dense_block_forward(int n, int c, const float* x, float epsilon, float decay,
                                  const float* gamma, const float* beta, const DropoutArgs* dropout,
                                  float* y, float* mean, float* invstd, float* running_mean,
                                  float* running_var, float* scratch) {
  check_dense_block(*this, "dense_block_forward", n, c, dropout);
  const ChannelGeom g{n, c, 1};
  const std::size_t values = static_cast<std::size_t>(n) * static_cast<std::size_t>(c);
  float* sum = scratch;
  float* sumsq = scratch + c;
  batch_norm_stats(g, x, sum, sumsq);
  batch_norm_finalize(c, static_cast<double>(n), sum, sumsq, epsilon, decay, mean, invstd,
                      running_mean, running_var);
  // Each step below reads and writes element i alone, so y serves as their input and output.
  batch_norm_apply(g, x, mean, invstd, gamma, beta, y);
  relu_forward(values, y, y);
  if (dropout) {
    dropout_forward(n, c, dropout->rate, dropout->key, dropout->step, dropout->step_scalars,
                    dropout->first_sample, y, y);
  }
}

void Backend::dense_block_backward(int n, int c, const float* x, const float* mean,
                                   const float* invstd, const float* gamma, const float* beta,
                                   const DropoutArgs* dropout, const float* dy, float* dx,
                                   float* dgamma, float* dbeta, float* scratch) {
  check_dense_block(*this, "dense_block_backward", n, c, dropout);
  const ChannelGeom g{n, c, 1};
  const std::size_t values = static_cast<std::size_t>(n) * static_cast<std::size_t>(c);
  float* grad = scratch;           // the gradient that reaches the batch norm
  float* relu = scratch + values;  // the ReLU's output, recomputed
  float* sum_dy = scratch + 2 * values;
  float* sum_dy_xhat = sum_dy + c;
  const float* relu_dy = dy;
  if (dropout) {
    dropout_backward(n, c, dropout->rate, dropout->key, dropout->step, dropout->step_scalars,
                     dropout->first_sample, dy, grad);
    relu_dy = grad;
  }
  batch_norm_apply(g, x, mean, invstd, gamma, beta, relu);
  relu_forward(values, relu, relu);
  relu_backward(values, relu, relu_dy, grad);
  batch_norm_backward_reduce(g, grad, x, mean, invstd, sum_dy, sum_dy_xhat);
  if (dbeta) copy_on_device(dbeta, sum_dy, sizeof(float) * c);
  if (dgamma) copy_on_device(dgamma, sum_dy_xhat, sizeof(float) * c);
  if (dx) {
    batch_norm_backward_apply(g, grad, x, mean, invstd, gamma, sum_dy, sum_dy_xhat,
                              static_cast<double>(n), dx);
  }
}

std::size_t Backend::dense_tail_workspace_floats(int n, int in, int c, int k) {
  (void)in;
  const std::size_t values = static_cast<std::size_t>(n) * static_cast<std::size_t>(c);
  // The head's chain: the block's output, its gradient and the head's own workspace; the forward
  // needs 2c sums, the backward the gradient of the dense output (values).
  return std::max(2 * values + dense_softmax_cross_entropy_workspace_floats(n, c, k),
                  2 * static_cast<std::size_t>(c));
}

void Backend::dense_forward_batch_norm(int n, int in, int out, const float* x, const float* weight,
                                       const float* bias, float* y, const BatchNormFinalize& bn,
                                       float* workspace) {
  check_dense_block(*this, "dense_forward_batch_norm", n, out, nullptr);
  float* sum = workspace;
  float* sumsq = workspace + out;
  dense_forward(n, in, out, x, weight, bias, y);
  batch_norm_stats(ChannelGeom{n, out, 1}, y, sum, sumsq);
  batch_norm_finalize(out, bn.count, sum, sumsq, bn.epsilon, bn.decay, bn.mean, bn.invstd,
                      bn.running_mean, bn.running_var);
}

void Backend::dense_block_softmax_cross_entropy(int n, int c, int k, const DenseBlockInput& block,
                                                const float* weight, const float* bias,
                                                const int32_t* labels, float grad_scale, float* dbn,
                                                float* sum_dy, float* sum_dy_xhat, float* dweight,
                                                float* dbias, float* metrics, float* workspace) {
  const DropoutArgs* dropout = block.has_dropout ? &block.dropout : nullptr;
  check_dense_block(*this, "dense_block_softmax_cross_entropy", n, c, dropout);
  const ChannelGeom g{n, c, 1};
  const std::size_t values = static_cast<std::size_t>(n) * static_cast<std::size_t>(c);
  float* a = workspace;            // the block's output, then the ReLU's output recomputed
  float* da = workspace + values;  // the head's input gradient
  float* head_workspace = workspace + 2 * values;
  batch_norm_apply(g, block.x, block.mean, block.invstd, block.gamma, block.beta, a);
  relu_forward(values, a, a);
  if (dropout) {
    dropout_forward(n, c, dropout->rate, dropout->key, dropout->step, dropout->step_scalars,
                    dropout->first_sample, a, a);
  }
  dense_softmax_cross_entropy(n, c, k, a, weight, bias, labels, grad_scale, da, dweight, dbias,
                              metrics, head_workspace);
  const float* relu_dy = da;
  if (dropout) {
    dropout_backward(n, c, dropout->rate, dropout->key, dropout->step, dropout->step_scalars,
                     dropout->first_sample, da, dbn);
    relu_dy = dbn;
  }
  batch_norm_apply(g, block.x, block.mean, block.invstd, block.gamma, block.beta, a);
  relu_forward(values, a, a);
  relu_backward(values, a, relu_dy, dbn);
  batch_norm_backward_reduce(g, dbn, block.x, block.mean, block.invstd, sum_dy, sum_dy_xhat);
}

void Backend::dense_backward_batch_norm(int n, int in, int out, const float* x,
                                        const BatchNormGradient& bn, const float* weight,
                                        float* dweight, float* dbias, float* dx, float* workspace) {
  check_dense_block(*this, "dense_backward_batch_norm", n, out, nullptr);
  float* dy = workspace;
  batch_norm_backward_apply(ChannelGeom{n, out, 1}, bn.dy, bn.x, bn.mean, bn.invstd, bn.gamma,
                            bn.sum_dy, bn.sum_dy_xhat, bn.count, dy);
  dense_backward(n, in, out, x, dy, weight, dweight, dbias, dx);
}

void Backend::bn_relu_pool_forward(const PoolGeom&, const float*, const float*, const float*,
                                   const float*, const float*, float*, uint8_t*) {
  no_fused_block(*this, "bn_relu_pool_forward");
}
void Backend::bn_relu_pool_backward_reduce(const PoolGeom&, const float*, const uint8_t*,
                                           const float*, const float*, const float*, float*,
                                           float*) {
  no_fused_block(*this, "bn_relu_pool_backward_reduce");
}
void Backend::bn_relu_pool_backward_apply(const PoolGeom&, const float*, const uint8_t*,
                                          const float*, const float*, const float*, const float*,
                                          const float*, const float*, double, float*) {
  no_fused_block(*this, "bn_relu_pool_backward_apply");
}

}  // namespace mnist
