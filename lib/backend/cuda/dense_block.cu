// Batch norm -> ReLU (-> dropout) over a dense layer's output [n, c], one kernel launch each way:
// the CUDA twin of the chains FusedKernels::dense_block_forward / _backward (fused.cpp).
//
// How the work is split: each batch-norm channel is one feature (hw = 1), so a block can own whole
// features and no step needs another block. Block (kFeatures = 8) x (kLanes = 128) threads,
// grid ceil(c / 8): thread (f, lane) takes feature blockIdx.x * 8 + f of the samples lane,
// lane + 128, ... A warp reads 8 consecutive features of 4 samples, four full 32-byte sectors.
// - forward: pass 1 sums x and x^2 in double per thread; the block adds the 4 sample rows of each
//   warp with shuffles, then thread (f, 0) adds the 32 warps' partials in warp order (a fixed
//   order, no atomics: the same bits on every run); it rounds the sums to float as batch_norm_stats
//   does, finalizes them with batch_norm_rule.hpp (mean, invstd, running statistics) and puts the
//   feature's a = invstd * gamma, b = beta - mean * a in shared memory. Pass 2 writes y =
//   dropout(relu(x * a + b)) for the thread's samples (x is read again, from L1/L2).
// - backward: pass 1 rebuilds each gradient as the chain does (dropout_backward's mask from
//   dropout_mask.hpp, relu_backward's decision from the sign of x * a + b recomputed with the
//   forward's rounding) and sums it and it * (x - mean) in double, reduced as above; thread (f, 0)
//   writes dbeta, dgamma and puts the backward apply's terms in shared memory; pass 2 rebuilds the
//   gradient again (the mask is recomputed rather than kept: 8 values per thread at batch 1024
//   would fit in registers, any n would not) and writes dx.
//
// Arithmetic: the apply, ReLU, dropout scaling and backward apply round each product and sum on
// their own (__fmul_rn and kin), as the CPU chain does (backend/cpu/batch_norm.cpp is compiled
// without FMA contraction), so y and dx equal the chain's bit for bit whenever the statistics do.
// The statistics are double sums of the same terms as the CPU's in another order, each rounded to
// float once: they differ from the CPU's by at most an ulp or two of the float result (and are
// usually equal: the sums of x are exact in double for most data).
//
// Performance model (an ESTIMATE made before any GPU ran this code; its tests pass on an H200, its
// speed is unmeasured there: the seed's training step takes the dense tail instead, dense.cu and
// dense_head.cu): the seed network at batch 1024 on an
// H200, c = 100: 13 blocks of 1024 threads, 8 samples per thread per pass; x (400 KB) was just
// written by the dense layer and sits in the 50 MB L2. Each pass is latency-bound (13 SMs, 8
// dependent rounds of loads per thread at ~0.5 us of L2 latency, partly overlapped by unrolling):
// forward ~3-5 us (two passes, the reduction, one double division and square root per feature, 8
// Philox draws per thread), backward ~4-6 us (two passes with Philox in each). The six (forward)
// and five (backward) kernels it replaces cost ~2-3 us each in launch gaps and tails alone.
#include "backend/cuda/dense_block.hpp"

#include <cstddef>
#include <cstdint>

#include "backend/batch_norm_rule.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/dense_block_terms.cuh"
#include "backend/cuda/launch.cuh"

namespace mnist::cuda {
namespace {

constexpr int kFeatures = 8;  // features per block: threadIdx.x
constexpr int kLanes = 128;   // sample lanes per feature: threadIdx.y
constexpr int kBlockThreads = kFeatures * kLanes;
constexpr int kWarps = kBlockThreads / 32;
static_assert(32 % kFeatures == 0, "a warp holds whole rows of kFeatures features");

// The two sums of feature threadIdx.x over the block's kLanes lanes, in a fixed order: the warp's
// four sample rows by shuffles, then the warps in order by thread (threadIdx.x, 0), which alone
// gets the result. Every thread of the block must call it.
__device__ __forceinline__ double2 feature_sums(double a, double b,
                                                double2* warp_part /* [kWarps * kFeatures] */) {
  for (int offset = 16; offset >= kFeatures; offset /= 2) {
    a += __shfl_down_sync(0xffffffffu, a, offset);
    b += __shfl_down_sync(0xffffffffu, b, offset);
  }
  const int t = threadIdx.y * kFeatures + threadIdx.x;
  // Lanes 0..kFeatures-1 of a warp hold features 0..kFeatures-1.
  if (t % 32 < kFeatures) warp_part[(t / 32) * kFeatures + threadIdx.x] = make_double2(a, b);
  __syncthreads();
  double2 total = make_double2(0.0, 0.0);
  if (threadIdx.y == 0) {
    for (int w = 0; w < kWarps; ++w) {
      total.x += warp_part[w * kFeatures + threadIdx.x].x;
      total.y += warp_part[w * kFeatures + threadIdx.x].y;
    }
  }
  return total;
}

__global__ void __launch_bounds__(kBlockThreads)
    dense_block_forward_kernel(int n, int c, const float* x, float epsilon, float decay,
                               const float* gamma, const float* beta, DropoutTerms drop, float* y,
                               float* mean, float* invstd, float* running_mean,
                               float* running_var) {
  __shared__ double2 warp_part[kWarps * kFeatures];
  __shared__ Affine affine[kFeatures];
  const int f = blockIdx.x * kFeatures + threadIdx.x;
  const bool live = f < c;
  double s = 0.0, ss = 0.0;
  if (live) {
#pragma unroll 4
    for (int i = threadIdx.y; i < n; i += kLanes) {
      const double v = x[static_cast<std::size_t>(i) * c + f];
      s += v;
      ss += v * v;  // exact in double: a float's square has at most 48 significant bits
    }
  }
  const double2 total = feature_sums(s, ss, warp_part);
  if (threadIdx.y == 0 && live) {
    // batch_norm_stats hands the finalize float sums: round them the same way.
    const float sum = static_cast<float>(total.x), sumsq = static_cast<float>(total.y);
    float m, is, rm = running_mean[f], rv = running_var[f];
    batch_norm_finalize_channel(static_cast<double>(n), static_cast<double>(sum),
                                static_cast<double>(sumsq), epsilon, decay, m, is, rm, rv);
    mean[f] = m;
    invstd[f] = is;
    running_mean[f] = rm;
    running_var[f] = rv;
    Affine t;
    t.a = __fmul_rn(is, gamma ? gamma[f] : 1.0f);
    t.b = __fsub_rn(beta ? beta[f] : 0.0f, __fmul_rn(m, t.a));
    affine[threadIdx.x] = t;
  }
  __syncthreads();
  if (!live) return;
  const Affine t = affine[threadIdx.x];
  const uint32_t step = dropout_step(drop);
#pragma unroll 4
  for (int i = threadIdx.y; i < n; i += kLanes) {
    const std::size_t o = static_cast<std::size_t>(i) * c + f;
    y[o] = block_output(drop, step, i, f, x[o], t);
  }
}

// The backward apply's terms of one feature, as batch_norm_backward_apply computes them.
struct ApplyTerms {
  float k, mean_dy, mean_dy_xhat;
};

__global__ void __launch_bounds__(kBlockThreads)
    dense_block_backward_kernel(int n, int c, const float* x, const float* mean,
                                const float* invstd, const float* gamma, const float* beta,
                                DropoutTerms drop, const float* dy, float* dx, float* dgamma,
                                float* dbeta) {
  __shared__ double2 warp_part[kWarps * kFeatures];
  __shared__ ApplyTerms terms[kFeatures];
  const int f = blockIdx.x * kFeatures + threadIdx.x;
  const bool live = f < c;
  const uint32_t step = dropout_step(drop);
  Affine t{0.0f, 0.0f};
  float m = 0.0f, is = 0.0f;
  if (live) {
    t = affine_of(f, mean, invstd, gamma, beta);
    m = mean[f];
    is = invstd[f];
  }
  // The gradient the chain hands batch_norm_backward_reduce (dense_block_terms.cuh).
  const auto gradient = [&](int i, std::size_t o, float xv) {
    return block_gradient(drop, step, i, f, xv, t, dy[o]);
  };
  double s = 0.0, sx = 0.0;
  if (live) {
    const double md = m;
#pragma unroll 4
    for (int i = threadIdx.y; i < n; i += kLanes) {
      const std::size_t o = static_cast<std::size_t>(i) * c + f;
      const float xv = x[o];
      const double g = gradient(i, o, xv);
      s += g;
      sx += g * (static_cast<double>(xv) - md);
    }
  }
  const double2 total = feature_sums(s, sx, warp_part);
  if (threadIdx.y == 0 && live) {
    // batch_norm_backward_reduce's floats, which the chain then copies to dbeta and dgamma.
    const float sum_dy = static_cast<float>(total.x);
    const float sum_dy_xhat = static_cast<float>(total.y * static_cast<double>(is));
    if (dbeta) dbeta[f] = sum_dy;
    if (dgamma) dgamma[f] = sum_dy_xhat;
    ApplyTerms a;
    a.k = __fmul_rn(gamma ? gamma[f] : 1.0f, is);
    a.mean_dy = static_cast<float>(static_cast<double>(sum_dy) / n);
    a.mean_dy_xhat = static_cast<float>(static_cast<double>(sum_dy_xhat) / n);
    terms[threadIdx.x] = a;
  }
  __syncthreads();
  if (!live || !dx) return;
  const ApplyTerms a = terms[threadIdx.x];
#pragma unroll 4
  for (int i = threadIdx.y; i < n; i += kLanes) {
    const std::size_t o = static_cast<std::size_t>(i) * c + f;
    const float xv = x[o];
    const float g = gradient(i, o, xv);
    // k * (g - mean_dy - (x - mean) * invstd * mean_dy_xhat), rounded step by step as the CPU.
    const float xhat_term = __fmul_rn(__fmul_rn(__fsub_rn(xv, m), is), a.mean_dy_xhat);
    dx[o] = __fmul_rn(a.k, __fsub_rn(__fsub_rn(g, a.mean_dy), xhat_term));
  }
}

dim3 grid_of(int c) {
  return dim3(static_cast<unsigned>(ceil_div(c, kFeatures)));
}

}  // namespace

void dense_block_forward(cudaStream_t stream, int n, int c, const float* x, float epsilon,
                         float decay, const float* gamma, const float* beta,
                         const DropoutArgs* dropout, float* y, float* mean, float* invstd,
                         float* running_mean, float* running_var) {
  MNIST_LAUNCH(dense_block_forward_kernel, grid_of(c), dim3(kFeatures, kLanes), 0, stream)
  (n, c, x, epsilon, decay, gamma, beta, dropout_terms(dropout), y, mean, invstd, running_mean,
   running_var);
  MNIST_CUDA_LAUNCH_CHECK(stream, "dense_block_forward_kernel");
}

void dense_block_backward(cudaStream_t stream, int n, int c, const float* x, const float* mean,
                          const float* invstd, const float* gamma, const float* beta,
                          const DropoutArgs* dropout, const float* dy, float* dx, float* dgamma,
                          float* dbeta) {
  MNIST_LAUNCH(dense_block_backward_kernel, grid_of(c), dim3(kFeatures, kLanes), 0, stream)
  (n, c, x, mean, invstd, gamma, beta, dropout_terms(dropout), dy, dx, dgamma, dbeta);
  MNIST_CUDA_LAUNCH_CHECK(stream, "dense_block_backward_kernel");
}

}  // namespace mnist::cuda
