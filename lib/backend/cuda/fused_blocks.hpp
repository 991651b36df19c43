#pragma once
// The fused blocks of engine "fused" (engine_parts.hpp), one launch where the reference chains
// (backend.cpp) make several: the first convolution gathering its batch (direct_conv.cu), the conv
// block's batch norm -> ReLU -> 2x2 max pool (conv_block.cu) and its backward into the
// convolution's, the dense block (dense_block.cu), and the dense tail (dense.cu, dense_head.cu).
// A CudaBackend holds one only when its engine fuses; each method's contract is the Backend
// method of the same name (backend.hpp), for the sizes its `takes_*` accepts.

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "backend/cuda/engine_parts.hpp"
#include "backend/kernel_args.hpp"

namespace mnist::cuda {

class FusedBlocks {
 public:
  // name: the backend's, for messages.
  FusedBlocks(const StreamResources& r, std::string name) : r_(r), name_(std::move(name)) {}

  // ---- the first convolution, gathering its batch ----------------------------------------------
  bool takes_gathered_convolution(const Conv2dGeom& g) const;
  void conv2d_forward_batch_norm_gathered(const Conv2dGeom& g, const BatchGather& batch,
                                          const float* weight, const float* bias, float* y,
                                          float* sum, float* sumsq, const BatchNormFinalize& bn,
                                          float* workspace);

  // ---- the conv block: batch norm -> ReLU -> 2x2 max pool, and its backward ---------------------
  bool takes_conv_block(const PoolGeom& g) const;
  void bn_relu_pool_forward(const PoolGeom& g, const float* x, const float* mean,
                            const float* invstd, const float* gamma, const float* beta, float* y,
                            uint8_t* mask);
  void bn_relu_pool_backward_reduce(const PoolGeom& g, const float* dy, const uint8_t* mask,
                                    const float* x, const float* mean, const float* invstd,
                                    float* sum_dy, float* sum_dy_xhat);
  void bn_relu_pool_backward_apply(const PoolGeom& g, const float* dy, const uint8_t* mask,
                                   const float* x, const float* mean, const float* invstd,
                                   const float* gamma, const float* sum_dy,
                                   const float* sum_dy_xhat, double count, float* dx);
  // The block's backward apply computed where the convolution's backward stages it, for the
  // geometries conv_block_backward_uses_dconv says do not need dconv.
  void conv_block_backward(const Conv2dGeom& g, const ConvBlockGradient& block, const float* x,
                           const float* weight, float* dweight, float* dx, float* workspace);

  // ---- the dense block: batch norm -> ReLU (-> dropout), every size ----------------------------
  void dense_block_forward(int n, int c, const float* x, float epsilon, float decay,
                           const float* gamma, const float* beta, const DropoutArgs* dropout,
                           float* y, float* mean, float* invstd, float* running_mean,
                           float* running_var);
  void dense_block_backward(int n, int c, const float* x, const float* mean, const float* invstd,
                            const float* gamma, const float* beta, const DropoutArgs* dropout,
                            const float* dy, float* dx, float* dgamma, float* dbeta);

  // ---- the dense tail: dense -> dense block -> head -------------------------------------------
  bool takes_dense_tail(int c, int k) const;
  // The workspace the three calls need here, at least `chains` (what the reference chains need).
  std::size_t dense_tail_workspace_floats(int n, int in, int c, int k, std::size_t chains) const;
  // Every size.
  void dense_forward_batch_norm(int n, int in, int out, const float* x, const float* weight,
                                const float* bias, float* y, const BatchNormFinalize& bn,
                                float* workspace);
  // The sizes takes_dense_tail accepts.
  void dense_block_softmax_cross_entropy(int n, int c, int k, const DenseBlockInput& block,
                                         const float* weight, const float* bias,
                                         const int32_t* labels, float grad_scale, float* dbn,
                                         float* sum_dy, float* sum_dy_xhat, float* dweight,
                                         float* dbias, float* metrics, float* workspace);
  // A dense layer without a bias gradient, of at most kDenseBatchNormFeatures outputs.
  bool takes_dense_backward_batch_norm(int out, bool bias) const;
  void dense_backward_batch_norm(int n, int in, int out, const float* x,
                                 const BatchNormGradient& bn, const float* weight, float* dweight,
                                 float* dx, float* workspace);

 private:
  void check_pool(const PoolGeom& g, const char* op) const;
  void check_dropout(const DropoutArgs* dropout, const char* op) const;

  StreamResources r_;
  std::string name_;
};

}  // namespace mnist::cuda
