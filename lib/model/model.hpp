#pragma once
// The network as a plan: the ordered layer list with inferred shapes, the layout of every trainable
// tensor inside the one flat parameter buffer, batch-norm running statistics inside the flat state
// buffer, and per-sample FLOPs. Backend-neutral and buffer-free: a Replica (replica.hpp)
// instantiates it on one device.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config/experiment.hpp"

namespace mnist {

// The most values any one tensor may hold: a per-sample activation, a parameter tensor, the flat
// parameter buffer, and (train/run_memory.hpp) a batch's activation. Kernels index a tensor with
// 32-bit integers on the GPU.
inline constexpr int64_t kMaxTensorValues = 0x7fffffff;

// Per-sample activation shape (the batch dimension n is added at run time). Dense outputs are c x 1
// x 1.
struct SampleShape {
  int c = 0, h = 0, w = 0;
  std::size_t size() const { return static_cast<std::size_t>(c) * h * w; }
  std::string str() const;
};

// One named tensor inside a flat buffer.
struct TensorSlot {
  std::string name;        // "layers.0.conv2d.weight", also the checkpoint tensor name
  std::vector<int> shape;  // e.g. {6, 1, 5, 5}
  std::size_t offset = 0;  // in floats, into the flat buffer it belongs to
  std::size_t count = 0;
  bool decayed = false;  // receives weight decay (conv/dense kernels only)
};

struct LayerPlan {
  LayerSpec spec;
  int index = 0;  // position in Model::layers
  SampleShape in, out;
  // Slots (indices into Model::params / Model::state); -1 when absent.
  int weight = -1, bias = -1;               // conv2d, dense
  int gamma = -1, beta = -1;                // batch_norm (scale, center)
  int running_mean = -1, running_var = -1;  // batch_norm, in the state buffer
  int64_t flops_per_sample = 0;             // forward multiply-adds x 2
  std::string label() const;                // "2:conv2d"
};

class Model {
 public:
  // Infers shapes through the list and lays out parameters. Throws ConfigError naming the layer's
  // index, type and YAML path when a layer does not fit its input, and the keys responsible when a
  // dimension, a tensor or the parameter count would pass kMaxTensorValues (every count is formed
  // in 64 bits, so none can overflow first).
  static Model build(const ModelConfig& config);

  const std::vector<LayerPlan>& layers() const { return layers_; }
  const std::vector<TensorSlot>& params() const { return params_; }
  const std::vector<TensorSlot>& state() const { return state_; }
  std::size_t param_count() const { return param_count_; }
  // Parameters [0, decayed_count) are conv/dense kernels (weight decay applies), the rest are not.
  std::size_t decayed_count() const { return decayed_count_; }
  std::size_t state_count() const { return state_count_; }
  SampleShape input() const { return input_; }
  int classes() const { return classes_; }
  int64_t flops_per_sample() const;  // forward

  // Initial parameter and state values, a pure function of the seed (every replica computes the
  // same).
  std::vector<float> initial_params(uint64_t seed) const;
  std::vector<float> initial_state() const;

  // Human-readable table: index, layer, output shape, parameters, forward MFLOP per sample.
  std::string summary() const;

 private:
  std::vector<LayerPlan> layers_;
  std::vector<TensorSlot> params_, state_;
  std::size_t param_count_ = 0, decayed_count_ = 0, state_count_ = 0;
  SampleShape input_;
  int classes_ = 10;
};

}  // namespace mnist
