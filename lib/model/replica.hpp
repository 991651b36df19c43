#pragma once
// One replica of the network on one backend: flat parameter, gradient, state and optimizer buffers,
// the layers bound to them, activations for up to max_batch samples. Everything is allocated here,
// once; forward/backward allocate nothing.

#include <memory>
#include <vector>

#include "backend/backend.hpp"
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

  // forward_train: every layer, then softmax cross-entropy, which accumulates loss sum, correct
  // count and sample count into metrics() and keeps the loss gradient. (When the backend fuses the
  // head, Backend::fuses_dense_head, a last dense layer runs with the loss as one call, its
  // gradients and the gradient of its input included: backward starts below it; with the dense
  // tail, Backend::fuses_dense_tail, the dense block in front of it runs inside its neighbours'
  // calls and backward starts at the dense layer below it.) backward:
  // gradients of (sum of per-sample losses) * grad_scale are ASSIGNED to grads() (callers use
  // 1/global batch, so summing the replicas' gradients gives the gradient of the global batch's
  // mean loss). Two calls so that callers can name the phase that failed.
  void forward_train(const PassContext& ctx, float grad_scale);
  void backward(const PassContext& ctx);
  void forward_loss(const PassContext& ctx);  // evaluation: metrics only
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
  const Model& model() const { return model_; }
  int max_batch() const { return max_batch_; }
  std::size_t device_bytes() const;  // memory this replica holds

 private:
  // Runs layers [0, end) from the input; returns the last one's output.
  const float* run_forward(const PassContext& ctx, std::size_t end);
  // forward_train's dense tail; false (nothing run) when this pass cannot take it.
  bool forward_dense_tail(const PassContext& ctx, float grad_scale);
  // Profiling: times `run` (synchronised around it) as the forward or backward of `plan`.
  template <class Run>
  void timed(bool forward, int plan, Run&& run);

  const Model& model_;
  Backend& backend_;
  int max_batch_;
  DeviceBuffer<float> params_, grads_, state_, moment1_, moment2_, workspace_;
  DeviceBuffer<float> input_;
  DeviceBuffer<int32_t> labels_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<DeviceBuffer<float>> activations_;   // one per non-view layer output
  std::vector<const float*> outputs_;              // per layer: its output (aliases for views)
  DeviceBuffer<float> grad_a_, grad_b_, dlogits_;  // ping-pong activation gradients
  // A last dense layer the backend runs with the loss (Backend::fuses_dense_head), or nullptr.
  const Layer* fused_head_ = nullptr;
  // True when the two layers before the fused head are a dense layer and a dense block the backend
  // runs with it as the dense tail (Backend::fuses_dense_tail); the block says per pass whether
  // it takes it (not with sync batch norm). tail_grad_: what the last forward_train that ran the
  // tail leaves for backward (dy nullptr: it did not run).
  bool dense_tail_ = false;
  BatchNormGradient tail_grad_;
  LayerTimes* profile_ = nullptr;
};

}  // namespace mnist
