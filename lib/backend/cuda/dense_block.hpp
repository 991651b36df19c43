#pragma once
// Batch norm -> ReLU (-> dropout) over a dense layer's output, fused (see dense_block.cu): one
// kernel launch forward and one backward, the CUDA twin of the chains in
// FusedKernels::dense_block_* (fused.cpp), with their contracts (backend.hpp).
//
// x, y, dy, dx: [n, c], one batch-norm channel per feature; every per-feature array has c floats;
// gamma nullptr means 1, beta nullptr 0; dropout nullptr means no dropout.

#include <cuda_runtime.h>

#include "backend/kernel_args.hpp"

namespace mnist::cuda {

// Assigns y = dropout(relu((x - mean) * invstd * gamma + beta)), mean and invstd from this batch's
// statistics, and updates running_mean / running_var in place (batch_norm_rule.hpp). The sums are
// taken in double in a fixed order, rounded to float as batch_norm_stats rounds them, then
// finalized with the CPU's formula; the apply, ReLU and dropout round as the CPU chain does, so y
// matches the chain bit for bit given the same mean and invstd. n >= 1, c >= 1.
void dense_block_forward(cudaStream_t stream, int n, int c, const float* x, float epsilon,
                         float decay, const float* gamma, const float* beta,
                         const DropoutArgs* dropout, float* y, float* mean, float* invstd,
                         float* running_mean, float* running_var);

// With dbn = relu_backward(relu(bn(x)), dropout_backward(dy)): assigns dbeta = sum of dbn and
// dgamma = sum of dbn * (x - mean) * invstd when not nullptr (double sums in a fixed order, each
// rounded to float once), and dx = gamma * invstd * (dbn - sum_dy/n - xhat * sum_dy_xhat/n) when
// not nullptr, rounded as batch_norm_backward_apply rounds it. n >= 1, c >= 1.
void dense_block_backward(cudaStream_t stream, int n, int c, const float* x, const float* mean,
                          const float* invstd, const float* gamma, const float* beta,
                          const DropoutArgs* dropout, const float* dy, float* dx, float* dgamma,
                          float* dbeta);

}  // namespace mnist::cuda
