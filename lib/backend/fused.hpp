#pragma once
// The seam of fusion, beside Backend's primitives: the kernels that run a block of several ops as
// fewer launches, one unit per block kind, each with the chain of primitives it stands for as
// its reference (backend/chains.hpp).
//
//   block kind            | the ops it runs                                   | methods
//   convolution stats     | conv2d -> the batch norm's sums (-> finalize)     |
//   conv2d_forward_stats gathered convolution  | gather_batch -> conv2d -> sums -> finalize |
//   ..._gathered conv block            | batch_norm -> relu -> 2x2 max_pool (after a conv) |
//   bn_relu_pool_*,
//                         |   and its backward into the convolution's         | conv_block_backward
//   dense block           | batch_norm -> relu (-> dropout) after a dense     | dense_block_*
//   dense head            | dense -> softmax cross-entropy -> their backward  | dense_softmax_...
//   dense tail            | dense -> dense block -> dense head, three calls   | dense_*_batch_norm,
//                         |                                                   |
//                         dense_block_softmax_...
//   dense backward        | a dense layer's two products, sharing dy          | dense_backward
//
// Every backend has one (Backend::fused()). This class is the reference: each method makes the
// calls of its chain on the backend, except the conv block's, which have no chain of primitives
// with the same outputs (its mask replaces the pooling's argmax) and refuse. A backend's own
// FusedKernels overrides what it runs in fewer launches (CPU: the conv block, CpuFusedKernels in
// cpu/cpu_backend.cpp; CUDA: per engine, cuda/fused_blocks.hpp), and supports() tells the block
// planner (model/block_plan.hpp), the only caller that asks, which blocks to run as units.
// Contracts (pointers, "assign", ordering) are Backend's (backend.hpp).
//
// Adding a fusion: a FusedKind and its methods here, their chain in fused.cpp, the kernel in one
// cuda file with its fused_blocks.hpp override, the layer or replica block that calls it, and its
// case in the planner.

#include <cstddef>
#include <cstdint>

#include "backend/kernel_args.hpp"

namespace mnist {

class Backend;

enum class FusedKind {
  gathered_convolution,  // the network's first convolution gathering its batch (training, local BN)
  conv_block,            // a convolution's batch_norm -> relu -> 2x2 max_pool
  dense_block,           // batch_norm -> relu (-> dropout) over a dense layer's output (training)
  dense_head,            // the last dense layer and the loss (training)
  dense_tail,            // dense -> dense block -> dense head (training, local BN)
  dense_backward,        // a dense layer's weight and input gradients as one call (training)
};

// One block's sizes, for supports() and workspace_floats(); each kind reads its own fields.
struct FusedShape {
  FusedKind kind = FusedKind::conv_block;
  Conv2dGeom conv{};  // gathered_convolution, conv_block: the convolution
  PoolGeom pool{};    // conv_block: its pooling
  bool bias = false;  // conv_block: the convolution's bias gradient is wanted
  int n = 0;          // dense_*: samples
  int in = 0;         // dense_head, dense_tail, dense_backward: the dense layer's inputs
  int c = 0;          // dense_block, dense_tail: the block's features; dense_backward: outputs
  int k = 0;          // dense_head, dense_tail: classes

  static FusedShape gathered_convolution(const Conv2dGeom& g);
  static FusedShape conv_block(const Conv2dGeom& g, const PoolGeom& pool, bool bias);
  static FusedShape dense_block(int n, int c);
  static FusedShape dense_head(int n, int in, int k);
  static FusedShape dense_tail(int n, int in, int c, int k);
  static FusedShape dense_backward(int n, int in, int out);
};

class FusedKernels {
 public:
  explicit FusedKernels(Backend& backend) : backend_(backend) {}
  virtual ~FusedKernels() = default;
  FusedKernels(const FusedKernels&) = delete;
  FusedKernels& operator=(const FusedKernels&) = delete;
  Backend& backend() const { return backend_; }

  // ---- which blocks run as units, and their scratch -------------------------------------------
  // Whether the planner should run the block as one unit here (else as its layers, one by one).
  // conv_block: reads pool only. The reference says no to every kind.
  virtual bool supports(const FusedShape& shape) const;
  // Floats of scratch the block's calls need at these sizes (each call at most this many; never
  // decreasing with n). conv_block: the dconv buffer of conv_block_backward (0: pass nullptr, the
  // kernels stage the gradient themselves); dense_block: the scratch of dense_block_*;
  // dense_head, dense_tail: the workspace of their calls; gathered_convolution, dense_backward: 0
  // (the first uses the convolution's workspace, Backend::conv2d_workspace_floats).
  virtual std::size_t workspace_floats(const FusedShape& shape) const;

  // ---- convolution stats: conv2d_forward, then batch_norm_stats of y (ChannelGeom{n, k,
  // out_h*out_w}) into sum[k], sumsq[k], then, when finalize is not nullptr,
  // batch_norm_finalize(g.k, finalize->count, sum, sumsq, ...) of them (a batch norm not synced
  // across replicas, in training: assigns its mean and invstd and updates its running statistics).
  // Every shape (engines may take the sums while the output is in cache).
  virtual void conv2d_forward_stats(const Conv2dGeom& g, const float* x, const float* weight,
                                    const float* bias, float* y, float* sum, float* sumsq,
                                    const BatchNormFinalize* finalize, float* workspace);

  // ---- gathered convolution: Backend::gather(batch, g.n), then conv2d_forward_stats of batch.x
  // with bn: assigns batch.x, batch.y and all that call assigns. The reference makes the calls
  // for any shape; a kernel that fuses them can support only a convolution of one input channel
  // whose output has its input's size (stride 1, "same" padding): one that owns every input pixel
  // once.
  virtual void conv2d_forward_batch_norm_gathered(const Conv2dGeom& g, const BatchGather& batch,
                                                  const float* weight, const float* bias, float* y,
                                                  float* sum, float* sumsq,
                                                  const BatchNormFinalize& bn, float* workspace);

  // ---- conv block: x is the convolution's output [n, c, h, w]; y, dy: [n, c, h/2, w/2]; mask:
  // uint8 per pooled value (winner in its window, and whether it passed the ReLU). The math of
  // batch_norm_apply, relu_*, max_pool_* and batch_norm_backward_*; the reference throws.
  // Assigns y = max_pool(relu(batch_norm_apply(x))) and mask.
  virtual void bn_relu_pool_forward(const PoolGeom& g, const float* x, const float* mean,
                                    const float* invstd, const float* gamma, const float* beta,
                                    float* y, uint8_t* mask);
  // batch_norm_backward_reduce of the gradient that max_pool_backward and relu_backward would
  // hand to the batch norm. Assigns sum_dy, sum_dy_xhat.
  virtual void bn_relu_pool_backward_reduce(const PoolGeom& g, const float* dy, const uint8_t* mask,
                                            const float* x, const float* mean, const float* invstd,
                                            float* sum_dy, float* sum_dy_xhat);
  // batch_norm_backward_apply of that gradient. Assigns all of dx[n, c, h, w].
  virtual void bn_relu_pool_backward_apply(const PoolGeom& g, const float* dy, const uint8_t* mask,
                                           const float* x, const float* mean, const float* invstd,
                                           const float* gamma, const float* sum_dy,
                                           const float* sum_dy_xhat, double count, float* dx);
  // bn_relu_pool_backward_apply of `block` into dconv [n, k, out_h, out_w], then
  // Backend::conv2d_backward(g, x, dconv, weight, dweight, dbias, dx, workspace). Engines may
  // compute dconv where the convolution's backward reads it and never store it: where
  // workspace_floats(conv_block) is 0, dconv may be nullptr.
  virtual void conv_block_backward(const Conv2dGeom& g, const ConvBlockGradient& block,
                                   const float* x, const float* weight, float* dweight,
                                   float* dbias, float* dx, float* dconv, float* workspace);

  // ---- dense block: x is the dense output [n, c], one batch-norm channel per feature
  // (ChannelGeom{n, c, 1}); n >= 1, c >= 1. gamma nullptr means 1, beta nullptr 0; dropout
  // nullptr means no dropout. scratch: workspace_floats(dense_block) floats.
  // The chain batch_norm_stats -> batch_norm_finalize(count = n, epsilon, decay) ->
  // batch_norm_apply(gamma, beta) -> relu_forward -> dropout_forward (when dropout is not nullptr).
  // Assigns y[n, c], mean[c], invstd[c]; updates running_mean[c], running_var[c] in place.
  virtual void dense_block_forward(int n, int c, const float* x, float epsilon, float decay,
                                   const float* gamma, const float* beta,
                                   const DropoutArgs* dropout, float* y, float* mean, float* invstd,
                                   float* running_mean, float* running_var, float* scratch);
  // Its backward, from the forward's x, mean and invstd (the ReLU's output is not kept: its sign
  // is recomputed as relu(batch_norm_apply(x)) with the forward's rounding): the chain
  // dropout_backward -> relu_backward -> batch_norm_backward_reduce -> batch_norm_backward_apply
  // (count = n). Assigns dbeta[c] = sum_dy and dgamma[c] = sum_dy_xhat when not nullptr, and
  // dx[n, c] when not nullptr (nullptr: only the parameter gradients are wanted).
  virtual void dense_block_backward(int n, int c, const float* x, const float* mean,
                                    const float* invstd, const float* gamma, const float* beta,
                                    const DropoutArgs* dropout, const float* dy, float* dx,
                                    float* dgamma, float* dbeta, float* scratch);

  // ---- dense head: logits = dense_forward(x, weight, bias), then softmax_cross_entropy(logits,
  // labels, grad_scale, dlogits, metrics), then dense_backward_weights(x, dlogits, dweight, dbias)
  // and, when dx is not nullptr, dense_backward_data(dlogits, weight, dx). x[n, in], weight[k, in],
  // bias[k] or nullptr, labels int32[n]. Accumulates metrics; assigns dweight[k, in], dbias[k]
  // (when not nullptr) and dx[n, in] (when not nullptr). workspace: workspace_floats(dense_head).
  virtual void dense_softmax_cross_entropy(int n, int in, int k, const float* x,
                                           const float* weight, const float* bias,
                                           const int32_t* labels, float grad_scale, float* dx,
                                           float* dweight, float* dbias, float* metrics,
                                           float* workspace);

  // ---- dense tail: a dense layer of c outputs, the dense block after it and the head of k
  // classes, in training with the slice's own statistics, as three calls that share the block's
  // work with its neighbours: the dense layer's forward takes the statistics and finalizes them,
  // the head computes the block's output where it reads its input and the backward's per-feature
  // sums, and the dense layer's backward computes the batch norm's backward apply where it reads
  // its gradient. Neither the block's output nor the dense layer's output gradient is ever
  // stored. n >= 1; workspace: workspace_floats(dense_tail).
  // dense_forward(x, weight, bias) -> y[n, out], then batch_norm_stats(ChannelGeom{n, out, 1}) and
  // batch_norm_finalize(out, bn.count, ...) of those sums. Assigns y and bn's mean and invstd;
  // updates bn's running statistics in place.
  virtual void dense_forward_batch_norm(int n, int in, int out, const float* x, const float* weight,
                                        const float* bias, float* y, const BatchNormFinalize& bn,
                                        float* workspace);
  // The head on the block's output and the block's backward up to its batch norm's sums: the chain
  // a = batch_norm_apply(block.x) -> relu_forward -> dropout_forward (the block's y[n, c], with its
  // final statistics), dense_softmax_cross_entropy(n, c, k, a, weight, bias, labels, grad_scale,
  // da, dweight, dbias, metrics), dropout_backward(da) -> relu_backward (the ReLU's output
  // recomputed as dense_block_backward does) -> dbn[n, c], batch_norm_backward_reduce(dbn,
  // block.x, mean, invstd) -> sum_dy[c], sum_dy_xhat[c]. Accumulates metrics; assigns dweight,
  // dbias (when not nullptr), dbn, sum_dy and sum_dy_xhat.
  virtual void dense_block_softmax_cross_entropy(int n, int c, int k, const DenseBlockInput& block,
                                                 const float* weight, const float* bias,
                                                 const int32_t* labels, float grad_scale,
                                                 float* dbn, float* sum_dy, float* sum_dy_xhat,
                                                 float* dweight, float* dbias, float* metrics,
                                                 float* workspace);
  // batch_norm_backward_apply(ChannelGeom{n, out, 1}, bn) -> dy[n, out], then dense_backward(n,
  // in, out, x, dy, weight, dweight, dbias, dx): the backward of a dense layer whose output went
  // through a batch norm. Assigns dweight, dbias (when not nullptr) and dx (when not nullptr).
  virtual void dense_backward_batch_norm(int n, int in, int out, const float* x,
                                         const BatchNormGradient& bn, const float* weight,
                                         float* dweight, float* dbias, float* dx, float* workspace);

  // ---- dense backward: Backend::dense_backward_weights(n, in, out, x, dy, dweight, dbias), then,
  // when dx is not nullptr, Backend::dense_backward_data(n, in, out, dy, weight, dx): a dense
  // layer's backward (x[n, in], dy[n, out], weight[out, in]), which an engine may run as one
  // launch that reads dy once for both products. Assigns dweight, dbias (when not nullptr) and dx
  // (when not nullptr). Every shape.
  virtual void dense_backward(int n, int in, int out, const float* x, const float* dy,
                              const float* weight, float* dweight, float* dbias, float* dx);

 private:
  Backend& backend_;
};

}  // namespace mnist
