#pragma once
// The network's head in one kernel: dense layer -> softmax cross-entropy -> both gradients of the
// dense layer (see dense_head.cu). Contract: Backend::dense_softmax_cross_entropy.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mnist::cuda {

// True when the fused kernel takes these sizes: k <= 16 classes, in <= 128 inputs.
bool dense_head_supports(int n, int in, int k);

// Floats of workspace dense_softmax_cross_entropy needs: the blocks' partial weight and bias
// gradients, loss and hit count (double). Never decreases with n.
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

}  // namespace mnist::cuda
