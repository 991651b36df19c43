#pragma once
// Kernel arguments shared by the CPU and CUDA kernels: the shapes of a convolution, a pooling and a
// per-channel reduction, and one optimizer step's hyper-parameters. Layout is always NCHW.

#include <cstddef>
#include <cstdint>

#include "core/rng.hpp"

namespace mnist {

// Convolution of x[n, c, h, w] with weights w[k, c, kh, kw] into y[n, k, out_h, out_w]
// (cross-correlation, as every framework defines "conv"). Padding is zero padding, pad_h rows on
// top (and as many or one more at the bottom; out_h already accounts for it).
struct Conv2dGeom {
  int n = 0, c = 0, h = 0, w = 0;
  int k = 0, kh = 0, kw = 0;
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;
  int out_h = 0, out_w = 0;
};

// Max pooling of x[n, c, h, w] into y[n, c, out_h, out_w]; padded positions never win.
struct PoolGeom {
  int n = 0, c = 0, h = 0, w = 0;
  int size_h = 2, size_w = 2;
  int stride_h = 2, stride_w = 2;
  int pad_h = 0, pad_w = 0;
  int out_h = 0, out_w = 0;
};

// Per-channel normalisation over (n, hw): x[n, c, hw]. A dense layer's output [n, c] has hw = 1.
struct ChannelGeom {
  int n = 0, c = 0, hw = 1;
  std::size_t count() const { return static_cast<std::size_t>(n) * static_cast<std::size_t>(hw); }
};

// What a fused conv block's batch norm hands its convolution's backward
// (FusedKernels::conv_block_backward): bn_relu_pool_backward_apply's inputs. pool: the block's 2x2
// pooling (c: the convolution's output channels); dy, mask: [n, c, out_h, out_w]; conv_out:
// [n, c, h, w]; per-channel arrays of c floats (gamma nullptr means 1); count: values per channel
// in the normalisation group.
struct ConvBlockGradient {
  PoolGeom pool;
  const float* dy = nullptr;
  const uint8_t* mask = nullptr;
  const float* conv_out = nullptr;
  const float *mean = nullptr, *invstd = nullptr, *gamma = nullptr;
  const float *sum_dy = nullptr, *sum_dy_xhat = nullptr;
  double count = 0;
};

// What batch_norm_finalize takes besides the sums (Backend::batch_norm_finalize's contract), for a
// fused op that takes the sums itself and then finalizes them (FusedKernels::conv2d_forward_stats):
// count values per channel; assigns mean and invstd, updates running_mean and running_var in place.
struct BatchNormFinalize {
  double count = 0;
  float epsilon = 0.0f, decay = 0.0f;
  float* mean = nullptr;
  float* invstd = nullptr;
  float* running_mean = nullptr;
  float* running_var = nullptr;
};

// Hyper-parameters of one optimizer step over the flat parameter buffer.
// Elements [0, n_decay) are weights (conv/dense kernels) and receive weight decay; elements
// [n_decay, n) are biases and batch-norm parameters and do not.
struct OptimizerStep {
  float lr = 0.001f;
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;  // Adam
  float momentum = 0.0f;                                // SGD
  bool nesterov = false;                                // SGD
  float l2 = 0.0f;            // coupled: g += l2 * p before the update (L2 term in the loss)
  float decoupled_wd = 0.0f;  // decoupled (AdamW): p -= lr * wd * p
  int64_t step = 1;           // 1-based, for Adam's bias correction
  // Adam's epsilon as configured and its style, from which each step's epsilon follows when the
  // optimizer moves the StepScalars on to the next step (step_scalars_next).
  double configured_epsilon = 1e-8;
  bool tensorflow_epsilon = false;
};

// The per-step values of a training step, kept in the backend's memory, where every kernel that
// needs one reads it when it runs (dropout's step; the optimizers' learning rate, decay factor,
// bias corrections and epsilon), so that the eager step and a step captured once and replayed run
// the same kernels with the same arguments. The eager step sets them from the host
// (Backend::step_scalars_set: a kernel argument, so no host wait); the captured step's optimizer
// moves them on to the next step's in its last kernel (Backend::adam_update with advance), with
// the host's own rules (optimizer_rule.hpp).
struct StepScalars {
  int64_t step = 0;      // 0-based global step: dropout's key; the optimizer's t is step + 1
  float lr = 0.0f;       // learning rate of this step
  float shrink = 1.0f;   // decoupled weight decay's factor 1 - lr * wd (DecayRule)
  float c1 = 1.0f;       // Adam's 1 / (1 - beta1^t)
  float c2 = 1.0f;       // Adam's 1 / (1 - beta2^t)
  float epsilon = 0.0f;  // Adam's epsilon for t (the TensorFlow style scales it with t)
};

// One dropout (Backend::dropout_forward's arguments, for the fused ops that end in one): the rate
// in [0, 1), the layer's key, the step's values (its step read from step_scalars->step when the
// kernel runs) and the global batch position of the slice's first sample.
struct DropoutArgs {
  float rate = 0.0f;
  RngKey key{};
  const StepScalars* step_scalars = nullptr;
  uint32_t first_sample = 0;
};

// A batch still to be gathered from the device-resident dataset (Backend::gather_batch's
// arguments, ring form), for an op that gathers it where it first reads it
// (FusedKernels::conv2d_forward_batch_norm_gathered): the slice's indices are ring[(s % ring_steps)
// * n, ... + n), s = step->step when the kernel runs (step nullptr: s = 0, so ring holds the
// indices themselves); images uint8[num_images, pixels], labels uint8[num_images]; the batch goes
// to x float[n, pixels] and its labels to y int32[n].
struct BatchGather {
  const uint8_t* images = nullptr;
  const uint8_t* labels = nullptr;
  int pixels = 0;
  const int32_t* ring = nullptr;
  int ring_steps = 1;
  const StepScalars* step = nullptr;
  float* x = nullptr;
  int32_t* y = nullptr;
};

// A dense block (batch_norm -> relu (-> dropout) over a dense layer's output x[n, c], one
// batch-norm channel per feature) whose statistics are already final, for an op that computes the
// block's output where it reads it instead of storing it
// (FusedKernels::dense_block_softmax_cross_entropy): y = dropout(relu(batch_norm_apply(x, mean,
// invstd, gamma, beta))). gamma nullptr means 1, beta nullptr 0; has_dropout false means no
// dropout.
struct DenseBlockInput {
  const float* x = nullptr;
  const float *mean = nullptr, *invstd = nullptr, *gamma = nullptr, *beta = nullptr;
  bool has_dropout = false;
  DropoutArgs dropout;
};

// What a batch norm's backward apply takes (Backend::batch_norm_backward_apply's arguments), for an
// op that computes the apply where it reads the result instead of storing it
// (FusedKernels::dense_backward_batch_norm): the gradient dy that reaches the batch norm and its
// input x, both [n, c] (hw = 1), per-channel arrays of c floats (gamma nullptr means 1), and count,
// the values per channel in the normalisation group.
struct BatchNormGradient {
  const float* dy = nullptr;
  const float* x = nullptr;
  const float *mean = nullptr, *invstd = nullptr, *gamma = nullptr;
  const float *sum_dy = nullptr, *sum_dy_xhat = nullptr;
  double count = 0;
};

// Indices of the metric accumulators every loss kernel adds into (a float[3] on the device).
enum MetricSlot : int { kLossSum = 0, kCorrect = 1, kSamples = 2, kMetricSlots = 3 };

}  // namespace mnist
