#pragma once
// The network's head in one kernel: dense layer -> softmax cross-entropy -> both gradients of the
// dense layer (see dense_head.cu). Contract: FusedKernels::dense_softmax_cross_entropy.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/kernel_args.hpp"

namespace mnist::cuda {

// True when the fused kernel takes these sizes: k <= 16 classes, in <= 128 inputs.
bool dense_head_supports(int n, int in, int k);

// Floats of workspace dense_softmax_cross_entropy and dense_block_softmax_cross_entropy need: the
// blocks' partial weight and bias gradients, loss and hit count (and the block's sums), in double.
// Never decreases with n.
std::size_t dense_head_workspace_floats(int n, int in, int k);

// x[n, in], weight[k, in], bias[k] or nullptr, labels int32[n]. Accumulates metrics[kMetricSlots]
// (softmax_cross_entropy's contract); assigns dweight[k, in], dbias[k] (when not nullptr) and
// dx[n, in] (when not nullptr); dlogits = (softmax - onehot) * grad_scale stays in registers.
// workspace: dense_head_workspace_floats(n, in, k) floats, 8-byte aligned. Requires
// dense_head_supports(n, in, k). counter: the stream's block counter (launch.cuh, arrive_last).
// One kernel launch.
void dense_softmax_cross_entropy(cudaStream_t stream, int n, int in, int k, const float* x,
                                 const float* weight, const float* bias, const int32_t* labels,
                                 float grad_scale, float* dx, float* dweight, float* dbias,
                                 float* metrics, float* workspace, unsigned* counter);

// The same head on the output of the dense block in front of it, computed from the block's input
// as it is read, and the block's backward up to its batch norm's sums (the contract of
// FusedKernels::dense_block_softmax_cross_entropy): block.x[n, in] is the block's input; assigns
// dbn[n, in], sum_dy[in], sum_dy_xhat[in] besides the head's gradients. One kernel launch.
void dense_block_softmax_cross_entropy(cudaStream_t stream, int n, int in, int k,
                                       const DenseBlockInput& block, const float* weight,
                                       const float* bias, const int32_t* labels, float grad_scale,
                                       float* dbn, float* sum_dy, float* sum_dy_xhat,
                                       float* dweight, float* dbias, float* metrics,
                                       float* workspace, unsigned* counter);

}  // namespace mnist::cuda
