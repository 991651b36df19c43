#include "model/layers.hpp"

#include "core/error.hpp"
#include "model/model.hpp"

namespace mnist {

void Layer::forward(const PassContext& ctx, const float* x, float* y) {
  MNIST_CHECK(ctx.n >= 1 && ctx.n <= max_batch_, "layer {}: batch of {} outside [1, {}]",
              plan_.label(), ctx.n, max_batch_);
  do_forward(ctx, x, y);
}

void Layer::backward(const PassContext& ctx, const float* x, const float* y, const float* dy,
                     float* dx) {
  MNIST_CHECK(ctx.n >= 1 && ctx.n <= max_batch_, "layer {}: batch of {} outside [1, {}]",
              plan_.label(), ctx.n, max_batch_);
  MNIST_CHECK(ctx.training, "layer {}: backward outside training mode", plan_.label());
  do_backward(ctx, x, y, dy, dx);
}

std::string Layer::label() const {
  std::string out = plan_.label();
  for (int i = 1; i < span(); ++i)
    out += std::string("+") + to_string(model_.layers()[plan_.index + i].spec.kind);
  return out;
}

void Layer::forward_gathered(const PassContext&, const BatchGather&, float*) {
  MNIST_THROW(RuntimeError, "layer {}: does not gather its input (the block plan asked it to)",
              label());
}

DenseBlockTail Layer::dense_block_tail(const PassContext&) const {
  MNIST_THROW(RuntimeError, "layer {}: is not a dense block (the block plan made it a tail's)",
              label());
}

float* Layer::param(int slot) const {
  return slot < 0 ? nullptr : bind_.params + model_.params()[slot].offset;
}
float* Layer::grad(int slot) const {
  return slot < 0 ? nullptr : bind_.grads + model_.params()[slot].offset;
}
float* Layer::state(int slot) const {
  return slot < 0 ? nullptr : bind_.state + model_.state()[slot].offset;
}

Conv2dGeom conv2d_geom(const LayerPlan& plan, int n) {
  const LayerSpec& s = plan.spec;
  Conv2dGeom g;
  g.n = n;
  g.c = plan.in.c;
  g.h = plan.in.h;
  g.w = plan.in.w;
  g.k = s.filters;
  g.kh = g.kw = s.kernel;
  g.stride_h = g.stride_w = s.stride;
  g.out_h = plan.out.h;
  g.out_w = plan.out.w;
  // Leading padding: what "same" needs (TensorFlow puts the odd pixel last) or the explicit count.
  const auto lead = [&](int in, int out) {
    if (s.padding == PaddingMode::valid) return 0;
    if (s.padding == PaddingMode::explicit_pixels) return s.padding_pixels;
    return std::max((out - 1) * s.stride + s.kernel - in, 0) / 2;
  };
  g.pad_h = lead(g.h, g.out_h);
  g.pad_w = lead(g.w, g.out_w);
  return g;
}

namespace {

class Conv2dLayer final : public Layer {
 public:
  using Layer::Layer;
  std::size_t workspace_floats() const override {
    return be().conv2d_workspace_floats(geom(max_batch_));
  }

 private:
  Conv2dGeom geom(int n) const { return conv2d_geom(plan_, n); }
  void do_forward(const PassContext& ctx, const float* x, float* y) override {
    be().conv2d_forward(geom(ctx.n), x, param(plan_.weight), param(plan_.bias), y, bind_.workspace);
  }
  void do_backward(const PassContext& ctx, const float* x, const float*, const float* dy,
                   float* dx) override {
    be().conv2d_backward(geom(ctx.n), x, dy, param(plan_.weight), grad(plan_.weight),
                         grad(plan_.bias), dx, bind_.workspace);
  }
};

}  // namespace

PoolGeom max_pool_geom(const LayerPlan& plan, int n) {
  PoolGeom g;
  g.n = n;
  g.c = plan.in.c;
  g.h = plan.in.h;
  g.w = plan.in.w;
  g.size_h = g.size_w = plan.spec.pool_size;
  g.stride_h = g.stride_w = plan.spec.stride;
  g.out_h = plan.out.h;
  g.out_w = plan.out.w;
  return g;
}

namespace {

class MaxPoolLayer final : public Layer {
 public:
  MaxPoolLayer(const Model& m, const LayerPlan& p, const LayerBinding& b, int max_batch)
      : Layer(m, p, b, max_batch),
        argmax_(*b.backend, static_cast<std::size_t>(max_batch) * p.out.size()) {}

 private:
  PoolGeom geom(int n) const { return max_pool_geom(plan_, n); }
  void do_forward(const PassContext& ctx, const float* x, float* y) override {
    be().max_pool_forward(geom(ctx.n), x, y, argmax_.data());
  }
  void do_backward(const PassContext& ctx, const float*, const float*, const float* dy,
                   float* dx) override {
    if (dx) be().max_pool_backward(geom(ctx.n), dy, argmax_.data(), dx);
  }
  DeviceBuffer<int32_t> argmax_;
};

class ReluLayer final : public Layer {
 public:
  using Layer::Layer;

 private:
  void do_forward(const PassContext& ctx, const float* x, float* y) override {
    be().relu_forward(ctx.n * plan_.out.size(), x, y);
  }
  void do_backward(const PassContext& ctx, const float*, const float* y, const float* dy,
                   float* dx) override {
    if (dx) be().relu_backward(ctx.n * plan_.out.size(), y, dy, dx);
  }
};

class FlattenLayer final : public Layer {
 public:
  using Layer::Layer;
  bool is_view() const override { return true; }

 private:
  // Never called: the replica aliases the buffers of views instead.
  void do_forward(const PassContext&, const float*, float*) override {}
  void do_backward(const PassContext&, const float*, const float*, const float*, float*) override {}
};

class DenseLayer final : public Layer {
 public:
  // fused_backward: the block plan's LayerGroup::fused_dense_backward (one call for both products).
  DenseLayer(const Model& model, const LayerPlan& plan, const LayerBinding& binding, int max_batch,
             bool fused_backward)
      : Layer(model, plan, binding, max_batch), fused_backward_(fused_backward) {}

 private:
  void do_forward(const PassContext& ctx, const float* x, float* y) override {
    be().dense_forward(ctx.n, plan_.in.c, plan_.out.c, x, param(plan_.weight), param(plan_.bias),
                       y);
  }
  void do_backward(const PassContext& ctx, const float* x, const float*, const float* dy,
                   float* dx) override {
    const int in = plan_.in.c, out = plan_.out.c;
    const float* weight = param(plan_.weight);
    if (fused_backward_)
      return be().fused().dense_backward(ctx.n, in, out, x, dy, weight, grad(plan_.weight),
                                         grad(plan_.bias), dx);
    be().dense_backward_weights(ctx.n, in, out, x, dy, grad(plan_.weight), grad(plan_.bias));
    if (dx) be().dense_backward_data(ctx.n, in, out, dy, weight, dx);
  }

  bool fused_backward_;
};

// A dropout's mask is keyed by (seed, layer index); its counters are (step, global sample,
// element): see Backend. DropoutLayer and DenseBlockLayer draw it with this key.
RngKey dropout_key(const PassContext& ctx, const LayerPlan& dropout) {
  return make_rng_key(ctx.seed, 0x2000u + static_cast<uint32_t>(dropout.index));
}

class DropoutLayer final : public Layer {
 public:
  using Layer::Layer;

 private:
  RngKey key(const PassContext& ctx) const { return dropout_key(ctx, plan_); }
  void do_forward(const PassContext& ctx, const float* x, float* y) override {
    const int per_sample = static_cast<int>(plan_.out.size());
    if (!ctx.training || plan_.spec.rate == 0.0f) {
      be().copy_on_device(y, x, sizeof(float) * ctx.n * per_sample);
      return;
    }
    be().dropout_forward(ctx.n, per_sample, plan_.spec.rate, key(ctx), ctx.step_scalars,
                         ctx.first_sample, x, y);
  }
  void do_backward(const PassContext& ctx, const float*, const float*, const float* dy,
                   float* dx) override {
    if (!dx) return;
    const int per_sample = static_cast<int>(plan_.out.size());
    if (plan_.spec.rate == 0.0f) {
      be().copy_on_device(dx, dy, sizeof(float) * ctx.n * per_sample);
      return;
    }
    be().dropout_backward(ctx.n, per_sample, plan_.spec.rate, key(ctx), ctx.step_scalars,
                          ctx.first_sample, dy, dx);
  }
};

// Batch norm over (n, h, w) per channel. Training uses the batch's statistics (this slice's, or
// the global batch's when ctx.all_reduce_sum is set) and updates the running statistics in place;
// evaluation uses the running statistics.
// The batch-norm steps BatchNormLayer, ConvBlockLayer and DenseBlockLayer share around their own
// kernels.
// The normalisation group's size: this slice, or the global batch with sync batch norm.
double batch_norm_group_count(const PassContext& ctx, int plane) {
  const int n = ctx.all_reduce_sum ? ctx.global_n : ctx.n;
  return static_cast<double>(n) * plane;
}

// `sums` holds this slice's per-channel [sum, sum of squares]: summed over the replicas with sync
// batch norm, then turned into mean / invstd and folded into the running statistics.
void finalize_batch_norm_stats(Backend& be, const PassContext& ctx, const LayerSpec& s, int c,
                               int plane, DeviceBuffer<float>& sums, float* mean, float* invstd,
                               float* running_mean, float* running_var) {
  if (ctx.all_reduce_sum) ctx.all_reduce_sum(sums.data(), sums.size());
  be.batch_norm_finalize(c, batch_norm_group_count(ctx, plane), sums.data(), sums.data() + c,
                         s.epsilon, s.decay, mean, invstd, running_mean, running_var);
}

// `grad_sums` holds this slice's per-channel [sum_dy, sum_dy_xhat]: they are this slice's share of
// the parameter gradients dbeta, dgamma (either nullptr when not learned; the gradient all-reduce
// sums the slices), taken before the sync reduction, which would otherwise count them W times.
// Then, when the apply follows, sync batch norm sums them over the replicas for it.
void take_batch_norm_grads(Backend& be, const PassContext& ctx, DeviceBuffer<float>& grad_sums,
                           float* dbeta, float* dgamma, bool apply_follows) {
  const std::size_t c = grad_sums.size() / 2;
  if (dbeta) be.copy_on_device(dbeta, grad_sums.data(), sizeof(float) * c);
  if (dgamma) be.copy_on_device(dgamma, grad_sums.data() + c, sizeof(float) * c);
  if (apply_follows && ctx.all_reduce_sum) ctx.all_reduce_sum(grad_sums.data(), grad_sums.size());
}

class BatchNormLayer final : public Layer {
 public:
  BatchNormLayer(const Model& m, const LayerPlan& p, const LayerBinding& b, int max_batch)
      : Layer(m, p, b, max_batch),
        sums_(*b.backend, 2 * static_cast<std::size_t>(p.in.c)),
        mean_(*b.backend, p.in.c),
        invstd_(*b.backend, p.in.c),
        grad_sums_(*b.backend, 2 * static_cast<std::size_t>(p.in.c)) {}

 private:
  int channels() const { return plan_.in.c; }
  ChannelGeom geom(int n) const { return ChannelGeom{n, plan_.in.c, plan_.in.h * plan_.in.w}; }
  double group_count(const PassContext& ctx) const {
    return batch_norm_group_count(ctx, plan_.in.h * plan_.in.w);
  }

  void do_forward(const PassContext& ctx, const float* x, float* y) override {
    const int c = channels();
    const LayerSpec& s = plan_.spec;
    if (ctx.training) {
      be().batch_norm_stats(geom(ctx.n), x, sums_.data(), sums_.data() + c);
      finalize_batch_norm_stats(be(), ctx, s, c, plan_.in.h * plan_.in.w, sums_, mean_.data(),
                                invstd_.data(), state(plan_.running_mean),
                                state(plan_.running_var));
    } else {
      be().batch_norm_inference_params(c, state(plan_.running_mean), state(plan_.running_var),
                                       s.epsilon, mean_.data(), invstd_.data());
    }
    be().batch_norm_apply(geom(ctx.n), x, mean_.data(), invstd_.data(), param(plan_.gamma),
                          param(plan_.beta), y);
  }

  void do_backward(const PassContext& ctx, const float* x, const float*, const float* dy,
                   float* dx) override {
    const int c = channels();
    float* sum_dy = grad_sums_.data();
    float* sum_dy_xhat = grad_sums_.data() + c;
    be().batch_norm_backward_reduce(geom(ctx.n), dy, x, mean_.data(), invstd_.data(), sum_dy,
                                    sum_dy_xhat);
    take_batch_norm_grads(be(), ctx, grad_sums_, grad(plan_.beta), grad(plan_.gamma), dx);
    if (!dx) return;
    be().batch_norm_backward_apply(geom(ctx.n), dy, x, mean_.data(), invstd_.data(),
                                   param(plan_.gamma), sum_dy, sum_dy_xhat, group_count(ctx), dx);
  }

  DeviceBuffer<float> sums_, mean_, invstd_, grad_sums_;
};

// conv2d -> batch_norm -> relu -> max_pool (2x2, stride 2) as one layer, on engines that fuse the
// last three (FusedKernels::supports). The same math as the four layers, but the batch norm
// and ReLU outputs are never stored: forward keeps the convolution's output, the pooled output
// and one mask byte per pooled value; backward makes the convolution's input gradient in two
// passes. Statistics (local or synced through ctx.all_reduce_sum) follow BatchNormLayer exactly.
class ConvBlockLayer final : public Layer {
 public:
  ConvBlockLayer(const Model& m, const LayerPlan& conv, const LayerBinding& b, int max_batch)
      : Layer(m, conv, b, max_batch),
        bn_(m.layers()[conv.index + 1]),
        pool_(m.layers()[conv.index + 3]),
        conv_out_(*b.backend, static_cast<std::size_t>(max_batch) * conv.out.size()),
        dconv_(*b.backend,
               b.backend->fused().workspace_floats(FusedShape::conv_block(
                   conv2d_geom(conv, max_batch), max_pool_geom(pool_, max_batch), conv.bias >= 0))),
        mask_(*b.backend, static_cast<std::size_t>(max_batch) * pool_.out.size()),
        sums_(*b.backend, 2 * static_cast<std::size_t>(conv.out.c)),
        mean_(*b.backend, conv.out.c),
        invstd_(*b.backend, conv.out.c),
        grad_sums_(*b.backend, 2 * static_cast<std::size_t>(conv.out.c)) {}

  int span() const override { return 4; }
  std::size_t workspace_floats() const override {
    return be().conv2d_workspace_floats(conv2d_geom(plan_, max_batch_));
  }

 private:
  int channels() const { return plan_.out.c; }
  double group_count(const PassContext& ctx) const {
    return batch_norm_group_count(ctx, plan_.out.h * plan_.out.w);
  }

  // The statistics' finalize the fused convolution runs in training with the slice's own ones.
  BatchNormFinalize local_finalize(const PassContext& ctx) {
    const LayerSpec& s = bn_.spec;
    return BatchNormFinalize{group_count(ctx),      s.epsilon,      s.decay,
                             mean_.data(),          invstd_.data(), state(bn_.running_mean),
                             state(bn_.running_var)};
  }

 public:
  void forward_gathered(const PassContext& ctx, const BatchGather& batch, float* y) override {
    MNIST_CHECK(ctx.n >= 1 && ctx.n <= max_batch_ && ctx.training && !ctx.all_reduce_sum,
                "{}: gathers its batch in training with local statistics, n in [1, {}]; got n {}",
                label(), max_batch_, ctx.n);
    const int c = channels();
    be().fused().conv2d_forward_batch_norm_gathered(
        conv2d_geom(plan_, ctx.n), batch, param(plan_.weight), param(plan_.bias), conv_out_.data(),
        sums_.data(), sums_.data() + c, local_finalize(ctx), bind_.workspace);
    pool_forward(ctx, y);
  }

 private:
  void pool_forward(const PassContext& ctx, float* y) {
    be().fused().bn_relu_pool_forward(max_pool_geom(pool_, ctx.n), conv_out_.data(), mean_.data(),
                                      invstd_.data(), param(bn_.gamma), param(bn_.beta), y,
                                      mask_.data());
  }

  void do_forward(const PassContext& ctx, const float* x, float* y) override {
    const int c = channels();
    const LayerSpec& s = bn_.spec;
    if (ctx.training && !ctx.all_reduce_sum) {
      // The statistics are taken, and finalized, by the convolution while its output is in cache.
      const BatchNormFinalize finalize = local_finalize(ctx);
      be().fused().conv2d_forward_stats(conv2d_geom(plan_, ctx.n), x, param(plan_.weight),
                                        param(plan_.bias), conv_out_.data(), sums_.data(),
                                        sums_.data() + c, &finalize, bind_.workspace);
    } else if (ctx.training) {
      // Sync batch norm: the slices' sums are all-reduced between the statistics and the finalize.
      be().fused().conv2d_forward_stats(conv2d_geom(plan_, ctx.n), x, param(plan_.weight),
                                        param(plan_.bias), conv_out_.data(), sums_.data(),
                                        sums_.data() + c, nullptr, bind_.workspace);
      finalize_batch_norm_stats(be(), ctx, s, c, plan_.out.h * plan_.out.w, sums_, mean_.data(),
                                invstd_.data(), state(bn_.running_mean), state(bn_.running_var));
    } else {
      be().conv2d_forward(conv2d_geom(plan_, ctx.n), x, param(plan_.weight), param(plan_.bias),
                          conv_out_.data(), bind_.workspace);
      be().batch_norm_inference_params(c, state(bn_.running_mean), state(bn_.running_var),
                                       s.epsilon, mean_.data(), invstd_.data());
    }
    pool_forward(ctx, y);
  }

  void do_backward(const PassContext& ctx, const float* x, const float*, const float* dy,
                   float* dx) override {
    const int c = channels();
    const PoolGeom pg = max_pool_geom(pool_, ctx.n);
    float* sum_dy = grad_sums_.data();
    float* sum_dy_xhat = grad_sums_.data() + c;
    be().fused().bn_relu_pool_backward_reduce(pg, dy, mask_.data(), conv_out_.data(), mean_.data(),
                                              invstd_.data(), sum_dy, sum_dy_xhat);
    take_batch_norm_grads(be(), ctx, grad_sums_, grad(bn_.beta), grad(bn_.gamma), true);
    ConvBlockGradient block;
    block.pool = pg;
    block.dy = dy;
    block.mask = mask_.data();
    block.conv_out = conv_out_.data();
    block.mean = mean_.data();
    block.invstd = invstd_.data();
    block.gamma = param(bn_.gamma);
    block.sum_dy = sum_dy;
    block.sum_dy_xhat = sum_dy_xhat;
    block.count = group_count(ctx);
    // The batch norm's gradient goes to the convolution's backward (engines may compute it where
    // the convolution reads it instead of storing it in dconv_, which then was never allocated).
    be().fused().conv_block_backward(conv2d_geom(plan_, ctx.n), block, x, param(plan_.weight),
                                     grad(plan_.weight), grad(plan_.bias), dx, dconv_.data(),
                                     bind_.workspace);
  }

  const LayerPlan& bn_;
  const LayerPlan& pool_;
  DeviceBuffer<float> conv_out_, dconv_;
  DeviceBuffer<uint8_t> mask_;
  DeviceBuffer<float> sums_, mean_, invstd_, grad_sums_;
};

// batch_norm -> relu (-> dropout) over a dense layer's output [n, c] (a flat input: each channel
// one feature) as one layer, on engines that fuse it (FusedKernels::supports). Training with
// the slice's own statistics makes the two fused calls; sync batch norm runs the chain of separate
// ops with the all-reduces where BatchNormLayer makes them; evaluation applies the running
// statistics and the ReLU (dropout is the identity). Its output is the dropout's (or the ReLU's
// when no dropout follows); the ReLU's output is never stored.
class DenseBlockLayer final : public Layer {
 public:
  DenseBlockLayer(const Model& m, const LayerPlan& bn, const LayerBinding& b, int max_batch)
      : Layer(m, bn, b, max_batch),
        dropout_(dense_block_dropout(m, bn.index)),
        sums_(*b.backend, 2 * static_cast<std::size_t>(bn.in.c)),
        mean_(*b.backend, bn.in.c),
        invstd_(*b.backend, bn.in.c),
        grad_sums_(*b.backend, 2 * static_cast<std::size_t>(bn.in.c)) {}

  int span() const override { return dropout_ ? 3 : 2; }
  DenseBlockTail dense_block_tail(const PassContext& ctx) const override {
    MNIST_CHECK(ctx.training && !ctx.all_reduce_sum,
                "{}: a dense tail runs in training with the slice's own statistics", label());
    const LayerSpec& s = plan_.spec;
    DenseBlockTail tail;
    tail.finalize = BatchNormFinalize{static_cast<double>(ctx.n),
                                      s.epsilon,
                                      s.decay,
                                      mean_.data(),
                                      invstd_.data(),
                                      state(plan_.running_mean),
                                      state(plan_.running_var)};
    tail.input.mean = mean_.data();
    tail.input.invstd = invstd_.data();
    tail.input.gamma = param(plan_.gamma);
    tail.input.beta = param(plan_.beta);
    tail.input.has_dropout = dropout_args(ctx, tail.input.dropout);
    // dbeta and dgamma are the sums (take_batch_norm_grads without sync batch norm).
    tail.sum_dy = plan_.beta >= 0 ? grad(plan_.beta) : grad_sums_.data();
    tail.sum_dy_xhat = plan_.gamma >= 0 ? grad(plan_.gamma) : grad_sums_.data() + channels();
    return tail;
  }
  // The fused calls' scratch, which the sync batch norm chain below uses too (two [n, c] buffers).
  std::size_t workspace_floats() const override {
    return be().fused().workspace_floats(FusedShape::dense_block(max_batch_, channels()));
  }

  // The dropout plan right after batch_norm -> relu at `bn_index`, or nullptr.
  static const LayerPlan* dense_block_dropout(const Model& m, int bn_index) {
    const std::size_t at = static_cast<std::size_t>(bn_index) + 2;
    return at < m.layers().size() && m.layers()[at].spec.kind == LayerKind::dropout
               ? &m.layers()[at]
               : nullptr;
  }

 private:
  int channels() const { return plan_.in.c; }
  ChannelGeom geom(int n) const { return ChannelGeom{n, channels(), 1}; }
  std::size_t values(int n) const {
    return static_cast<std::size_t>(n) * static_cast<std::size_t>(channels());
  }
  // The dropout's arguments in this pass, as DropoutLayer passes them; false when there is none
  // (or its rate is 0: DropoutLayer then copies its input).
  bool dropout_args(const PassContext& ctx, DropoutArgs& args) const {
    if (!dropout_ || dropout_->spec.rate == 0.0f) return false;
    args.rate = dropout_->spec.rate;
    args.key = dropout_key(ctx, *dropout_);
    args.step_scalars = ctx.step_scalars;
    args.first_sample = ctx.first_sample;
    return true;
  }

  void do_forward(const PassContext& ctx, const float* x, float* y) override {
    const int c = channels();
    const LayerSpec& s = plan_.spec;
    float* gamma = param(plan_.gamma);
    float* beta = param(plan_.beta);
    if (!ctx.training) {
      be().batch_norm_inference_params(c, state(plan_.running_mean), state(plan_.running_var),
                                       s.epsilon, mean_.data(), invstd_.data());
      be().batch_norm_apply(geom(ctx.n), x, mean_.data(), invstd_.data(), gamma, beta, y);
      be().relu_forward(values(ctx.n), y, y);
      return;
    }
    DropoutArgs args;
    const DropoutArgs* dropout = dropout_args(ctx, args) ? &args : nullptr;
    if (!ctx.all_reduce_sum) {
      be().fused().dense_block_forward(ctx.n, c, x, s.epsilon, s.decay, gamma, beta, dropout, y,
                                       mean_.data(), invstd_.data(), state(plan_.running_mean),
                                       state(plan_.running_var), bind_.workspace);
      return;
    }
    // Sync batch norm: the statistics are summed over the replicas between the ops.
    be().batch_norm_stats(geom(ctx.n), x, sums_.data(), sums_.data() + c);
    finalize_batch_norm_stats(be(), ctx, s, c, 1, sums_, mean_.data(), invstd_.data(),
                              state(plan_.running_mean), state(plan_.running_var));
    // Each op reads and writes element i alone, so y serves as their input and output.
    be().batch_norm_apply(geom(ctx.n), x, mean_.data(), invstd_.data(), gamma, beta, y);
    be().relu_forward(values(ctx.n), y, y);
    if (dropout) {
      be().dropout_forward(ctx.n, c, dropout->rate, dropout->key, dropout->step_scalars,
                           dropout->first_sample, y, y);
    }
  }

  void do_backward(const PassContext& ctx, const float* x, const float*, const float* dy,
                   float* dx) override {
    const int c = channels();
    DropoutArgs args;
    const DropoutArgs* dropout = dropout_args(ctx, args) ? &args : nullptr;
    float* gamma = param(plan_.gamma);
    float* beta = param(plan_.beta);
    if (!ctx.all_reduce_sum) {
      be().fused().dense_block_backward(ctx.n, c, x, mean_.data(), invstd_.data(), gamma, beta,
                                        dropout, dy, dx, grad(plan_.gamma), grad(plan_.beta),
                                        bind_.workspace);
      return;
    }
    // Sync batch norm: the chain of FusedKernels::dense_block_backward with BatchNormLayer's
    // all-reduce of the gradient sums before the apply.
    const std::size_t v = values(ctx.n);
    float* dbn = bind_.workspace;       // the gradient that reaches the batch norm
    float* relu = bind_.workspace + v;  // the ReLU's output, recomputed
    const float* relu_dy = dy;
    if (dropout) {
      be().dropout_backward(ctx.n, c, dropout->rate, dropout->key, dropout->step_scalars,
                            dropout->first_sample, dy, dbn);
      relu_dy = dbn;
    }
    be().batch_norm_apply(geom(ctx.n), x, mean_.data(), invstd_.data(), gamma, beta, relu);
    be().relu_forward(v, relu, relu);
    be().relu_backward(v, relu, relu_dy, dbn);
    float* sum_dy = grad_sums_.data();
    float* sum_dy_xhat = grad_sums_.data() + c;
    be().batch_norm_backward_reduce(geom(ctx.n), dbn, x, mean_.data(), invstd_.data(), sum_dy,
                                    sum_dy_xhat);
    take_batch_norm_grads(be(), ctx, grad_sums_, grad(plan_.beta), grad(plan_.gamma), dx);
    if (!dx) return;
    be().batch_norm_backward_apply(geom(ctx.n), dbn, x, mean_.data(), invstd_.data(), gamma, sum_dy,
                                   sum_dy_xhat, batch_norm_group_count(ctx, 1), dx);
  }

  const LayerPlan* dropout_;
  DeviceBuffer<float> sums_, mean_, invstd_, grad_sums_;
};

}  // namespace

std::unique_ptr<Layer> make_layer(const Model& model, const LayerUnit& unit,
                                  const LayerBinding& binding, int max_batch) {
  const LayerPlan& plan = model.layers()[unit.first_plan];
  switch (unit.group) {
    case LayerGroup::conv_block:
      return std::make_unique<ConvBlockLayer>(model, plan, binding, max_batch);
    case LayerGroup::dense_block:
      return std::make_unique<DenseBlockLayer>(model, plan, binding, max_batch);
    case LayerGroup::fused_dense_backward:
      return std::make_unique<DenseLayer>(model, plan, binding, max_batch, true);
    case LayerGroup::single:
      break;
  }
  switch (plan.spec.kind) {
    case LayerKind::conv2d:
      return std::make_unique<Conv2dLayer>(model, plan, binding, max_batch);
    case LayerKind::max_pool:
      return std::make_unique<MaxPoolLayer>(model, plan, binding, max_batch);
    case LayerKind::batch_norm:
      return std::make_unique<BatchNormLayer>(model, plan, binding, max_batch);
    case LayerKind::relu:
      return std::make_unique<ReluLayer>(model, plan, binding, max_batch);
    case LayerKind::dense:
      return std::make_unique<DenseLayer>(model, plan, binding, max_batch, false);
    case LayerKind::dropout:
      return std::make_unique<DropoutLayer>(model, plan, binding, max_batch);
    case LayerKind::flatten:
      return std::make_unique<FlattenLayer>(model, plan, binding, max_batch);
  }
  MNIST_THROW(RuntimeError, "layer {}: no implementation for this kind", plan.label());
}

}  // namespace mnist
