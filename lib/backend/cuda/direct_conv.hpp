#pragma once
// Direct convolution kernels for small channel counts (see direct_conv.cu for how the work is
// split and the performance model). Contracts are those of conv2d.hpp / Backend::conv2d_*:
// x[n, c, h, w], weight[k, c, kh, kw], bias[k] or nullptr, y/dy[n, k, out_h, out_w]; forward and
// backward_data assign y and dx, backward_weights assigns dweight (conv2d.cu adds the bias
// gradient, the same reduction for both implementations).
//
// Only the geometries direct_conv_supports() accepts run here: stride 1 and a (c, k, kh, kw) among
// the compiled shapes (the seed networks' convolutions); conv2d.cu sends the rest to the tiled
// implicit GEMM.

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "backend/kernel_args.hpp"

namespace mnist::cuda {

// True when the direct kernels run `g` (all three directions). When false and why_not is not
// nullptr, *why_not says which rule `g` breaks, with its values.
bool direct_conv_supports(const Conv2dGeom& g, std::string* why_not = nullptr);

// Floats of workspace direct_conv2d_backward_weights and direct_conv2d_forward_stats need for `g`
// (their per-block partial sums, in double). Never decreases with g.n, so a workspace sized at the
// largest batch fits every smaller one. 0 when g is not supported.
std::size_t direct_conv_workspace_floats(const Conv2dGeom& g);

// Assigns y = conv(x, weight) + bias (bias may be nullptr). Requires direct_conv_supports(g).
void direct_conv2d_forward(cudaStream_t stream, const Conv2dGeom& g, const float* x,
                           const float* weight, const float* bias, float* y);
// direct_conv2d_forward, then sum[k] and sumsq[k] of y over (n, out_h, out_w) (batch_norm_stats'
// contract), taken per tile while the outputs are in registers and added in a fixed order by the
// last block, in the same launch; when bn is not nullptr that block also finalizes them
// (batch_norm_finalize's contract, FusedKernels::conv2d_forward_stats). One kernel launch (n > 0).
// counter: the stream's block counter (launch.cuh, arrive_last). workspace: at least
// direct_conv_workspace_floats(g) floats, 8-byte aligned.
void direct_conv2d_forward_stats(cudaStream_t stream, const Conv2dGeom& g, const float* x,
                                 const float* weight, const float* bias, float* y, float* sum,
                                 float* sumsq, const BatchNormFinalize* bn, unsigned* counter,
                                 float* workspace);
// True when direct_conv2d_forward_gathered runs `g`: direct_conv_supports(g), one input channel and
// an output of the input's size (then the tiles' output pixels lie over every input pixel once).
bool direct_conv_gathers(const Conv2dGeom& g);
// direct_conv2d_forward_stats of the batch `batch` gathers (gather_batch's contract, its bits),
// gathered while the tiles are staged: each tile also writes the input pixels under its output
// pixels to batch.x and each sample's first tile its label, so batch.x [n, 1, h, w] and batch.y
// are assigned. One kernel launch where gather_batch made it two. Requires direct_conv_gathers(g)
// and batch.pixels == g.h * g.w.
void direct_conv2d_forward_gathered(cudaStream_t stream, const Conv2dGeom& g,
                                    const BatchGather& batch, const float* weight,
                                    const float* bias, float* y, float* sum, float* sumsq,
                                    const BatchNormFinalize* bn, unsigned* counter,
                                    float* workspace);
// Assigns dx[n, c, h, w] = transposed convolution of dy with weight.
void direct_conv2d_backward_data(cudaStream_t stream, const Conv2dGeom& g, const float* dy,
                                 const float* weight, float* dx);
// Assigns dweight[k, c, kh, kw] = sum over (n, out_h, out_w) of dy * x-patch. workspace: at least
// direct_conv_workspace_floats(g) floats, 8-byte aligned. Bit-repeatable: every sum runs in a
// fixed order (fp32 within a thread, double across threads and blocks), the blocks' added by
// blocks of the same launch (one launch, n > 0), counted on `counters`, the stream's block
// counters (launch.cuh, kBlockCounters of them).
void direct_conv2d_backward_weights(cudaStream_t stream, const Conv2dGeom& g, const float* x,
                                    const float* dy, float* dweight, unsigned* counters,
                                    float* workspace);
// direct_conv2d_backward_weights and direct_conv2d_backward_data in one grid (the weights' blocks
// first, then the data tiles): one launch, the same bits as the two calls.
// dx may be nullptr (the weights alone).
void direct_conv2d_backward(cudaStream_t stream, const Conv2dGeom& g, const float* x,
                            const float* dy, const float* weight, float* dweight, float* dx,
                            unsigned* counters, float* workspace);
// direct_conv2d_backward of a fused conv block's convolution, its dy (the batch norm's gradient,
// bn_relu_pool_backward_apply of `block`) computed where the kernels stage it and never stored:
// one launch for the apply's and the convolution's, the same bits. block.pool must pool g's output
// (at most 32 channels). dx may be nullptr.
void direct_conv2d_backward_block(cudaStream_t stream, const Conv2dGeom& g,
                                  const ConvBlockGradient& block, const float* x,
                                  const float* weight, float* dweight, float* dx,
                                  unsigned* counters, float* workspace);

}  // namespace mnist::cuda
