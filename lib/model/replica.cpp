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
  units_ = plan_layers(model, backend);
  for (const LayerUnit& unit : units_) {
    // A block the backend runs fused becomes one layer (its inner outputs are never stored).
    layers_.push_back(make_layer(model, unit, binding, max_batch));
    const LayerPlan& last = plans[unit.first_plan + static_cast<std::size_t>(unit.span) - 1];
    workspace = std::max(workspace, layers_.back()->workspace_floats());
    widest = std::max(widest, last.out.size());
    if (!layers_.back()->is_view()) activations_.emplace_back(backend, n * last.out.size());
    activation_.push_back(layers_.back()->is_view() ? nullptr : activations_.back().data());
  }
  first_computing_ = static_cast<std::size_t>(
      std::find_if(layers_.begin(), layers_.end(), [](const auto& l) { return !l->is_view(); }) -
      layers_.begin());
  const int classes = model.classes();
  for (auto [pass, kind] : {std::pair{&train_local_, PassKind::train_local_batch_norm},
                            std::pair{&train_sync_, PassKind::train_sync_batch_norm},
                            std::pair{&eval_, PassKind::eval}}) {
    pass->blocks = plan_blocks(model, units_, backend, kind);
    pass->saved.resize(pass->blocks.size());
    // The fused head's and tail's workspace, which the layers' own sizes do not cover.
    for (const BlockPlan& block : pass->blocks) {
      if (block.kind == BlockKind::dense_head) {
        const LayerPlan& p = layers_[block.layer]->plan();
        workspace = std::max(workspace, backend.fused().workspace_floats(FusedShape::dense_head(
                                            max_batch, static_cast<int>(p.in.size()), classes)));
      } else if (block.kind == BlockKind::dense_tail) {
        const LayerPlan& p = layers_[block.layer]->plan();  // the tail's dense layer
        workspace = std::max(workspace, backend.fused().workspace_floats(FusedShape::dense_tail(
                                            max_batch, p.in.c, p.out.c, classes)));
      }
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

std::string Replica::block_plan(PassKind kind) const {
  const Pass& pass = kind == PassKind::eval                    ? eval_
                     : kind == PassKind::train_sync_batch_norm ? train_sync_
                                                               : train_local_;
  return describe_blocks(model_, units_, pass.blocks);
}

Replica::Pass& Replica::pass_for(const PassContext& ctx) {
  switch (pass_kind(ctx.training, static_cast<bool>(ctx.all_reduce_sum))) {
    case PassKind::train_local_batch_norm:
      return train_local_;
    case PassKind::train_sync_batch_norm:
      return train_sync_;
    case PassKind::eval:
      break;
  }
  return eval_;
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

const float* Replica::forward_layer(const PassContext& ctx, std::size_t i, const float* x,
                                    const BatchGather* gather) {
  Layer& layer = *layers_[i];
  if (layer.is_view()) return outputs_[i] = x;
  float* y = activation_[i];
  timed(true, layer.plan().index, [&] {
    if (gather)
      layer.forward_gathered(ctx, *gather, y);
    else
      layer.forward(ctx, x, y);
  });
  return outputs_[i] = y;
}

// The head's forward, loss and backward in one call: its parameter gradients are assigned here
// and the gradient of its input goes to grad_a_, where backward starts.
void Replica::forward_head(const PassContext& ctx, const BlockPlan& block, const float* x,
                           float grad_scale, Saved& saved) {
  const Layer& head = *layers_[block.layer];
  const LayerPlan& h = head.plan();
  float* dx = reaches_input(block.layer) ? nullptr : grad_a_.data();
  timed(true, h.index, [&] {
    backend_.fused().dense_softmax_cross_entropy(
        ctx.n, static_cast<int>(h.in.size()), static_cast<int>(h.out.size()), x,
        head.param(h.weight), head.param(h.bias), labels_.data(), grad_scale, dx,
        head.grad(h.weight), head.grad(h.bias), metrics(), workspace_.data());
  });
  outputs_[block.layer] = nullptr;  // no logits are kept
  saved.dx = dx;
}

// The dense tail: the dense layer's forward takes and finalizes the block's statistics, the head
// computes the block's output where it reads it, runs the loss and the block's backward up to
// its batch norm's sums (the gradient that reaches the batch norm goes to grad_a_), and the
// backward's dense layer applies the batch norm where it reads that gradient.
void Replica::forward_tail(const PassContext& ctx, const BlockPlan& block, const float* x,
                           float grad_scale, Saved& saved) {
  const std::size_t dense_at = block.layer, block_at = block.layer + 1, head_at = block.layer + 2;
  const Layer& dense = *layers_[dense_at];
  const Layer& head = *layers_[head_at];
  const LayerPlan& d = dense.plan();
  const LayerPlan& h = head.plan();
  DenseBlockTail tail = layers_[block_at]->dense_block_tail(ctx);
  float* z = activation_[dense_at];
  timed(true, d.index, [&] {
    backend_.fused().dense_forward_batch_norm(ctx.n, d.in.c, d.out.c, x, dense.param(d.weight),
                                              dense.param(d.bias), z, tail.finalize,
                                              workspace_.data());
  });
  tail.input.x = z;
  timed(true, h.index, [&] {
    backend_.fused().dense_block_softmax_cross_entropy(
        ctx.n, d.out.c, static_cast<int>(h.out.size()), tail.input, head.param(h.weight),
        head.param(h.bias), labels_.data(), grad_scale, grad_a_.data(), tail.sum_dy,
        tail.sum_dy_xhat, head.grad(h.weight), head.grad(h.bias), metrics(), workspace_.data());
  });
  outputs_[dense_at] = z;
  outputs_[block_at] = nullptr;  // the block's output is never stored
  outputs_[head_at] = nullptr;
  saved.tail = BatchNormGradient{
      grad_a_.data(),   z,           tail.input.mean,  tail.input.invstd,
      tail.input.gamma, tail.sum_dy, tail.sum_dy_xhat, static_cast<double>(ctx.n)};
}

const float* Replica::run_forward(const PassContext& ctx, Pass& pass, float grad_scale,
                                  bool with_loss) {
  // A batch still to gather: gathered here unless the first block gathers it where it reads it.
  const bool first_gathers = pass.blocks.front().kind == BlockKind::gathered_layer;
  if (ctx.gather) {
    MNIST_CHECK(ctx.gather->x == input_.data() && ctx.gather->y == labels_.data(),
                "a batch gathered elsewhere than the replica's input");
    if (!first_gathers) backend_.gather_batch(*ctx.gather, ctx.n);
  }
  const float* x = input_.data();
  for (std::size_t b = 0; b < pass.blocks.size(); ++b) {
    const BlockPlan& block = pass.blocks[b];
    switch (block.kind) {
      case BlockKind::layer:
        x = forward_layer(ctx, block.layer, x, nullptr);
        break;
      case BlockKind::gathered_layer:  // an eager step has gathered its batch already
        x = forward_layer(ctx, block.layer, x, ctx.gather);
        break;
      case BlockKind::dense_head:
        forward_head(ctx, block, x, grad_scale, pass.saved[b]);
        x = nullptr;
        break;
      case BlockKind::dense_tail:
        forward_tail(ctx, block, x, grad_scale, pass.saved[b]);
        x = nullptr;
        break;
      case BlockKind::loss:
        if (!with_loss) return x;
        // The forward-only plan keeps no gradient, whatever the pass's mode.
        backend_.softmax_cross_entropy(ctx.n, model_.classes(), x, labels_.data(), grad_scale,
                                       &pass == &eval_ ? nullptr : dlogits_.data(), metrics());
        break;
    }
  }
  return x;
}

const float* Replica::forward_logits(const PassContext& ctx) {
  MNIST_CHECK(!ctx.training, "forward_logits is for evaluation");
  return run_forward(ctx, eval_, 0.0f, /*with_loss=*/false);
}

// In the pass's mode: evaluation, or a training-mode pass for the metrics alone (batch
// statistics and dropout), the forward-only plan either way.
void Replica::forward_loss(const PassContext& ctx) {
  run_forward(ctx, eval_, 0.0f, /*with_loss=*/true);
}

void Replica::forward_train(const PassContext& ctx, float grad_scale) {
  MNIST_CHECK(ctx.training, "forward_train needs a training pass");
  last_train_ = nullptr;
  Pass& pass = pass_for(ctx);
  run_forward(ctx, pass, grad_scale, /*with_loss=*/true);
  last_train_ = &pass;
}

void Replica::backward(const PassContext& ctx) {
  MNIST_CHECK(last_train_ && last_train_ == &pass_for(ctx),
              "backward needs the forward_train of the same pass kind before it");
  Pass& pass = *last_train_;
  // Walk back through the blocks; dy of a block is dx of the one after it. Views pass dy through.
  // Each gradient goes to the ping-pong buffer that does not hold dy.
  const float* dy = nullptr;
  const auto spare = [&] { return dy == grad_a_.data() ? grad_b_.data() : grad_a_.data(); };
  for (std::size_t b = pass.blocks.size(); b-- > 0;) {
    const BlockPlan& block = pass.blocks[b];
    switch (block.kind) {
      case BlockKind::loss:
        dy = dlogits_.data();
        break;
      case BlockKind::dense_head:  // its backward ran in its forward
        dy = pass.saved[b].dx;
        break;
      case BlockKind::dense_tail: {
        const Layer& dense = *layers_[block.layer];
        const LayerPlan& d = dense.plan();
        dy = pass.saved[b].tail.dy;  // the head's gradient at the block's batch norm
        float* dx = reaches_input(block.layer) ? nullptr : spare();
        timed(false, d.index, [&] {
          backend_.fused().dense_backward_batch_norm(ctx.n, d.in.c, d.out.c, input_of(block.layer),
                                                     pass.saved[b].tail, dense.param(d.weight),
                                                     dense.grad(d.weight), dense.grad(d.bias), dx,
                                                     workspace_.data());
        });
        dy = dx;
        break;
      }
      case BlockKind::layer:
      case BlockKind::gathered_layer: {
        Layer& layer = *layers_[block.layer];
        if (layer.is_view()) break;
        // The gradient of the network's input is never used: skip computing it.
        float* dx = reaches_input(block.layer) ? nullptr : spare();
        timed(false, layer.plan().index,
              [&] { layer.backward(ctx, input_of(block.layer), outputs_[block.layer], dy, dx); });
        dy = dx;
        break;
      }
    }
  }
}

}  // namespace mnist
