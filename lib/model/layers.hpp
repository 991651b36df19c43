#pragma once
// Layers: one class per op, each owning its plan (config and shapes) and views into its replica's
// flat buffers. The public forward/backward are non-virtual: they check the batch size, then call
// the op's implementation, which calls the backend's kernels. Layers never allocate during a step.
//
// Backward contract for every layer: dx is ASSIGNED (nullptr when nobody needs it, e.g. the first
// layer); parameter gradients in the flat gradient buffer are ASSIGNED.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "model/block_plan.hpp"
#include "model/model.hpp"

namespace mnist {

// What one forward/backward pass over a slice of the global batch needs to know.
struct PassContext {
  int n = 0;  // samples in this replica's slice
  bool training = true;
  // The step's values in backend memory (the worker's), where the kernels read them when they
  // run: the 0-based global step of dropout's keys. A training pass needs them; the eager step and
  // a step captured once and replayed pass the same pointer (Backend::begin_capture).
  const StepScalars* step_scalars = nullptr;
  uint32_t first_sample = 0;  // position of this slice's first sample in the global batch
  uint64_t seed = 0;
  // Sync batch norm: statistics are summed over all replicas through this hook, and normalised by
  // the global sample count. Empty means local statistics (each replica's own slice).
  std::function<void(float* data, std::size_t count)> all_reduce_sum;
  int global_n = 0;  // samples in the global batch (sync batch norm)
  // When set, the slice's input (the replica's input and labels) is still to be gathered, in this
  // pass: by the first layer, where the block plan makes it a gathered layer (block_plan.hpp,
  // Layer::forward_gathered), else by the replica before the first block.
  const BatchGather* gather = nullptr;
};

// Where a layer's parameters and scratch live on its replica's device.
struct LayerBinding {
  Backend* backend = nullptr;
  float* params = nullptr;     // the replica's flat parameter buffer
  float* grads = nullptr;      // the replica's flat gradient buffer
  float* state = nullptr;      // the replica's flat running-statistics buffer
  float* workspace = nullptr;  // shared scratch, Layer::workspace_floats() at least
};

// What a dense block (make_dense_block) hands a replica that runs its work inside its neighbours'
// calls (the dense tail of block_plan.hpp), in one training pass with the slice's own statistics:
// where the dense layer's forward finalizes the statistics, the block's input terms for the head
// (input.x is the replica's to set) and where the head's sums go (the parameter gradients
// themselves when learned, which the dense layer's backward then reads).
struct DenseBlockTail {
  BatchNormFinalize finalize;
  DenseBlockInput input;
  float *sum_dy = nullptr, *sum_dy_xhat = nullptr;
};

class Layer {
 public:
  Layer(const Model& model, const LayerPlan& plan, const LayerBinding& binding, int max_batch)
      : model_(model), plan_(plan), bind_(binding), max_batch_(max_batch) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  // x: [n, in], y: [n, out] (assigned).
  void forward(const PassContext& ctx, const float* x, float* y);
  // x, y: this layer's forward input and output; dy: gradient of y; dx: gradient of x (assigned,
  // may be nullptr).
  void backward(const PassContext& ctx, const float* x, const float* y, const float* dy, float* dx);

  // A view (flatten) has no output buffer of its own: y aliases x, dx aliases dy.
  virtual bool is_view() const { return false; }
  // How many consecutive plans this layer runs (a fused block runs several, from plan() on), and
  // its name: the plan's label, or "0:conv2d+batch_norm+relu+max_pool".
  virtual int span() const { return 1; }
  std::string label() const;
  // Scratch floats this layer needs in LayerBinding::workspace at max_batch.
  virtual std::size_t workspace_floats() const { return 0; }
  const LayerPlan& plan() const { return plan_; }
  void set_workspace(float* workspace) { bind_.workspace = workspace; }
  // Views of a parameter slot of the plan (plan().weight, ...) in the replica's flat parameter
  // and gradient buffers; nullptr for -1. (Public: a replica block that runs a layer inside a
  // fused call, the dense head or tail of block_plan.hpp, hands them to the backend.)
  float* param(int slot) const;
  float* grad(int slot) const;
  // forward, with the input still to gather: the layer gathers `batch` (into batch.x, its input)
  // where it reads it, in the same launch. Only the blocks the plan says gather (a conv block
  // first in its network, block_plan.hpp's gathered_layer) implement it; others throw.
  virtual void forward_gathered(const PassContext& ctx, const BatchGather& batch, float* y);
  // A dense block's terms for the dense tail that runs its work inside its neighbours' calls (a
  // training pass with the slice's own statistics); other layers throw.
  virtual DenseBlockTail dense_block_tail(const PassContext& ctx) const;

 protected:
  virtual void do_forward(const PassContext& ctx, const float* x, float* y) = 0;
  virtual void do_backward(const PassContext& ctx, const float* x, const float* y, const float* dy,
                           float* dx) = 0;
  float* state(int slot) const;
  Backend& be() const { return *bind_.backend; }

  const Model& model_;
  const LayerPlan& plan_;
  LayerBinding bind_;
  int max_batch_;
};

// The convolution a conv2d layer's plan runs at batch size n (padding resolved).
Conv2dGeom conv2d_geom(const LayerPlan& plan, int n);
// The pooling a max_pool layer's plan runs at batch size n.
PoolGeom max_pool_geom(const LayerPlan& plan, int n);

// The one factory table: a unit of block_plan.hpp's plan_layers to the class that runs it. A
// single plan becomes its LayerKind's class; a conv block (conv2d -> batch_norm -> relu ->
// max_pool) and a dense block (batch_norm -> relu over a dense layer's output, and the dropout
// that follows them if one does) become one layer each, whose inner outputs are never stored; a
// dense layer whose backward the backend fuses becomes a dense layer making that one call.
std::unique_ptr<Layer> make_layer(const Model& model, const LayerUnit& unit,
                                  const LayerBinding& binding, int max_batch);

}  // namespace mnist
