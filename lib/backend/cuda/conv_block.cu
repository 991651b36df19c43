// Batch-norm apply + ReLU + 2x2 max pool in one pass, and its backward in two: the CUDA twin of
// backend/cpu/native/conv_block.cpp, one kernel launch per op.
//
// How the work is split: a thread takes one 2x2 window (one pooled value) at a time.
// - forward: a grid-stride loop over the n*c*out_h*out_w windows; the thread normalises its four
//   inputs, picks the winner with the CPU's branch-free tie rule and writes y and the mask byte.
// - backward_reduce: grid (chunks, c), as channel_reduce.cuh: block (b, ch) walks the windows j =
//   b * kThreads + t, stepping chunks * kThreads, of channel ch (j indexes (n, out_h, out_w) in
//   order), sums dbn and dbn * (x - mean) in double per thread, reduces them in the block and
//   writes its partial. The last block to finish (launch.cuh, arrive_last, on the stream's block
//   counter) adds each channel's chunks in chunk order: one launch instead of channel_reduce's two,
//   and the same bits on every run (no atomics in the sums, a grid fixed by the sizes alone).
// - backward_apply: a grid-stride loop over the windows; the thread writes its window's four dx,
//   and the window at the end of a row (column) also the dropped last column (row) of an odd width
//   (height), so every dx element has exactly one writer. Each block first puts the per-channel
//   terms in shared memory (two double divisions per channel per block, not per element).
//
// Arithmetic: each product and sum is rounded on its own (__fmul_rn and kin), as the CPU twin,
// compiled without FMA contraction, rounds them; nvcc would otherwise fuse x * a + b. So y, mask
// and dx match the CPU bit for bit on equal inputs; the reduce's sums differ from the CPU's only in
// the order of double additions.
//
// Measured times: docs/gpu_speed.md ("the fused step kernel by kernel"); the backward apply is
// staged inside the convolutions' backward.
// Performance model made before that (an ESTIMATE from the bytes moved at ~4 TB/s): the
// seed network at batch 1024 on an H200. Block 1 (6 x 28x28, x 19.3 MB, y 4.8 MB, mask 1.2 MB):
// forward 25 MB ~6 us, backward_reduce ~24 MB (x read at the winners touches ~94% of its sectors)
// ~6 us, backward_apply 45 MB ~11 us. Block 2 (12 x 14x14, x 9.6 MB): forward ~3 us, reduce ~3 us,
// apply ~6 us. At these sizes launch latency and the grid's tail (~2-3 us) add to each; block 2's
// x may still sit in the 50 MB L2 after its convolution, which would make its passes faster.
#include "backend/cuda/conv_block.hpp"

#include <algorithm>
#include <cstddef>

#include "backend/cpu/native/conv_block.hpp"
#include "backend/cuda/conv_block_gradient.cuh"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/launch.cuh"
#include "core/error.hpp"

namespace mnist::cuda {
namespace {

// The mask encoding is the CPU twin's: one definition.
constexpr uint8_t kWinnerMask = cpu::native::kWinnerMask, kPassedRelu = cpu::native::kPassedRelu;

// backward_apply keeps the per-channel terms of up to this many channels in shared memory (20
// bytes each); wider layers compute them per window.
constexpr int kTableChannels = 512;

// Where window i of [n*c, out_h, out_w] lies: its plane (n * c + ch), row and column.
struct Window {
  std::size_t plane;
  int oy, ox;
};

__device__ __forceinline__ Window window_at(std::size_t i, std::size_t out_plane, int out_w) {
  Window win;
  win.plane = i / out_plane;
  const int pos = static_cast<int>(i - win.plane * out_plane);
  win.oy = pos / out_w;
  win.ox = pos - win.oy * out_w;
  return win;
}

// v * a + b with two roundings: batch_norm_apply's expression in the CPU twin.
__device__ __forceinline__ float normalized(float v, float a, float b) {
  return __fadd_rn(__fmul_rn(v, a), b);
}

__global__ void bn_relu_pool_forward_kernel(PoolGeom g, const float* x, const float* mean,
                                            const float* invstd, const float* gamma,
                                            const float* beta, float* y, uint8_t* mask) {
  const std::size_t out_plane = static_cast<std::size_t>(g.out_h) * g.out_w;
  const std::size_t in_plane = static_cast<std::size_t>(g.h) * g.w;
  const std::size_t total = static_cast<std::size_t>(g.n) * g.c * out_plane;
  for (const std::size_t i : grid_stride(total)) {
    const Window win = window_at(i, out_plane, g.out_w);
    const int ch = static_cast<int>(win.plane % g.c);
    const float a = __fmul_rn(invstd[ch], gamma ? gamma[ch] : 1.0f);
    const float b = __fsub_rn(beta ? beta[ch] : 0.0f, __fmul_rn(mean[ch], a));
    const float* r0 =
        x + win.plane * in_plane + static_cast<std::size_t>(2 * win.oy) * g.w + 2 * win.ox;
    const float* r1 = r0 + g.w;
    const float v0 = normalized(r0[0], a, b), v1 = normalized(r0[1], a, b);
    const float v2 = normalized(r1[0], a, b), v3 = normalized(r1[1], a, b);
    // The CPU twin's tournament: each pair keeps its first element on ties (and on NaN), the
    // bottom pair wins only when strictly greater: max_pool_forward's row-major first-wins rule.
    const int top_right = v1 > v0, bottom_right = v3 > v2;
    const float top = top_right ? v1 : v0, bottom = bottom_right ? v3 : v2;
    const int lower = bottom > top;
    const float best = lower ? bottom : top;
    const int at = lower ? 2 + bottom_right : top_right;
    // The ReLU keeps NaN (!(NaN <= 0)), as relu_forward does, so divergence stays visible.
    y[i] = !(best <= 0.0f) ? best : 0.0f;
    mask[i] = static_cast<uint8_t>(at | (best > 0.0f ? kPassedRelu : 0));
  }
}

__global__ void __launch_bounds__(kThreads)
    bn_relu_pool_backward_reduce_kernel(PoolGeom g, int chunks, const float* dy,
                                        const uint8_t* mask, const float* x, const float* mean,
                                        const float* invstd, float* sum_dy, float* sum_dy_xhat,
                                        unsigned* counter, double2* partial /* [c, chunks] */) {
  __shared__ double shared[kThreads / 32];
  __shared__ int is_last;
  const int ch = blockIdx.y;
  const std::size_t out_plane = static_cast<std::size_t>(g.out_h) * g.out_w;
  const std::size_t in_plane = static_cast<std::size_t>(g.h) * g.w;
  const std::size_t count = static_cast<std::size_t>(g.n) * out_plane;
  const double m = mean[ch];
  double s = 0.0, sx = 0.0;
  // j counts (sample, oy, ox) of this channel: its "plane" is the sample, the window's plane in
  // the buffers is sample * c + ch. A thread takes j = first, first + step, ... and adds them in
  // that order, kBatch at a time: the batch's mask and dy loads go out together, then its x loads
  // (whose addresses need the masks), then the adds in j order. (One j at a time, the two
  // dependent loads of each window set the kernel's time: docs/gpu_speed.md, "kernel notes".)
  constexpr int kBatch = 4;
  const std::size_t step = static_cast<std::size_t>(chunks) * kThreads;
  for (std::size_t first = static_cast<std::size_t>(blockIdx.x) * kThreads + threadIdx.x;
       first < count; first += kBatch * step) {
    uint8_t mk[kBatch];
    float dyv[kBatch];
    std::size_t window[kBatch];  // the window's top-left element in x
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const std::size_t j = first + u * step < count ? first + u * step : first;
      const Window win = window_at(j, out_plane, g.out_w);
      const std::size_t plane = win.plane * g.c + ch;
      const std::size_t o = plane * out_plane + (j - win.plane * out_plane);
      mk[u] = mask[o];
      dyv[u] = dy[o];
      window[u] = plane * in_plane + static_cast<std::size_t>(2 * win.oy) * g.w + 2 * win.ox;
    }
    float xv[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
      xv[u] = x[window[u] + static_cast<std::size_t>((mk[u] >> 1) & 1) * g.w + (mk[u] & 1)];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (first + u * step >= count) break;
      // As the CPU twin: a stopped gradient adds 0 (and 0 * (x - mean), so an infinite or NaN
      // winner shows in the sum there too).
      const double d = (mk[u] & kPassedRelu) ? static_cast<double>(dyv[u]) : 0.0;
      s += d;
      sx += d * (static_cast<double>(xv[u]) - m);
    }
  }
  s = block_sum(s, shared);
  sx = block_sum(sx, shared);
  if (threadIdx.x == 0)
    partial[static_cast<std::size_t>(ch) * chunks + blockIdx.x] = make_double2(s, sx);

  // The last block to get here adds every channel's partials, in chunk order.
  if (!arrive_last(counter, is_last)) return;
  // Written by other blocks: read past any stale cache line.
  const volatile double* all = reinterpret_cast<const volatile double*>(partial);
  for (int c = threadIdx.x; c < g.c; c += kThreads) {
    double total = 0.0, total_x = 0.0;
    for (int b = 0; b < chunks; ++b) {
      const std::size_t at = 2 * (static_cast<std::size_t>(c) * chunks + b);
      total += all[at];
      total_x += all[at + 1];
    }
    sum_dy[c] = static_cast<float>(total);
    sum_dy_xhat[c] = static_cast<float>(total_x * invstd[c]);
  }
  depart_last(counter);
}

__global__ void bn_relu_pool_backward_apply_kernel(PoolGeom g, const float* dy, const uint8_t* mask,
                                                   const float* x, const float* mean,
                                                   const float* invstd, const float* gamma,
                                                   const float* sum_dy, const float* sum_dy_xhat,
                                                   double count, float* dx) {
  __shared__ ApplyTerms table[kTableChannels];
  const bool tabled = g.c <= kTableChannels;
  if (tabled) {
    for (int ch = threadIdx.x; ch < g.c; ch += blockDim.x)
      table[ch] = apply_terms(ch, mean, invstd, gamma, sum_dy, sum_dy_xhat, count);
  }
  __syncthreads();
  const std::size_t out_plane = static_cast<std::size_t>(g.out_h) * g.out_w;
  const std::size_t in_plane = static_cast<std::size_t>(g.h) * g.w;
  const std::size_t total = static_cast<std::size_t>(g.n) * g.c * out_plane;
  const bool odd_w = g.w & 1, odd_h = g.h & 1;
  for (const std::size_t i : grid_stride(total)) {
    const Window win = window_at(i, out_plane, g.out_w);
    const int ch = static_cast<int>(win.plane % g.c);
    const ApplyTerms t =
        tabled ? table[ch] : apply_terms(ch, mean, invstd, gamma, sum_dy, sum_dy_xhat, count);
    const uint8_t mk = mask[i];
    // The routed gradient: dy at the winner when it passed the ReLU, 0 everywhere else.
    const int winner = (mk & kPassedRelu) ? (mk & kWinnerMask) : -1;
    const float d = winner >= 0 ? dy[i] : 0.0f;
    const std::size_t r0 =
        win.plane * in_plane + static_cast<std::size_t>(2 * win.oy) * g.w + 2 * win.ox;
    const std::size_t r1 = r0 + g.w;
    dx[r0] = apply_value(winner == 0 ? d : 0.0f, x[r0], t);
    dx[r0 + 1] = apply_value(winner == 1 ? d : 0.0f, x[r0 + 1], t);
    dx[r1] = apply_value(winner == 2 ? d : 0.0f, x[r1], t);
    dx[r1 + 1] = apply_value(winner == 3 ? d : 0.0f, x[r1 + 1], t);
    // Elements no window covers get the batch-statistics terms alone.
    const bool last_column = odd_w && win.ox == g.out_w - 1;
    if (last_column) {
      dx[r0 + 2] = apply_value(0.0f, x[r0 + 2], t);
      dx[r1 + 2] = apply_value(0.0f, x[r1 + 2], t);
    }
    if (odd_h && win.oy == g.out_h - 1) {
      const std::size_t r2 = r1 + g.w;
      dx[r2] = apply_value(0.0f, x[r2], t);
      dx[r2 + 1] = apply_value(0.0f, x[r2 + 1], t);
      if (last_column) dx[r2 + 2] = apply_value(0.0f, x[r2 + 2], t);
    }
  }
}

}  // namespace

bool conv_block_supports(const PoolGeom& g) {
  return cpu::native::conv_block_pool_supported(g);
}

void bn_relu_pool_forward(cudaStream_t stream, const PoolGeom& g, const float* x, const float* mean,
                          const float* invstd, const float* gamma, const float* beta, float* y,
                          uint8_t* mask) {
  const std::size_t total = static_cast<std::size_t>(g.n) * g.c * g.out_h * g.out_w;
  MNIST_LAUNCH(bn_relu_pool_forward_kernel, grid_for(total), kThreads, 0, stream)
  (g, x, mean, invstd, gamma, beta, y, mask);
  MNIST_CUDA_LAUNCH_CHECK(stream, "bn_relu_pool_forward_kernel");
}

void bn_relu_pool_backward_reduce(cudaStream_t stream, const PoolGeom& g, const float* dy,
                                  const uint8_t* mask, const float* x, const float* mean,
                                  const float* invstd, float* sum_dy, float* sum_dy_xhat,
                                  unsigned* counter, const ReduceScratch& scratch) {
  if (g.c <= 0) return;
  MNIST_CHECK(static_cast<std::size_t>(g.c) <= scratch.capacity,
              "bn_relu_pool_backward_reduce: {} channels need {} entries of reduction scratch, "
              "which has {}",
              g.c, g.c, scratch.capacity);
  // channel_reduce's rule: about 8 windows per thread per chunk, at most 64 chunks, bounded by
  // the scratch. It depends on the sizes alone, so the summation order does too.
  const std::size_t count = static_cast<std::size_t>(g.n) * g.out_h * g.out_w;
  const std::size_t per_chunk = static_cast<std::size_t>(kThreads) * 8;
  const std::size_t chunks = std::clamp<std::size_t>(
      (count + per_chunk - 1) / per_chunk, 1,
      std::min<std::size_t>(64, scratch.capacity / static_cast<std::size_t>(g.c)));
  MNIST_LAUNCH(bn_relu_pool_backward_reduce_kernel,
               dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(g.c)), kThreads, 0, stream)
  (g, static_cast<int>(chunks), dy, mask, x, mean, invstd, sum_dy, sum_dy_xhat, counter,
   scratch.partial);
  MNIST_CUDA_LAUNCH_CHECK(stream, "bn_relu_pool_backward_reduce_kernel");
}

void bn_relu_pool_backward_apply(cudaStream_t stream, const PoolGeom& g, const float* dy,
                                 const uint8_t* mask, const float* x, const float* mean,
                                 const float* invstd, const float* gamma, const float* sum_dy,
                                 const float* sum_dy_xhat, double count, float* dx) {
  const std::size_t total = static_cast<std::size_t>(g.n) * g.c * g.out_h * g.out_w;
  MNIST_LAUNCH(bn_relu_pool_backward_apply_kernel, grid_for(total), kThreads, 0, stream)
  (g, dy, mask, x, mean, invstd, gamma, sum_dy, sum_dy_xhat, count, dx);
  MNIST_CUDA_LAUNCH_CHECK(stream, "bn_relu_pool_backward_apply_kernel");
}

}  // namespace mnist::cuda
