#pragma once
// The CUDA engines' fused kernels (backend/fused.hpp), chosen by the engine table
// (engine_parts.hpp). Every engine fuses what its parts fuse (EngineFusedKernels): a convolution
// takes its batch norm's sums where its Convolutions part can, and a dense layer's backward runs
// both products in one launch where its DenseLayers part does; the engine "fused" runs every block
// of fused.hpp as one launch where the reference chains make several (FusedBlocks): the first
// convolution gathering its batch (direct_conv.cu), the conv block's batch norm -> ReLU -> 2x2 max
// pool (conv_block.cu) and its backward into the convolution's, the dense block (dense_block.cu),
// and the dense head and tail (dense.cu, dense_head.cu). Where a kernel does not take a size, the
// method runs the reference chain (FusedKernels') instead, so every call keeps its contract.

#include <cstddef>
#include <cstdint>

#include "backend/cuda/engine_parts.hpp"
#include "backend/fused.hpp"
#include "backend/kernel_args.hpp"

namespace mnist::cuda {

class EngineFusedKernels : public FusedKernels {
 public:
  // convolutions, dense: the backend's parts, which outlive this.
  EngineFusedKernels(Backend& backend, const StreamResources& r, Convolutions& convolutions,
                     DenseLayers& dense)
      : FusedKernels(backend), r_(r), convolutions_(convolutions), dense_(dense) {}

  // dense_backward: where the dense part runs both products in one launch.
  bool supports(const FusedShape& shape) const override;
  void conv2d_forward_stats(const Conv2dGeom& g, const float* x, const float* weight,
                            const float* bias, float* y, float* sum, float* sumsq,
                            const BatchNormFinalize* finalize, float* workspace) override;
  void dense_backward(int n, int in, int out, const float* x, const float* dy, const float* weight,
                      float* dweight, float* dbias, float* dx) override;

 protected:
  // The backend's device, current on the calling thread (each call, as the backend's own do).
  void activate() const;

  StreamResources r_;
  Convolutions& convolutions_;
  DenseLayers& dense_;
};

class FusedBlocks final : public EngineFusedKernels {
 public:
  using EngineFusedKernels::EngineFusedKernels;

  bool supports(const FusedShape& shape) const override;
  std::size_t workspace_floats(const FusedShape& shape) const override;

  void conv2d_forward_batch_norm_gathered(const Conv2dGeom& g, const BatchGather& batch,
                                          const float* weight, const float* bias, float* y,
                                          float* sum, float* sumsq, const BatchNormFinalize& bn,
                                          float* workspace) override;

  void bn_relu_pool_forward(const PoolGeom& g, const float* x, const float* mean,
                            const float* invstd, const float* gamma, const float* beta, float* y,
                            uint8_t* mask) override;
  void bn_relu_pool_backward_reduce(const PoolGeom& g, const float* dy, const uint8_t* mask,
                                    const float* x, const float* mean, const float* invstd,
                                    float* sum_dy, float* sum_dy_xhat) override;
  void bn_relu_pool_backward_apply(const PoolGeom& g, const float* dy, const uint8_t* mask,
                                   const float* x, const float* mean, const float* invstd,
                                   const float* gamma, const float* sum_dy,
                                   const float* sum_dy_xhat, double count, float* dx) override;
  // The block's backward apply computed where the convolution's backward stages it, for the
  // geometries whose workspace_floats(conv_block) is 0; the others take the chain.
  void conv_block_backward(const Conv2dGeom& g, const ConvBlockGradient& block, const float* x,
                           const float* weight, float* dweight, float* dbias, float* dx,
                           float* dconv, float* workspace) override;

  // Every size; the kernels use no scratch.
  void dense_block_forward(int n, int c, const float* x, float epsilon, float decay,
                           const float* gamma, const float* beta, const DropoutArgs* dropout,
                           float* y, float* mean, float* invstd, float* running_mean,
                           float* running_var, float* scratch) override;
  void dense_block_backward(int n, int c, const float* x, const float* mean, const float* invstd,
                            const float* gamma, const float* beta, const DropoutArgs* dropout,
                            const float* dy, float* dx, float* dgamma, float* dbeta,
                            float* scratch) override;

  // The sizes dense_head_supports takes.
  void dense_softmax_cross_entropy(int n, int in, int k, const float* x, const float* weight,
                                   const float* bias, const int32_t* labels, float grad_scale,
                                   float* dx, float* dweight, float* dbias, float* metrics,
                                   float* workspace) override;

  // Every size.
  void dense_forward_batch_norm(int n, int in, int out, const float* x, const float* weight,
                                const float* bias, float* y, const BatchNormFinalize& bn,
                                float* workspace) override;
  // The sizes supports(dense_tail) accepts.
  void dense_block_softmax_cross_entropy(int n, int c, int k, const DenseBlockInput& block,
                                         const float* weight, const float* bias,
                                         const int32_t* labels, float grad_scale, float* dbn,
                                         float* sum_dy, float* sum_dy_xhat, float* dweight,
                                         float* dbias, float* metrics, float* workspace) override;
  // A dense layer without a bias gradient, of at most kDenseBatchNormFeatures outputs.
  void dense_backward_batch_norm(int n, int in, int out, const float* x,
                                 const BatchNormGradient& bn, const float* weight, float* dweight,
                                 float* dbias, float* dx, float* workspace) override;

 private:
  bool takes_dense_tail(int c, int k) const;
  // The direct kernels stage the block's gradient themselves; a bias (none after a batch norm) or
  // other geometries take the chain, through dconv.
  bool conv_block_uses_dconv(const Conv2dGeom& g, const PoolGeom& pool, bool bias) const;
  void check_pool(const PoolGeom& g, const char* op) const;
  void check_dropout(const DropoutArgs* dropout, const char* op) const;
};

}  // namespace mnist::cuda
