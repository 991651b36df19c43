// Dense layers as three variants of the tiled SGEMM in tiled_gemm.cuh (64 x 64 tile per block of
// 256 threads, 4 x 4 per thread); only the operand index maps differ:
//   forward          y[n, out]  = x[n, in]      . weight^T[in, out]   grid: out/64 x n/64
//   backward_data    dx[n, in]  = dy[n, out]    . weight[out, in]     grid: in/64  x n/64
//   backward_weights dW[out,in] = dy^T[out, n]  . x[n, in]            grid: in/64  x out/64
// backward (both) runs the weights' tiles and the data's tiles as one grid (a block is one tile of
// either), since neither reads what the other writes: one launch where the two calls take two.
// The bias gradient is a per-column sum, done by channel_reduce.cuh with hw = 1.
//
// The dense tail's two (FusedKernels::dense_forward_batch_norm, dense_backward_batch_norm):
//   forward_batch_norm: the forward's tiles, each also writing the per-column sum and sum of
//     squares of its outputs (fp32 products summed in double: per thread over its 4 rows, then the
//     16 thread rows in order) as one row of partials; the last block (launch.cuh, arrive_last)
//     adds the rows in tile order, rounds the sums to float as batch_norm_stats stores them and
//     finalizes them (batch_norm_rule.hpp): one launch where the chain takes three.
//   backward_batch_norm: backward's grid, whose blocks read dy as the batch norm's backward apply
//     of the gradient that reached it (conv_block_gradient.cuh's apply_value, the CPU's rounding),
//     each feature's terms computed once per block into shared memory: the apply is never stored.
//
// Measured times, before and after the splits below: docs/gpu_speed.md. The model made before
// any GPU ran it (an ESTIMATE, wrong by 5-30x: the tiles' long k loops on few blocks are
// latency-bound), seed network at batch 1024, 588 -> 100 on an H200: forward 0.12 GFLOP in 32
// tiles, ~4-6 us (the GEMM is latency-bound at this size; the sums add 16 x 64 doubles per block
// and the last block's 16 x 200 adds, ~1 us); backward 0.24 GFLOP in 40 tiles, ~6-8 us, its
// apply 5 float operations per staged dy value (each staged by ~10 tiles), against one 0.8 MB
// read the materialized apply would save: about even, and one launch (~3 us eagerly) fewer.
#include "backend/cuda/dense.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>

#include "core/error.hpp"

#include "backend/batch_norm_rule.hpp"
#include "backend/cuda/conv_block_gradient.cuh"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/tiled_gemm.cuh"

namespace mnist::cuda {

// Set by arrive_last (launch.cuh) in dense_forward_batch_norm's blocks: at namespace scope, where
// the CUDA emulation can place it.
__shared__ int dense_last_block;

namespace {

__global__ void __launch_bounds__(kGemmThreads)
    dense_forward_kernel(int n, int in, int out, const float* x, const float* weight,
                         const float* bias, float* y) {
  auto load_a = [&](int row, int k) { return x[static_cast<std::size_t>(row) * in + k]; };
  auto load_b = [&](int k, int o) { return weight[static_cast<std::size_t>(o) * in + k]; };
  auto store = [&](int row, int o, float v) {
    y[static_cast<std::size_t>(row) * out + o] = bias ? v + bias[o] : v;
  };
  gemm_tile(n, out, 0, in, blockIdx.y, blockIdx.x, load_a, load_b, store);
}

__global__ void __launch_bounds__(kGemmThreads)
    dense_backward_data_kernel(int n, int in, int out, const float* dy, const float* weight,
                               float* dx) {
  auto load_a = [&](int row, int o) { return dy[static_cast<std::size_t>(row) * out + o]; };
  auto load_b = [&](int o, int j) { return weight[static_cast<std::size_t>(o) * in + j]; };
  auto store = [&](int row, int j, float v) { dx[static_cast<std::size_t>(row) * in + j] = v; };
  gemm_tile(n, in, 0, out, blockIdx.y, blockIdx.x, load_a, load_b, store);
}

__global__ void __launch_bounds__(kGemmThreads)
    dense_backward_weights_kernel(int n, int in, int out, const float* x, const float* dy,
                                  float* dweight) {
  auto load_a = [&](int o, int row) { return dy[static_cast<std::size_t>(row) * out + o]; };
  auto load_b = [&](int row, int j) { return x[static_cast<std::size_t>(row) * in + j]; };
  auto store = [&](int o, int j, float v) { dweight[static_cast<std::size_t>(o) * in + j] = v; };
  gemm_tile(out, in, 0, n, blockIdx.y, blockIdx.x, load_a, load_b, store);
}

// A GEMM split over k (split-K, deterministic): block `split` of a tile writes its micro-tiles'
// sums into its slot of tile_slots ([splits][64 * 64] floats); the tile's last block to arrive
// (launch.cuh, on `counter`, which it leaves at 0) gets the slots added in split order in acc and
// returns true. The order is fixed, so the bits repeat from run to run.
__device__ __forceinline__ bool add_split_sums(float (&acc)[4][4], float* tile_slots, int split,
                                               int splits, unsigned* counter) {
  constexpr int kTileFloats = kTileM * kTileN;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
      tile_slots[static_cast<std::size_t>(split) * kTileFloats + (ty + 16 * i) * kTileN + tx +
                 16 * j] = acc[i][j];
  if (!arrive_last(counter, dense_last_block, static_cast<unsigned>(splits))) return false;
  const volatile float* all = tile_slots;  // written by other blocks: not from a stale cache line
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int at = (ty + 16 * i) * kTileN + tx + 16 * j;
      float sum = 0.0f;
      for (int s = 0; s < splits; ++s) sum += all[static_cast<std::size_t>(s) * kTileFloats + at];
      acc[i][j] = sum;
    }
  }
  depart_last(counter);
  return true;
}

// Blocks [0, weight_tiles * splits) are dense_backward_weights_kernel's tiles (row-major over its
// grid of ceil(in/64) columns), `splits` blocks per tile, the rest dense_backward_data_kernel's
// (over ceil(in/64) columns too).
// The weights' GEMM sums over the batch (k = n), so one block per tile leaves a long serial loop
// on a few blocks (20 tiles for 588 -> 100, 64 k-steps each at batch 1024: the step's largest
// kernel when it was measured, docs/gpu_speed.md). With splits > 1, block s of a tile sums rows
// [s * split_rows, (s + 1) * split_rows) into its own slot of `partial`
// ([weight_tiles][splits][64 * 64] floats); the last of the tile's blocks to arrive (launch.cuh,
// on counters[tile]) adds the slots in split order (fixed, so the bits repeat from run to run)
// and stores dweight.
// dy comes from a source (conv_block_gradient.cuh's interface, with hw = 1: element (row, o) at
// offset row * out + o): memory, or the batch norm's backward apply computed as it is staged.
// A block with no data tile left (dx nullptr) runs only the weights' tiles.
template <class Source>
__global__ void __launch_bounds__(kGemmThreads)
    dense_backward_kernel(int n, int in, int out, const float* x, Source dy, const float* weight,
                          float* dweight, float* dx, int weight_tiles, int splits, int split_rows,
                          float* partial, unsigned* counters) {
  __shared__ ApplyTerms terms[kDenseBatchNormFeatures];
  dy.prepare(terms);
  const auto dy_at = [&](int row, int o) {
    return dy(row, o, 0, 0, static_cast<std::size_t>(row) * out + o);
  };
  const int tiles_in = (in + kTileN - 1) / kTileN;
  const int block = static_cast<int>(blockIdx.x);
  if (block < weight_tiles * splits) {
    const int tile = block / splits, split = block % splits;
    const int tile_m = tile / tiles_in, tile_n = tile % tiles_in;
    auto load_a = [&](int o, int row) { return dy_at(row, o); };
    auto load_b = [&](int row, int j) { return x[static_cast<std::size_t>(row) * in + j]; };
    if (splits == 1) {
      auto store = [&](int o, int j, float v) {
        dweight[static_cast<std::size_t>(o) * in + j] = v;
      };
      gemm_tile(out, in, 0, n, tile_m, tile_n, load_a, load_b, store);
      return;
    }
    float acc[4][4];
    const int k_begin = split * split_rows, k_end = min(n, k_begin + split_rows);
    gemm_accumulate(out, in, k_begin, k_end, tile_m, tile_n, load_a, load_b, acc);
    constexpr int kTileFloats = kTileM * kTileN;
    float* slots = partial + static_cast<std::size_t>(tile) * splits * kTileFloats;
    if (!add_split_sums(acc, slots, split, splits, counters + tile)) return;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int o = tile_m * kTileM + ty + 16 * i, col = tile_n * kTileN + tx + 16 * j;
        if (o < out && col < in) dweight[static_cast<std::size_t>(o) * in + col] = acc[i][j];
      }
    }
  } else {
    const int tile = block - weight_tiles * splits;
    auto load_a = [&](int row, int o) { return dy_at(row, o); };
    auto load_b = [&](int o, int j) { return weight[static_cast<std::size_t>(o) * in + j]; };
    auto store = [&](int row, int j, float v) { dx[static_cast<std::size_t>(row) * in + j] = v; };
    gemm_tile(n, in, 0, out, tile / tiles_in, tile % tiles_in, load_a, load_b, store);
  }
}

// The gradient of a dense output that went through a batch norm: its backward apply, from the
// gradient that reached the batch norm (BatchNormGradient, hw = 1).
struct BatchNormApplySource {
  BatchNormGradient g;
  int features = 0;
  const ApplyTerms* terms = nullptr;  // shared memory, from prepare()
  __device__ void prepare(ApplyTerms* table) {
    for (int f = threadIdx.x; f < features; f += blockDim.x)
      table[f] = apply_terms(f, g.mean, g.invstd, g.gamma, g.sum_dy, g.sum_dy_xhat, g.count);
    terms = table;
    __syncthreads();
  }
  __device__ float operator()(int, int f, int, int, std::size_t offset) const {
    return apply_value(g.dy[offset], g.x[offset], terms[f]);
  }
};

// The forward's tile, then its column sums into partial[tile_m][2 * out] (sums, then sums of
// squares); the last tile adds the rows in tile order and finalizes the batch norm. With
// gridDim.z = splits > 1 the tile's k (in) is split: block z sums [z * split_k, (z + 1) *
// split_k) into its slot of `slots` ([tiles][splits][64 * 64] floats) and the tile's last block
// (counters[1 + tile]) adds them (add_split_sums) and runs the epilogue; the tiles are counted
// on counters[0].
__global__ void __launch_bounds__(kGemmThreads)
    dense_forward_batch_norm_kernel(int n, int in, int out, const float* x, const float* weight,
                                    const float* bias, float* y, BatchNormFinalize bn,
                                    unsigned* counters, double* partial, int split_k,
                                    float* slots) {
  __shared__ double column_part[2][kGemmThreads / 16][kTileN];  // [sum, sumsq][thread row][column]
  auto load_a = [&](int row, int k) { return x[static_cast<std::size_t>(row) * in + k]; };
  auto load_b = [&](int k, int o) { return weight[static_cast<std::size_t>(o) * in + k]; };
  float acc[4][4];
  const int splits = static_cast<int>(gridDim.z), split = static_cast<int>(blockIdx.z);
  const int k_begin = split * split_k, k_end = min(in, k_begin + split_k);
  gemm_accumulate(n, out, k_begin, k_end, blockIdx.y, blockIdx.x, load_a, load_b, acc);
  if (splits > 1) {
    const int tile = static_cast<int>(blockIdx.y * gridDim.x + blockIdx.x);
    float* tile_slots = slots + static_cast<std::size_t>(tile) * splits * kTileM * kTileN;
    if (!add_split_sums(acc, tile_slots, split, splits, counters + 1 + tile)) return;
  }
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int m0 = blockIdx.y * kTileM, n0 = blockIdx.x * kTileN;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int o = n0 + tx + 16 * j;
    double s = 0.0, ss = 0.0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = m0 + ty + 16 * i;
      if (row < n && o < out) {
        const float v = bias ? acc[i][j] + bias[o] : acc[i][j];
        y[static_cast<std::size_t>(row) * out + o] = v;
        s += v;
        ss += static_cast<double>(v) * v;  // exact: a float's square has at most 48 bits
      }
    }
    column_part[0][ty][tx + 16 * j] = s;
    column_part[1][ty][tx + 16 * j] = ss;
  }
  __syncthreads();
  if (threadIdx.x < kTileN) {
    const int o = n0 + threadIdx.x;
    double s = 0.0, ss = 0.0;
    for (int r = 0; r < kGemmThreads / 16; ++r) {
      s += column_part[0][r][threadIdx.x];
      ss += column_part[1][r][threadIdx.x];
    }
    if (o < out) {
      double* row = partial + static_cast<std::size_t>(blockIdx.y) * 2 * out;
      row[o] = s;
      row[out + o] = ss;
    }
  }
  if (!arrive_last(counters, dense_last_block, gridDim.x * gridDim.y)) return;
  const volatile double* all = partial;  // written by other blocks: not from a stale cache line
  for (int o = threadIdx.x; o < out; o += blockDim.x) {
    double s = 0.0, ss = 0.0;
    for (unsigned r = 0; r < gridDim.y; ++r) {
      s += all[static_cast<std::size_t>(r) * 2 * out + o];
      ss += all[static_cast<std::size_t>(r) * 2 * out + out + o];
    }
    // batch_norm_stats hands the finalize float sums: round them the same way.
    const float sum = static_cast<float>(s), sumsq = static_cast<float>(ss);
    batch_norm_finalize_channel(bn.count, static_cast<double>(sum), static_cast<double>(sumsq),
                                bn.epsilon, bn.decay, bn.mean[o], bn.invstd[o], bn.running_mean[o],
                                bn.running_var[o]);
  }
  depart_last(counters);
}

struct ColumnValue {
  const float* dy;
  __device__ double2 operator()(std::size_t offset, int) const {
    return make_double2(dy[offset], 0.0);
  }
};
struct StoreSum {
  float* out;
  __device__ void operator()(int ch, double a, double) const { out[ch] = static_cast<float>(a); }
};

}  // namespace

void dense_forward(cudaStream_t stream, int n, int in, int out, const float* x, const float* weight,
                   const float* bias, float* y) {
  if (n == 0 || out == 0) return;
  MNIST_LAUNCH(dense_forward_kernel, gemm_grid(n, out), kGemmThreads, 0, stream)
  (n, in, out, x, weight, bias, y);
  MNIST_CUDA_LAUNCH_CHECK(stream, "dense_forward_kernel");
}

void dense_backward_data(cudaStream_t stream, int n, int in, int out, const float* dy,
                         const float* weight, float* dx) {
  if (n == 0 || in == 0) return;
  MNIST_LAUNCH(dense_backward_data_kernel, gemm_grid(n, in), kGemmThreads, 0, stream)
  (n, in, out, dy, weight, dx);
  MNIST_CUDA_LAUNCH_CHECK(stream, "dense_backward_data_kernel");
}

void dense_backward_weights(cudaStream_t stream, int n, int in, int out, const float* x,
                            const float* dy, float* dweight, float* dbias,
                            const ReduceScratch& scratch) {
  if (out > 0 && in > 0) {
    MNIST_LAUNCH(dense_backward_weights_kernel, gemm_grid(out, in), kGemmThreads, 0, stream)
    (n, in, out, x, dy, dweight);
    MNIST_CUDA_LAUNCH_CHECK(stream, "dense_backward_weights_kernel");
  }
  if (dbias) dense_backward_bias(stream, n, out, dy, dbias, scratch);
}

void dense_backward(cudaStream_t stream, int n, int in, int out, const float* x, const float* dy,
                    const float* weight, float* dweight, float* dbias, float* dx,
                    const ReduceScratch& scratch) {
  if (!dx || n == 0 || in == 0 || out == 0) {
    dense_backward_weights(stream, n, in, out, x, dy, dweight, dbias, scratch);
    if (dx) dense_backward_data(stream, n, in, out, dy, weight, dx);
    return;
  }
  const dim3 weights = gemm_grid(out, in), data = gemm_grid(n, in);
  const long long weight_tiles = static_cast<long long>(weights.x) * weights.y;
  const long long blocks = weight_tiles + static_cast<long long>(data.x) * data.y;
  MNIST_CHECK(blocks <= INT_MAX, "dense_backward: {} tiles exceed a grid's {} blocks", blocks,
              INT_MAX);
  MNIST_LAUNCH(dense_backward_kernel<PlainSource>, static_cast<unsigned>(blocks), kGemmThreads, 0,
               stream)
  (n, in, out, x, PlainSource{dy}, weight, dweight, dx, static_cast<int>(weight_tiles), 1, n,
   nullptr, nullptr);
  MNIST_CUDA_LAUNCH_CHECK(stream, "dense_backward_kernel");
  if (dbias) dense_backward_bias(stream, n, out, dy, dbias, scratch);
}

namespace {

// How dense_forward_batch_norm splits its k (in): enough blocks to fill an H200 (132 SMs, ~4
// blocks each) where the tiles alone are few (588 -> 100 at batch 1024: 32 tiles of 37 k-steps,
// 14% achieved occupancy when measured, docs/gpu_speed.md), each split at least kMinSplitK inputs
// (8 k-steps), a counter per tile besides the tiles' own. A function of the shape alone: the same
// bits every run.
constexpr int kMinSplitK = 128, kForwardBlocksWanted = 512, kMaxForwardSplits = 16;
struct ForwardSplit {
  int splits = 1, k = 0;
};
ForwardSplit forward_split(int row_tiles, int in, int out) {
  const int tiles = row_tiles * static_cast<int>(gemm_grid(1, out).x);
  ForwardSplit f;
  f.k = std::max(in, 1);
  if (1 + tiles > kBlockCounters || in <= kMinSplitK) return f;
  const int wanted = std::min(
      {ceil_div(in, kMinSplitK), std::max(1, kForwardBlocksWanted / tiles), kMaxForwardSplits});
  f.k = ceil_div(ceil_div(in, wanted), kTileK) * kTileK;  // whole k-steps
  f.splits = ceil_div(in, f.k);                           // no empty split
  return f;
}
int row_tiles_of(int n) {
  return ceil_div(std::max(n, 1), kTileM);
}
std::size_t forward_partial_floats(int n, int out) {
  return 2 * static_cast<std::size_t>(row_tiles_of(n)) * 2 * static_cast<std::size_t>(out);
}

}  // namespace

std::size_t dense_forward_batch_norm_workspace_floats(int n, int in, int out) {
  // The tiles' statistics (doubles), then the largest split's slots of any batch up to n (fewer
  // rows can split more ways).
  std::size_t slots = 0;
  for (int r = 1; r <= row_tiles_of(n); ++r) {
    const ForwardSplit f = forward_split(r, in, out);
    if (f.splits > 1)
      slots = std::max(
          slots, static_cast<std::size_t>(r) * gemm_grid(1, out).x * f.splits * kTileM * kTileN);
  }
  return forward_partial_floats(n, out) + slots;
}

void dense_forward_batch_norm(cudaStream_t stream, int n, int in, int out, const float* x,
                              const float* weight, const float* bias, float* y,
                              const BatchNormFinalize& bn, float* workspace, unsigned* counters) {
  MNIST_CHECK(
      n >= 1 && in >= 1 && out >= 1 && bn.mean && bn.invstd && bn.running_mean && bn.running_var,
      "dense_forward_batch_norm needs n, in, out >= 1 (got {}, {}, {}) and the batch "
      "norm's mean, invstd and running statistics",
      n, in, out);
  MNIST_CHECK(reinterpret_cast<std::uintptr_t>(workspace) % alignof(double) == 0,
              "dense_forward_batch_norm: workspace {} is not {}-byte aligned (it holds doubles)",
              static_cast<const void*>(workspace), alignof(double));
  const ForwardSplit split = forward_split(row_tiles_of(n), in, out);
  const dim3 grid = gemm_grid(n, out, split.splits);
  MNIST_CHECK(static_cast<long long>(grid.x) * grid.y <= UINT_MAX,
              "dense_forward_batch_norm: {} x {} tiles overflow the block counter", grid.x, grid.y);
  // The slots follow the statistics' doubles (an even number of floats: 8-byte aligned).
  MNIST_LAUNCH(dense_forward_batch_norm_kernel, grid, kGemmThreads, 0, stream)
  (n, in, out, x, weight, bias, y, bn, counters, reinterpret_cast<double*>(workspace), split.k,
   workspace + forward_partial_floats(n, out));
  MNIST_CUDA_LAUNCH_CHECK(stream, "dense_forward_batch_norm_kernel");
}

namespace {

// How dense_backward_batch_norm splits the weights' GEMM over the batch: enough blocks to fill an
// H200 (132 SMs, ~4 blocks each), each split at least kMinSplitRows rows (4 k-steps), one counter
// per weight tile. A function of n and the shape alone, never decreasing with n (the workspace
// sized for the largest batch serves the smaller ones).
constexpr int kMinSplitRows = 64, kSplitBlocksWanted = 512, kMaxSplits = 64;
struct WeightSplit {
  int splits = 1, rows = 0;
  int bound = 1;  // the most splits any batch up to n takes (splits itself can dip as n grows)
};
WeightSplit weight_split(int n, int in, int out) {
  const dim3 weights = gemm_grid(out, in);
  const int tiles = static_cast<int>(weights.x * weights.y);
  WeightSplit w;
  w.rows = std::max(n, 1);
  if (tiles > kBlockCounters || n <= kMinSplitRows) return w;
  const int wanted =
      std::min({ceil_div(n, kMinSplitRows), std::max(1, kSplitBlocksWanted / tiles), kMaxSplits});
  w.rows = ceil_div(ceil_div(n, wanted), kTileK) * kTileK;  // whole k-steps
  w.splits = ceil_div(n, w.rows);                           // no empty split
  w.bound = wanted;                                         // never decreases with n
  return w;
}

}  // namespace

std::size_t dense_backward_batch_norm_workspace_floats(int n, int in, int out) {
  const WeightSplit w = weight_split(n, in, out);
  if (w.bound == 1) return 0;
  const dim3 weights = gemm_grid(out, in);
  return static_cast<std::size_t>(weights.x) * weights.y * w.bound * kTileM * kTileN;
}

void dense_backward_batch_norm(cudaStream_t stream, int n, int in, int out, const float* x,
                               const BatchNormGradient& g, const float* weight, float* dweight,
                               float* dx, float* workspace, unsigned* counters) {
  MNIST_CHECK(n >= 1 && in >= 1 && out >= 1 && out <= kDenseBatchNormFeatures,
              "dense_backward_batch_norm: n {}, in {}, out {}: needs n, in >= 1 and 1..{} outputs",
              n, in, out, kDenseBatchNormFeatures);
  MNIST_CHECK(g.dy && g.x && g.mean && g.invstd && g.sum_dy && g.sum_dy_xhat && g.count > 0,
              "dense_backward_batch_norm needs the batch norm's dy, x, mean, invstd, both sums and "
              "a count > 0 (got {})",
              g.count);
  const WeightSplit split = weight_split(n, in, out);
  MNIST_CHECK(split.splits == 1 || (workspace && counters),
              "dense_backward_batch_norm: n {}, {} -> {} splits the weights' sums {} ways and "
              "needs a workspace of {} floats and the stream's block counters",
              n, in, out, split.splits, dense_backward_batch_norm_workspace_floats(n, in, out));
  const dim3 weights = gemm_grid(out, in), data = gemm_grid(n, in);
  const long long weight_tiles = static_cast<long long>(weights.x) * weights.y;
  const long long blocks =
      weight_tiles * split.splits + (dx ? static_cast<long long>(data.x) * data.y : 0);
  MNIST_CHECK(blocks <= INT_MAX, "dense_backward_batch_norm: {} tiles exceed a grid's {} blocks",
              blocks, INT_MAX);
  MNIST_LAUNCH(dense_backward_kernel<BatchNormApplySource>, static_cast<unsigned>(blocks),
               kGemmThreads, 0, stream)
  (n, in, out, x, BatchNormApplySource{g, out}, weight, dweight, dx, static_cast<int>(weight_tiles),
   split.splits, split.rows, workspace, counters);
  MNIST_CUDA_LAUNCH_CHECK(stream, "dense_backward_kernel");
}

void dense_backward_bias(cudaStream_t stream, int n, int out, const float* dy, float* dbias,
                         const ReduceScratch& scratch) {
  channel_reduce(stream, ChannelGeom{n, out, 1}, scratch, ColumnValue{dy}, StoreSum{dbias},
                 "dense_backward_bias");
}

}  // namespace mnist::cuda
