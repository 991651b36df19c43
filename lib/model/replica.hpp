#pragma once
// One replica of the network on one backend: flat parameter, gradient, state and optimizer buffers,
// the layers bound to them, activations for up to max_batch samples. Everything is allocated here,
// once; forward/backward allocate nothing.

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "model/block_plan.hpp"
#include "model/layers.hpp"
#include "model/model.hpp"

namespace mnist {

class Replica {
 public:
  Replica(const Model& model, Backend& backend, int max_batch);

  // input(): x [max_batch, c, h, w] and labels(): int32 [max_batch], filled by
  // Backend::gather_batch, or in the training pass itself (PassContext::gather).
  float* input() const { return input_.data(); }
  int32_t* labels() const { return labels_.data(); }

  // forward_train: the training pass's blocks (block_plan.hpp) forward, ending with the loss,
  // which accumulates loss sum, correct count and sample count into metrics() and keeps what
  // backward starts from (the loss gradient, or the gradient a fused head or tail left). backward:
  // the same blocks in reverse; gradients of (sum of per-sample losses) * grad_scale are ASSIGNED
  // to grads() (callers use 1/global batch, so summing the replicas' gradients gives the gradient
  // of the global batch's mean loss). Two calls so that callers can name the phase that failed;
  // backward runs the pass kind of the forward_train before it.
  void forward_train(const PassContext& ctx, float grad_scale);
  void backward(const PassContext& ctx);
  // Metrics only, with the forward-only plan (PassKind::eval: every layer, then the loss), in
  // ctx's mode: evaluation, or training mode for the seed's display after an update.
  void forward_loss(const PassContext& ctx);
  // Evaluation forward only; returns the logits [ctx.n, classes] (device pointer, valid until the
  // next pass).
  const float* forward_logits(const PassContext& ctx);

  // The flat buffers (device pointers). grads() is followed by the metric slots, so one all-reduce
  // over reduce_count() floats carries gradients and metrics together.
  float* params() const { return params_.data(); }
  float* grads() const { return grads_.data(); }
  float* metrics() const { return grads_.data() + model_.param_count(); }
  std::size_t reduce_count() const { return model_.param_count() + kMetricSlots; }
  float* state() const { return state_.data(); }
  float* moment1() const { return moment1_.data(); }
  float* moment2() const { return moment2_.data(); }

  void reset_metrics();
  // Benchmarks: when set, every layer's forward and backward is timed (the backend is synchronised
  // around each call, which slows the step; never set during training). ms are ADDED per plan of
  // Model::layers; a fused block's time goes to its first plan (see layers()).
  struct LayerTimes {
    std::vector<double> forward_ms, backward_ms;
  };
  void set_profile(LayerTimes* times) { profile_ = times; }
  Backend& backend() const { return backend_; }
  // The layers as run: one per plan, except a fused block, which covers several (Layer::span).
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  // The blocks a pass of this kind runs (block_plan.hpp's describe_blocks): "conv_block(gathered)
  // conv_block flatten dense_tail".
  std::string block_plan(PassKind kind) const;
  const Model& model() const { return model_; }
  int max_batch() const { return max_batch_; }
  std::size_t device_bytes() const;  // memory this replica holds

 private:
  // What a block saved in its forward for its backward (the dense tail's batch-norm gradient
  // terms, or where the head left its input's gradient).
  struct Saved {
    BatchNormGradient tail;
    const float* dx = nullptr;
  };
  struct Pass {
    std::vector<BlockPlan> blocks;
    std::vector<Saved> saved;  // one per block
  };
  Pass& pass_for(const PassContext& ctx);
  // Runs `pass`'s blocks from the input up to its loss (included when `with_loss`); returns the
  // last output before the loss (the logits, when a loss block ends the pass).
  const float* run_forward(const PassContext& ctx, Pass& pass, float grad_scale, bool with_loss);
  const float* forward_layer(const PassContext& ctx, std::size_t i, const float* x,
                             const BatchGather* gather);
  void forward_head(const PassContext& ctx, const BlockPlan& block, const float* x,
                    float grad_scale, Saved& saved);
  void forward_tail(const PassContext& ctx, const BlockPlan& block, const float* x,
                    float grad_scale, Saved& saved);
  // The input of layer i in the last forward.
  const float* input_of(std::size_t i) const { return i == 0 ? input_.data() : outputs_[i - 1]; }
  // True when no layer before i computes anything: the gradient of layer i's input is the
  // network input's, which nobody uses.
  bool reaches_input(std::size_t i) const { return i <= first_computing_; }
  // Profiling: times `run` (synchronised around it) as the forward or backward of `plan`.
  template <class Run>
  void timed(bool forward, int plan, Run&& run);

  const Model& model_;
  Backend& backend_;
  int max_batch_;
  DeviceBuffer<float> params_, grads_, state_, moment1_, moment2_, workspace_;
  DeviceBuffer<float> input_;
  DeviceBuffer<int32_t> labels_;
  std::vector<LayerUnit> units_;  // plan_layers: what each of layers_ runs
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<DeviceBuffer<float>> activations_;   // one per non-view layer output
  std::vector<float*> activation_;                 // per layer: its buffer there (nullptr: a view)
  std::vector<const float*> outputs_;              // per layer: its output (aliases for views)
  std::size_t first_computing_ = 0;                // the first layer that is not a view
  DeviceBuffer<float> grad_a_, grad_b_, dlogits_;  // ping-pong activation gradients
  Pass train_local_, train_sync_, eval_;           // plan_blocks of each pass kind
  Pass* last_train_ = nullptr;                     // the pass the last forward_train ran
  LayerTimes* profile_ = nullptr;
};

}  // namespace mnist
