#include "model/replica.hpp"

#include <algorithm>
#include <chrono>

#include "core/error.hpp"

namespace mnist {

Replica::Replica(const Model& model, Backend& backend, int max_batch)
    : model_(model), backend_(backend), max_batch_(max_batch) {
  MNIST_CHECK(max_batch >= 1, "replica needs a batch of at least 1, got {}", max_batch);
  const std::size_t n = static_cast<std::size_t>(max_batch);
  params_ = DeviceBuffer<float>(backend, model.param_count());
  grads_ = DeviceBuffer<float>(backend, model.param_count() + kMetricSlots);
  state_ = DeviceBuffer<float>(backend, std::max<std::size_t>(model.state_count(), 1));
  moment1_ = DeviceBuffer<float>(backend, model.param_count());
  moment2_ = DeviceBuffer<float>(backend, model.param_count());
  input_ = DeviceBuffer<float>(backend, n * model.input().size());
  labels_ = DeviceBuffer<int32_t>(backend, n);
  backend.fill(grads_.data(), grads_.size(), 0.0f);
  backend.fill(moment1_.data(), moment1_.size(), 0.0f);
  backend.fill(moment2_.data(), moment2_.size(), 0.0f);

  LayerBinding binding{&backend, params_.data(), grads_.data(), state_.data(), nullptr};
  std::size_t workspace = 0, widest = model.input().size();
  const std::vector<LayerPlan>& plans = model.layers();
  for (std::size_t i = 0; i < plans.size(); i += layers_.back()->span()) {
    // A block the backend runs fused becomes one layer (its inner outputs are never stored).
    if (conv_block_fusable(model, i, backend))
      layers_.push_back(make_conv_block(model, plans[i], binding, max_batch));
    else if (dense_block_fusable(model, i, backend))
      layers_.push_back(make_dense_block(model, plans[i], binding, max_batch));
    else
      layers_.push_back(make_layer(model, plans[i], binding, max_batch));
    const LayerPlan& last = plans[i + layers_.back()->span() - 1];
    workspace = std::max(workspace, layers_.back()->workspace_floats());
    widest = std::max(widest, last.out.size());
    if (!layers_.back()->is_view()) activations_.emplace_back(backend, n * last.out.size());
  }
  const LayerPlan& head = layers_.back()->plan();
  if (backend.fuses_dense_head() && layers_.back()->span() == 1 &&
      head.spec.kind == LayerKind::dense) {
    fused_head_ = layers_.back().get();
    workspace = std::max(workspace, backend.dense_softmax_cross_entropy_workspace_floats(
                                        max_batch, static_cast<int>(head.in.size()),
                                        static_cast<int>(head.out.size())));
  }
  // The dense tail: dense -> dense block -> the fused head. The block is asked with a training
  // pass of its own statistics, the passes the tail is for.
  if (fused_head_ && layers_.size() >= 3) {
    const Layer& dense = *layers_[layers_.size() - 3];
    const LayerPlan& d = dense.plan();
    DenseBlockTail probe;
    PassContext training;
    training.n = 1;
    if (dense.span() == 1 && d.spec.kind == LayerKind::dense &&
        layers_[layers_.size() - 2]->dense_block_tail(training, probe) &&
        backend.fuses_dense_tail(d.out.c, static_cast<int>(head.out.size()))) {
      dense_tail_ = true;
      workspace =
          std::max(workspace, backend.dense_tail_workspace_floats(
                                  max_batch, d.in.c, d.out.c, static_cast<int>(head.out.size())));
    }
  }
  workspace_ = DeviceBuffer<float>(backend, std::max<std::size_t>(workspace, 1));
  for (auto& layer : layers_) layer->set_workspace(workspace_.data());
  grad_a_ = DeviceBuffer<float>(backend, n * widest);
  grad_b_ = DeviceBuffer<float>(backend, n * widest);
  dlogits_ = DeviceBuffer<float>(backend, n * model.classes());
  outputs_.resize(layers_.size());
}

std::size_t Replica::device_bytes() const {
  std::size_t total = params_.bytes() + grads_.bytes() + state_.bytes() + moment1_.bytes() +
                      moment2_.bytes() + workspace_.bytes() + input_.bytes() + labels_.bytes() +
                      grad_a_.bytes() + grad_b_.bytes() + dlogits_.bytes();
  for (const auto& a : activations_) total += a.bytes();
  return total;
}

void Replica::reset_metrics() {
  backend_.fill(metrics(), kMetricSlots, 0.0f);
}

template <class Run>
void Replica::timed(bool forward, int plan, Run&& run) {
  if (!profile_) return run();
  backend_.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  run();
  backend_.synchronize();
  (forward ? profile_->forward_ms : profile_->backward_ms)[plan] +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

const float* Replica::run_forward(const PassContext& ctx, std::size_t end) {
  // A batch still to gather: gathered here unless the first layer gathers it where it reads it.
  if (ctx.gather && !(end > 0 && layers_[0]->gathers_input(ctx))) {
    MNIST_CHECK(ctx.gather->x == input_.data() && ctx.gather->y == labels_.data(),
                "a batch gathered elsewhere than the replica's input");
    backend_.gather(*ctx.gather, ctx.n);
  }
  const float* x = input_.data();
  std::size_t act = 0;
  for (std::size_t i = 0; i < end; ++i) {
    if (layers_[i]->is_view()) {
      outputs_[i] = x;
      continue;
    }
    float* y = activations_[act++].data();
    timed(true, layers_[i]->plan().index, [&] { layers_[i]->forward(ctx, x, y); });
    outputs_[i] = y;
    x = y;
  }
  return x;
}

const float* Replica::forward_logits(const PassContext& ctx) {
  MNIST_CHECK(!ctx.training, "forward_logits is for evaluation");
  return run_forward(ctx, layers_.size());
}

void Replica::forward_loss(const PassContext& ctx) {
  const float* logits = run_forward(ctx, layers_.size());
  backend_.softmax_cross_entropy(ctx.n, model_.classes(), logits, labels_.data(), 0.0f, nullptr,
                                 metrics());
}

// True when no layer before `index` computes anything: the gradient of layer `index`'s input is
// the network input's, which nobody uses.
static bool reaches_input(const std::vector<std::unique_ptr<Layer>>& layers, std::size_t index) {
  return std::none_of(layers.begin(), layers.begin() + index,
                      [](const auto& l) { return !l->is_view(); });
}

bool Replica::forward_dense_tail(const PassContext& ctx, float grad_scale) {
  tail_grad_ = BatchNormGradient{};
  const std::size_t last = layers_.size() - 1, dense_at = last - 2;
  DenseBlockTail tail;
  if (!dense_tail_ || ctx.n < 1 || !layers_[last - 1]->dense_block_tail(ctx, tail)) return false;
  const float* x = run_forward(ctx, dense_at);
  const Layer& dense = *layers_[dense_at];
  const LayerPlan& d = dense.plan();
  // The dense layer's output buffer: activations_ has one per layer that is not a view.
  const auto act = std::count_if(layers_.begin(), layers_.begin() + dense_at,
                                 [](const auto& l) { return !l->is_view(); });
  float* z = activations_[static_cast<std::size_t>(act)].data();
  timed(true, d.index, [&] {
    backend_.dense_forward_batch_norm(ctx.n, d.in.c, d.out.c, x, dense.param(d.weight),
                                      dense.param(d.bias), z, tail.finalize, workspace_.data());
  });
  // The head, the block's forward and its backward up to the batch norm's sums: the gradient that
  // reaches the batch norm goes to grad_a_, where backward() starts.
  tail.input.x = z;
  const LayerPlan& head = fused_head_->plan();
  timed(true, head.index, [&] {
    backend_.dense_block_softmax_cross_entropy(
        ctx.n, d.out.c, static_cast<int>(head.out.size()), tail.input,
        fused_head_->param(head.weight), fused_head_->param(head.bias), labels_.data(), grad_scale,
        grad_a_.data(), tail.sum_dy, tail.sum_dy_xhat, fused_head_->grad(head.weight),
        fused_head_->grad(head.bias), metrics(), workspace_.data());
  });
  outputs_[dense_at] = z;
  outputs_[last - 1] = nullptr;  // the block's output is never stored
  outputs_[last] = nullptr;
  tail_grad_ = BatchNormGradient{
      grad_a_.data(),   z,           tail.input.mean,  tail.input.invstd,
      tail.input.gamma, tail.sum_dy, tail.sum_dy_xhat, static_cast<double>(ctx.n)};
  return true;
}

void Replica::forward_train(const PassContext& ctx, float grad_scale) {
  MNIST_CHECK(ctx.training, "forward_train needs a training pass");
  if (forward_dense_tail(ctx, grad_scale)) return;
  if (!fused_head_) {
    const float* logits = run_forward(ctx, layers_.size());
    backend_.softmax_cross_entropy(ctx.n, model_.classes(), logits, labels_.data(), grad_scale,
                                   dlogits_.data(), metrics());
    return;
  }
  // The head's forward, loss and backward in one call: its parameter gradients are assigned here
  // and the gradient of its input goes to grad_a_, where backward() starts.
  const std::size_t last = layers_.size() - 1;
  const float* x = run_forward(ctx, last);
  const LayerPlan& head = fused_head_->plan();
  float* dx = reaches_input(layers_, last) ? nullptr : grad_a_.data();
  timed(true, head.index, [&] {
    backend_.dense_softmax_cross_entropy(
        ctx.n, static_cast<int>(head.in.size()), static_cast<int>(head.out.size()), x,
        fused_head_->param(head.weight), fused_head_->param(head.bias), labels_.data(), grad_scale,
        dx, fused_head_->grad(head.weight), fused_head_->grad(head.bias), metrics(),
        workspace_.data());
  });
  outputs_[last] = nullptr;  // no logits are kept
}

void Replica::backward(const PassContext& ctx) {
  // Walk back through the layers; dy of layer i is dx of layer i+1. Views pass dy through. A fused
  // head has run its backward already and left its input's gradient in grad_a_.
  const float* dy = fused_head_ ? grad_a_.data() : dlogits_.data();
  float* spare[2] = {grad_a_.data(), grad_b_.data()};
  int next = fused_head_ ? 1 : 0;
  std::size_t end = layers_.size() - (fused_head_ ? 1 : 0);
  if (tail_grad_.dy) {
    // The dense tail: the dense layer's backward computes the block's batch-norm apply from the
    // gradient the head left in grad_a_.
    const std::size_t dense_at = layers_.size() - 3;
    const Layer& dense = *layers_[dense_at];
    const LayerPlan& d = dense.plan();
    const float* x = dense_at == 0 ? input_.data() : outputs_[dense_at - 1];
    float* dx = reaches_input(layers_, dense_at) ? nullptr : grad_b_.data();
    timed(false, d.index, [&] {
      backend_.dense_backward_batch_norm(ctx.n, d.in.c, d.out.c, x, tail_grad_,
                                         dense.param(d.weight), dense.grad(d.weight),
                                         dense.grad(d.bias), dx, workspace_.data());
    });
    dy = dx;
    next = 0;
    end = dense_at;
  }
  for (std::size_t i = end; i-- > 0;) {
    Layer& layer = *layers_[i];
    if (layer.is_view()) continue;
    const float* x = i == 0 ? input_.data() : outputs_[i - 1];
    // The gradient of the network's input is never used: skip computing it.
    float* dx = reaches_input(layers_, i) ? nullptr : spare[next];
    timed(false, layer.plan().index, [&] { layer.backward(ctx, x, outputs_[i], dy, dx); });
    dy = dx;
    next ^= 1;
  }
}

}  // namespace mnist
