// The network's head in one kernel: logits = x W^T + b, softmax cross-entropy, dlogits, and both
// gradients of the dense layer, without the logits or dlogits ever leaving registers.
//
// How the work is split: one warp per sample row (8 warps per block, the grid striding over rows:
// one row a warp up to kMaxBlocks blocks, 128 blocks at batch 1024, so the rows spread over the
// SMs instead of queueing ~4 deep on a quarter of them). The block stages W [k, in] in shared
// memory. Lane l holds inputs i = l, l + 32, ... (at most 4, in <= 128) of its row: it computes
// partial dot products for every class, a butterfly of shuffles gives every lane all k logits, and
// each lane then evaluates the softmax itself (k <= 16), writes its inputs' dx = dlogits W and adds
// dlogits * x into its fp32 dW accumulators (and dlogits into dbias's). At the end the block's 8
// warps add their accumulators pairwise through shared-memory slots in a fixed order (three
// barriers, every thread adding a share of the row, instead of 8 warp-ordered phases with 7
// warps waiting in each) and the block writes its partial row (gradients, loss, hit count) to
// the workspace. The rows are added in two fixed-order levels
// inside the launch, in double: the last block of each group of kHeadGroup consecutive blocks
// adds its group's rows in block order (overlapping the other groups' rows), and the last group
// to finish adds the groups' sums in group order (one level when there is one group). The grid is
// fixed by n and the orders by the grid, so the gradients and metrics repeat bit for bit (no
// atomics but the block counters).
//
// Measured times and ncu's stall samples: docs/gpu_speed.md ("the fused step kernel by kernel",
// "kernel notes"); the kernel is compiled for at most 10 classes when the network has 10. Measured
// on the H200 at n = 1024, in = 100, k = 10 with 32 blocks of 4 rows a warp: 52.4 us, ~100 SMs
// idle and ~2,300 dependent instructions a row, four rows in a row. The model for this grid (an
// ESTIMATE, unmeasured; the model before this one was wrong by 12x): one row a warp on 128 blocks,
// ~2,300 instructions at ~4-6 cycles each, ~6-8 us; the two levels of the sum read 16 and 8 rows
// of 1,012 doubles (130 and 65 KB) in one block each, ~2 us: ~10-14 us in all.
#include "backend/cuda/dense_head.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/dense_block_terms.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/kernel_args.hpp"
#include "core/error.hpp"

namespace mnist::cuda {
namespace {

constexpr int kMaxClasses = 16, kMaxIn = 128, kPerLane = kMaxIn / 32;
// The kernel is compiled for at most KC classes: its per-class loops unroll over KC and are
// predicated past k, so a bound of 16 runs the instructions of 16 classes for MNIST's 10. A head
// of at most kClassesCommon classes (every MNIST-format dataset) runs the kernel compiled for
// that many; larger ones, up to kMaxClasses, the other. One row's instructions set the kernel's
// time (a warp's rows follow one another, and ~2 warps per scheduler cannot hide their latency).
constexpr int kClassesCommon = 10;
constexpr int kHeadWarps = 8, kHeadThreads = 32 * kHeadWarps;
// One row a warp per pass of the grid, up to kMaxBlocks blocks (about two per SM of a 132-SM
// card; more rows a warp past batch 2048). Fixed, not read from the device, so the summation
// order is the same on every GPU.
constexpr int kMaxBlocks = 256;
int head_blocks(int n) {
  return std::clamp((n + kHeadWarps - 1) / kHeadWarps, 1, kMaxBlocks);
}
// Blocks per group of the first level of the cross-block sum: ~sqrt(kMaxBlocks), so that neither
// level's last block reads many more rows than the other's.
constexpr int kHeadGroup = 16;
__host__ __device__ inline int head_groups(int blocks) {
  return (blocks + kHeadGroup - 1) / kHeadGroup;
}
static_assert(1 + (kMaxBlocks + kHeadGroup - 1) / kHeadGroup <= kBlockCounters,
              "a counter per group and one for the groups");

// The dense block in front of the head (FusedKernels::dense_block_softmax_cross_entropy): when
// `on`, x is the block's input, each lane computes the block's output of its inputs as it reads
// them, turns its dx into the gradient that reaches the block's batch norm (written to dbn instead
// of dx) and adds that gradient's two per-feature sums, which go with the block's partial.
struct HeadBlock {
  bool on = false;
  const float *mean = nullptr, *invstd = nullptr, *gamma = nullptr, *beta = nullptr;
  DropoutTerms drop;
  float* dbn = nullptr;
  float *sum_dy = nullptr, *sum_dy_xhat = nullptr;
};

// Doubles of one block's partial: the gradients, the loss, the hit count and, with a block, its
// two sums per input.
__host__ __device__ inline int partial_row(int in, int k, bool block) {
  return k * in + k + 2 + (block ? 2 * in : 0);
}

// The kernel's shared memory, at namespace scope so that its two instantiations (KC = 10 and 16)
// share one copy: the CUDA emulation poisons the whole __shared__ section at the start of every
// block of every kernel, and a copy per instantiation would make every emulated launch slower.
// On a GPU the KC = 10 kernel then reserves the KC = 16 sizes (about 43 KB a block); the head ran
// one block per SM, bound by its registers (docs/gpu_speed.md, "kernel notes"), where those bytes
// change nothing. Should it become bound by shared memory, per-instantiation arrays are the fix.
//
// The pool holds W [k, in] while the rows run, and afterwards kSlots slots of warps'
// accumulators (a slot: the gradient sums, k * in + k floats, then with a block its 2 * in
// double sums): half the warps store theirs, the other half add them, and the block's row is
// the sum of the slots (see the kernel's end).
constexpr int kSlots = kHeadWarps / 2;
constexpr int kSlotFloats = kMaxClasses * kMaxIn + kMaxClasses;
constexpr int kSlotBytes = kSlotFloats * 4 + 2 * kMaxIn * 8;
static_assert(kSlotFloats % 2 == 0, "a slot's doubles are 8-byte aligned");
static_assert(kSlots * kSlotBytes >= kMaxClasses * kMaxIn * 4, "W fits the pool");
__shared__ double pool[kSlots * kSlotBytes / 8];
__device__ __forceinline__ float* staged_weights() {
  return reinterpret_cast<float*>(pool);
}
__device__ __forceinline__ float* slot_floats(int slot) {
  return reinterpret_cast<float*>(reinterpret_cast<char*>(pool) + slot * kSlotBytes);
}
__device__ __forceinline__ double* slot_doubles(int slot) {
  return reinterpret_cast<double*>(reinterpret_cast<char*>(pool) + slot * kSlotBytes +
                                   kSlotFloats * 4);
}
__shared__ Affine affine[kMaxIn];  // with a block: each input's batch-norm apply
__shared__ float warp_loss[kHeadWarps];
__shared__ float warp_correct[kHeadWarps];
__shared__ int is_last;

// Entry e of rows[count, row_length] added in row order, in double: rows[0][e] + rows[1][e] + ...
// (the rows were written by other blocks: volatile, not from a stale cache line).
__device__ __forceinline__ double add_column(const volatile double* rows, int count, int row_length,
                                             int e) {
  double total = 0.0;
  for (int r = 0; r < count; ++r) total += rows[static_cast<std::size_t>(r) * row_length + e];
  return total;
}

// The head's outputs from the rows of its last level (the blocks' rows when there is one group,
// else the groups' sums): the gradients, the block's sums and the metrics.
__device__ void finish_head(const volatile double* rows, int count, int row_length, int in, int k,
                            int n, float* dweight, float* dbias, float* metrics,
                            const HeadBlock& blk) {
  const int weights = k * in, grads = weights + k;
  for (int e = threadIdx.x; e < grads; e += kHeadThreads) {
    const double total = add_column(rows, count, row_length, e);
    if (e < weights) {
      dweight[e] = static_cast<float>(total);
    } else if (dbias) {
      dbias[e - weights] = static_cast<float>(total);
    }
  }
  if (blk.on) {
    for (int e = threadIdx.x; e < 2 * in; e += kHeadThreads) {
      const double total = add_column(rows, count, row_length, grads + 2 + e);
      // batch_norm_backward_reduce's floats: sum_dy_xhat = invstd * sum of dy * (x - mean).
      if (e < in)
        blk.sum_dy[e] = static_cast<float>(total);
      else
        blk.sum_dy_xhat[e - in] =
            static_cast<float>(total * static_cast<double>(blk.invstd[e - in]));
    }
  }
  if (threadIdx.x == 0) {
    metrics[kLossSum] += static_cast<float>(add_column(rows, count, row_length, grads));
    metrics[kCorrect] += static_cast<float>(add_column(rows, count, row_length, grads + 1));
    metrics[kSamples] += static_cast<float>(n);
  }
}

// The two fixed-order levels of the cross-block sum (see the top of the file), after this block
// wrote its row: the last block of the block's group adds the group's rows into
// group_sums[group] (counted on counter[1 + group]); the last of those adds the groups and writes
// the head's outputs (counted on counter[0]). With one group, its last block writes the outputs
// from the blocks' rows directly.
__device__ void add_head_rows(const double* partial, double* group_sums, int row_length, int in,
                              int k, int n, float* dweight, float* dbias, float* metrics,
                              const HeadBlock& blk, unsigned* counter) {
  const int blocks = static_cast<int>(gridDim.x), groups = head_groups(blocks);
  if (groups == 1) {
    if (!arrive_last(counter, is_last)) return;
    finish_head(partial, blocks, row_length, in, k, n, dweight, dbias, metrics, blk);
    depart_last(counter);
    return;
  }
  const int group = static_cast<int>(blockIdx.x) / kHeadGroup, first = group * kHeadGroup;
  const int members = min(kHeadGroup, blocks - first);
  if (!arrive_last(counter + 1 + group, is_last, static_cast<unsigned>(members))) return;
  const volatile double* rows_of_group = partial + static_cast<std::size_t>(first) * row_length;
  for (int e = threadIdx.x; e < row_length; e += kHeadThreads)
    group_sums[static_cast<std::size_t>(group) * row_length + e] =
        add_column(rows_of_group, members, row_length, e);
  depart_last(counter + 1 + group);
  if (!arrive_last(counter, is_last, static_cast<unsigned>(groups))) return;
  finish_head(group_sums, groups, row_length, in, k, n, dweight, dbias, metrics, blk);
  depart_last(counter);
}

template <int KC>
__global__ void __launch_bounds__(kHeadThreads)
    dense_softmax_cross_entropy_kernel(int n, int in, int k, const float* x, const float* weight,
                                       const float* bias, const int32_t* labels, float grad_scale,
                                       float* dx, float* dweight, float* dbias, float* metrics,
                                       HeadBlock blk, unsigned* counter,
                                       double* partial /* [grid, partial_row] */,
                                       double* group_sums /* [head_groups(grid), partial_row] */) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int weights = k * in, grads = weights + k;
  float* w_s = staged_weights();
  for (int i = threadIdx.x; i < weights; i += kHeadThreads) w_s[i] = weight[i];
  if (blk.on) {
    for (int i = threadIdx.x; i < in; i += kHeadThreads)
      affine[i] = affine_of(i, blk.mean, blk.invstd, blk.gamma, blk.beta);
  }
  const uint32_t step = blk.on ? dropout_step(blk.drop) : 0u;
  __syncthreads();

  float acc_w[kPerLane][KC] = {};
  float acc_b[KC] = {};
  double acc_dy[kPerLane] = {}, acc_dy_x[kPerLane] = {};  // with a block: its sums, per input
  float loss_sum = 0.0f, correct = 0.0f;
  for (int row = blockIdx.x * kHeadWarps + warp; row < n; row += gridDim.x * kHeadWarps) {
    float xv[kPerLane], in_v[kPerLane];  // the head's inputs; with a block, also the block's
#pragma unroll
    for (int m = 0; m < kPerLane; ++m) {
      const int i = lane + 32 * m;
      in_v[m] = i < in ? x[static_cast<std::size_t>(row) * in + i] : 0.0f;
      xv[m] = blk.on && i < in ? block_output(blk.drop, step, row, i, in_v[m], affine[i]) : in_v[m];
    }
    float z[KC];
#pragma unroll
    for (int j = 0; j < KC; ++j) {
      z[j] = 0.0f;
      if (j < k) {  // the same for every lane: the shuffles below see the whole warp
        float part = 0.0f;
#pragma unroll
        for (int m = 0; m < kPerLane; ++m) {
          const int i = lane + 32 * m;
          if (i < in) part = fmaf(xv[m], w_s[j * in + i], part);
        }
        for (int offset = 16; offset > 0; offset /= 2)
          part += __shfl_xor_sync(0xffffffffu, part, offset);
        z[j] = part + (bias ? bias[j] : 0.0f);
      }
    }
    // Every lane now holds all k logits (the butterfly gives each the same sum).
    float best = z[0];
    int best_index = 0;
#pragma unroll
    for (int j = 1; j < KC; ++j) {
      if (j < k && z[j] > best) {  // strict: ties keep the lowest index
        best = z[j];
        best_index = j;
      }
    }
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < KC; ++j)
      if (j < k) sum += expf(z[j] - best);
    const int label = labels[row];
    float label_logit = NAN;
#pragma unroll
    for (int j = 0; j < KC; ++j)
      if (j < k && j == label) label_logit = z[j];
    if (lane == 0) {
      loss_sum += logf(sum) - (label_logit - best);  // NaN for a label outside [0, k)
      correct += best_index == label ? 1.0f : 0.0f;
    }
    float d[KC];
#pragma unroll
    for (int j = 0; j < KC; ++j)
      d[j] = j < k ? (expf(z[j] - best) / sum - (j == label ? 1.0f : 0.0f)) * grad_scale : 0.0f;
#pragma unroll
    for (int m = 0; m < kPerLane; ++m) {
      const int i = lane + 32 * m;
      if (i >= in) continue;
      if (dx || blk.on) {
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < KC; ++j)
          if (j < k) s = fmaf(d[j], w_s[j * in + i], s);
        if (blk.on) {
          // The gradient that reaches the batch norm, and its sums as dense_block_backward's.
          const float g = block_gradient(blk.drop, step, row, i, in_v[m], affine[i], s);
          blk.dbn[static_cast<std::size_t>(row) * in + i] = g;
          acc_dy[m] += g;
          acc_dy_x[m] += static_cast<double>(g) *
                         (static_cast<double>(in_v[m]) - static_cast<double>(blk.mean[i]));
        } else {
          dx[static_cast<std::size_t>(row) * in + i] = s;
        }
      }
#pragma unroll
      for (int j = 0; j < KC; ++j) acc_w[m][j] = fmaf(d[j], xv[m], acc_w[m][j]);
    }
#pragma unroll
    for (int j = 0; j < KC; ++j) acc_b[j] += d[j];
  }

  if (lane == 0) {
    warp_loss[warp] = loss_sum;
    warp_correct[warp] = correct;
  }
  // The block's gradient, in a fixed order in three barriers (the rows' last one included): warps
  // 4-7 store their accumulators in slots 0-3 (over W, free once every warp is past its rows),
  // warps 0-3 add slot w to their own, store the pair sums back, and every thread then adds the
  // four slots of its entries of the row: ((w0 + w4) + (w1 + w5)) + (w2 + w6) + (w3 + w7).
  auto store_slot = [&](int slot) {
    float* f = slot_floats(slot);
    double* d = slot_doubles(slot);
#pragma unroll
    for (int m = 0; m < kPerLane; ++m) {
      const int i = lane + 32 * m;
      if (i >= in) continue;
#pragma unroll
      for (int j = 0; j < KC; ++j)
        if (j < k) f[j * in + i] = acc_w[m][j];
      if (blk.on) {
        d[i] = acc_dy[m];
        d[in + i] = acc_dy_x[m];
      }
    }
    if (lane == 0) {
#pragma unroll
      for (int j = 0; j < KC; ++j)
        if (j < k) f[weights + j] = acc_b[j];
    }
  };
  __syncthreads();
  if (warp >= kSlots) store_slot(warp - kSlots);
  __syncthreads();
  if (warp < kSlots) {
    const float* f = slot_floats(warp);
    const double* d = slot_doubles(warp);
#pragma unroll
    for (int m = 0; m < kPerLane; ++m) {
      const int i = lane + 32 * m;
      if (i >= in) continue;
#pragma unroll
      for (int j = 0; j < KC; ++j)
        if (j < k) acc_w[m][j] += f[j * in + i];
      if (blk.on) {
        acc_dy[m] += d[i];
        acc_dy_x[m] += d[in + i];
      }
    }
#pragma unroll
    for (int j = 0; j < KC; ++j)
      if (j < k) acc_b[j] += f[weights + j];
  }
  __syncthreads();
  if (warp < kSlots) store_slot(warp);
  __syncthreads();
  // The block's row: its gradient sums, then its loss and hit count, then the block's sums.
  const int row_length = partial_row(in, k, blk.on);
  double* row = partial + static_cast<std::size_t>(blockIdx.x) * row_length;
  if (threadIdx.x == 0) {
    float block_loss = 0.0f, block_correct = 0.0f;
    for (int w = 0; w < kHeadWarps; ++w) {
      block_loss += warp_loss[w];
      block_correct += warp_correct[w];
    }
    row[grads] = block_loss;
    row[grads + 1] = block_correct;
  }
  for (int e = threadIdx.x; e < grads; e += kHeadThreads) {
    double total = 0.0;
#pragma unroll
    for (int slot = 0; slot < kSlots; ++slot) total += slot_floats(slot)[e];
    row[e] = total;
  }
  if (blk.on) {
    for (int e = threadIdx.x; e < 2 * in; e += kHeadThreads) {
      double total = 0.0;
#pragma unroll
      for (int slot = 0; slot < kSlots; ++slot) total += slot_doubles(slot)[e];
      row[grads + 2 + e] = total;
    }
  }

  add_head_rows(partial, group_sums, row_length, in, k, n, dweight, dbias, metrics, blk, counter);
}

}  // namespace

bool dense_head_supports(int n, int in, int k) {
  return n >= 0 && in >= 1 && in <= kMaxIn && k >= 1 && k <= kMaxClasses;
}

std::size_t dense_head_workspace_floats(int n, int in, int k) {
  // With or without a block (the larger): the blocks' partial rows and the groups' sums, in
  // doubles.
  const int blocks = head_blocks(n);
  return 2 * static_cast<std::size_t>(blocks + head_groups(blocks)) * partial_row(in, k, true);
}

namespace {
void launch_head(cudaStream_t stream, const char* op, int n, int in, int k, const float* x,
                 const float* weight, const float* bias, const int32_t* labels, float grad_scale,
                 float* dx, float* dweight, float* dbias, float* metrics, const HeadBlock& blk,
                 float* workspace, unsigned* counter) {
  MNIST_CHECK(dense_head_supports(n, in, k),
              "{}: {} inputs, {} classes, batch {}: the fused kernel takes 1..{} inputs and 1..{} "
              "classes",
              op, in, k, n, kMaxIn, kMaxClasses);
  MNIST_CHECK(reinterpret_cast<std::uintptr_t>(workspace) % alignof(double) == 0,
              "{}: workspace {} is not {}-byte aligned (it holds doubles)", op,
              static_cast<const void*>(workspace), alignof(double));
  double* partial = reinterpret_cast<double*>(workspace);
  const int blocks = head_blocks(n);
  double* group_sums = partial + static_cast<std::size_t>(blocks) * partial_row(in, k, blk.on);
  auto launch = [&](auto bound) {  // bound: the class bound KC, as a std::integral_constant
    MNIST_LAUNCH(dense_softmax_cross_entropy_kernel<decltype(bound)::value>, blocks, kHeadThreads,
                 0, stream)
    (n, in, k, x, weight, bias, labels, grad_scale, dx, dweight, dbias, metrics, blk, counter,
     partial, group_sums);
  };
  if (k <= kClassesCommon) {
    launch(std::integral_constant<int, kClassesCommon>{});
  } else {
    launch(std::integral_constant<int, kMaxClasses>{});
  }
  MNIST_CUDA_LAUNCH_CHECK(stream, "dense_softmax_cross_entropy_kernel");
}
}  // namespace

void dense_softmax_cross_entropy(cudaStream_t stream, int n, int in, int k, const float* x,
                                 const float* weight, const float* bias, const int32_t* labels,
                                 float grad_scale, float* dx, float* dweight, float* dbias,
                                 float* metrics, float* workspace, unsigned* counter) {
  launch_head(stream, "dense_softmax_cross_entropy", n, in, k, x, weight, bias, labels, grad_scale,
              dx, dweight, dbias, metrics, HeadBlock{}, workspace, counter);
}

void dense_block_softmax_cross_entropy(cudaStream_t stream, int n, int in, int k,
                                       const DenseBlockInput& block, const float* weight,
                                       const float* bias, const int32_t* labels, float grad_scale,
                                       float* dbn, float* sum_dy, float* sum_dy_xhat,
                                       float* dweight, float* dbias, float* metrics,
                                       float* workspace, unsigned* counter) {
  MNIST_CHECK(n >= 1 && block.x && block.mean && block.invstd && dbn && sum_dy && sum_dy_xhat,
              "dense_block_softmax_cross_entropy needs n >= 1 (got {}), the block's input, mean, "
              "invstd, and dbn, sum_dy, sum_dy_xhat",
              n);
  HeadBlock blk;
  blk.on = true;
  blk.mean = block.mean;
  blk.invstd = block.invstd;
  blk.gamma = block.gamma;
  blk.beta = block.beta;
  blk.drop = dropout_terms(block.has_dropout ? &block.dropout : nullptr);
  blk.dbn = dbn;
  blk.sum_dy = sum_dy;
  blk.sum_dy_xhat = sum_dy_xhat;
  launch_head(stream, "dense_block_softmax_cross_entropy", n, in, k, block.x, weight, bias, labels,
              grad_scale, nullptr, dweight, dbias, metrics, blk, workspace, counter);
}

}  // namespace mnist::cuda
