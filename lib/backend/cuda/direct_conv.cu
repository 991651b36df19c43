// Direct convolution for small channel counts: the seed networks' 1->6 and 6->12 (5x5), and the
// tf.layers variant's 1->12 (5x5) and 12->24 (3x3). The tiled implicit GEMM (conv2d.cu) spends
// most of its multiply-adds on the padding of 64-row tiles when there are 6 or 12 filters, and its
// operand loaders divide at run time; here the channel counts and the kernel size are template
// parameters, every inner loop has compile-time bounds, and no division runs in them.
//
// How the work is split:
//   forward, backward_data (one body, correlate_tile): a block takes one tile of `rows` x `cols`
//     output pixels of one sample; the grid is n * tiles-per-sample blocks. The block stages the
//     input tile with its halo (CIN x (rows+KH-1) x (cols+KW-1), zeros outside the image) and all
//     weights ([CIN*KH*KW][COUT]: one tap's COUT weights are adjacent, read as vectors that every
//     lane of a warp shares, a broadcast) into shared memory. Each thread then computes P adjacent
//     output pixels of one row for ALL output channels: per (channel, kernel row) it reads
//     P+KW-1 inputs into registers and does P*KW*COUT FMAs. backward_data is the same correlation
//     of dy with the weights transposed (k <-> c) and flipped (r -> KH-1-r), padded by KH-1-pad.
//   forward_stats: the forward correlation, whose blocks then add the batch-norm sums of their
//     tile (sum and sum of squares per channel: fp32 per thread, shuffles per warp, double across
//     warps) into the workspace, one row per block; the last block to finish (launch.cuh,
//     arrive_last) adds the rows in the fixed order of backward_weights' reduce kernel and, for
//     conv2d_forward_batch_norm, finalizes the batch norm: one launch where the statistics and
//     the finalize were three.
//   backward_weights: a fixed grid of at most kWeightBlocks blocks; block b takes tiles b,
//     b + grid, ... in that order, staging the x tile (with halo) and the dy tile ([pixel][K], so a
//     thread's KB channels are adjacent). A thread owns one (c, r, group of KB filters) and all
//     KW taps s: KB*KW fp32 accumulators; `parts` threads share each owner and take every
//     parts-th row of the tile, sliding a KW-wide window along the row (one new input per pixel).
//     At the end the block adds its parts in double in part order and writes one double per
//     weight to the workspace; the last block of each group of 32 adds its group's rows in block
//     order, and the last of those adds the groups in group order (add_weight_partials: two
//     fixed-order levels in the same launch, on the stream's block counters). No atomics in any
//     sum: the results repeat bit for bit, run after run.
//   backward (both directions, direct_conv2d_backward): one grid whose first blocks are
//     backward_weights' and the rest backward_data's tiles: one launch where there were three
//     (weights, their reduce, data), and the two independent halves share the GPU.
//
// Shared memory: every tile kernel here carves one static pool of kPoolFloats (24 KB); the
// partials reduce needs only its 32 warp sums. One pool, not a
// static array per instantiation, because the CUDA emulation poisons the whole __shared__ section
// at the start of every block of every kernel: per-instantiation arrays would make every emulated
// launch of the project slower. On a GPU every tile kernel then reserves the whole pool; the
// measured kernels' occupancy (31-50%, docs/gpu_speed.md "kernel notes") went with their 64-80
// registers a thread, and 24 KB a block caps an SM only above 9 blocks, so the emulation's shape
// costs nothing measured there. The host planners (plan_correlation, plan_weights) shrink tiles
// until they fit.
//
// Measured times and what ncu found in these kernels: docs/gpu_speed.md ("the fused step kernel
// by kernel", "kernel notes"); they are about twice the model below.
// The model made before any GPU ran this (FP32 67 TFLOP/s, HBM 4.8 TB/s), an ESTIMATE: time is
// max(bytes / 4.8 TB/s, FLOPs / (67 TFLOP/s * efficiency)) with an assumed efficiency of 50% for
// the correlations (about one shared-memory load per 5-6 FMAs, 77-88% of lanes holding a pixel)
// and 40% for backward_weights (its window shifts and row tails), plus ~2 us for the sums of its
// last group and of the groups, which run after the grid's other work.
// clang-format off
//   launch                         GFLOP   MB moved   model
//   conv1 1->6 forward             0.241     22.5      ~7 us   (compute bound)
//   conv1 1->6 backward_weights    0.241     22.8     ~12 us   (9 us + reduce)
//   conv2 6->12 forward            0.723     14.4     ~22 us
//   conv2 6->12 backward_data      0.723     14.4     ~22 us
//   conv2 6->12 backward_weights   0.723     21.8     ~30 us   (27 us + reduce)
//   five convolutions                                ~95 us   (tiled GEMM: ~1.9 ms, same kind of model)
// clang-format on
// (conv1's backward_data is not run: the network's input needs no gradient.)
#include "backend/cuda/direct_conv.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>

#include <fmt/format.h>

#include "backend/batch_norm_rule.hpp"
#include "backend/cuda/batch_norm.hpp"
#include "backend/cuda/conv_block.hpp"
#include "backend/cuda/conv_block_gradient.cuh"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/launch.cuh"
#include "core/error.hpp"

namespace mnist::cuda {
namespace {

constexpr int kMaxThreads = 256;
constexpr int kPoolFloats = 6144;
constexpr int kMaxTileCols = 64;
// Blocks of backward_weights: fixed (not read from the device) so that the summation order, and so
// the bits, are the same on every GPU. 256 (two per H200 SM, 10 warps) measured 140 us for the
// seed's conv1 at batch 1024, the weights' blocks the step's longest path; 1024 keep every SM
// several blocks deep, for (1024 + 32) rows x kWeights doubles of workspace (15.2 MB for 6 -> 12).
constexpr int kWeightBlocks = 1024;

// One (c, k, kh, kw) the kernels are compiled for. Passed to the kernels as an empty first
// argument so that the launch deduces the shape (MNIST_LAUNCH takes a kernel name without commas).
template <int C_, int K_, int KH_, int KW_>
struct Shape {
  static constexpr int C = C_, K = K_, KH = KH_, KW = KW_;
  static constexpr int kWeights = K * C * KH * KW;
};

struct alignas(16) Vec4 {
  float x, y, z, w;
};
struct alignas(8) Vec2 {
  float x, y;
};

__shared__ Vec4 pool_storage[kPoolFloats / 4];

// Set by arrive_last (launch.cuh) in forward_stats' blocks.
__shared__ int last_block;
// A BlockGradientSource's per-channel terms (conv_block_gradient.cuh).
__shared__ ApplyTerms source_terms[kBlockGradientChannels];

__device__ __forceinline__ float* pool() {
  return reinterpret_cast<float*>(pool_storage);
}

// out[0..N) = src[0..N) from shared memory, as 16- or 8-byte loads when N allows; src must then
// be aligned to 16 (N % 4 == 0) or 8 (N % 2 == 0) bytes.
template <int N>
__device__ __forceinline__ void load_row(const float* src, float (&out)[N]) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const Vec4 v = reinterpret_cast<const Vec4*>(src)[i];
      out[4 * i] = v.x;
      out[4 * i + 1] = v.y;
      out[4 * i + 2] = v.z;
      out[4 * i + 3] = v.w;
    }
  } else if constexpr (N % 2 == 0) {
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      const Vec2 v = reinterpret_cast<const Vec2*>(src)[i];
      out[2 * i] = v.x;
      out[2 * i + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = src[i];
  }
}

// dst[0..valid) = run[0..valid), valid <= N: as 16- or 8-byte stores when the whole run is valid
// and dst is aligned for them, else one float at a time. (A thread writes P adjacent output
// pixels: scalar stores, P floats apart across a warp, used 8 bytes of each 32-byte sector they
// wrote in conv1's forward on an H200, Nsight Compute.)
template <int N>
__device__ __forceinline__ void store_run(float* dst, const float (&run)[N], int valid) {
  const auto address = reinterpret_cast<std::uintptr_t>(dst);
  if constexpr (N % 4 == 0) {
    if (valid == N && address % 16 == 0) {
#pragma unroll
      for (int i = 0; i < N / 4; ++i)
        reinterpret_cast<Vec4*>(dst)[i] =
            Vec4{run[4 * i], run[4 * i + 1], run[4 * i + 2], run[4 * i + 3]};
      return;
    }
  }
  if constexpr (N % 2 == 0) {
    if (valid == N && address % 8 == 0) {
#pragma unroll
      for (int i = 0; i < N / 2; ++i)
        reinterpret_cast<Vec2*>(dst)[i] = Vec2{run[2 * i], run[2 * i + 1]};
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < N; ++i)
    if (i < valid) dst[i] = run[i];
}

// Output pixels per thread in the correlations: 4 while that keeps the accumulators (P * COUT)
// at 24 or fewer, else 2.
__host__ __device__ constexpr int pixels_per_thread(int cout) {
  return cout <= 6 ? 4 : 2;
}
// Filters per backward_weights thread (KB): 6 when K allows it, else 4, 2 or 1.
__host__ __device__ constexpr int filters_per_thread(int k) {
  return k % 6 == 0 ? 6 : k % 4 == 0 ? 4 : k % 2 == 0 ? 2 : 1;
}
__host__ __device__ constexpr int round_up4(int v) {
  return (v + 3) / 4 * 4;
}

// Where a block's tiles lie and how its threads map onto them; planned on the host.
struct Tiling {
  int rows = 0, cols = 0;  // output pixels per tile
  int tiles_x = 0, tiles_per_sample = 0;
  int strips = 0;       // threads per tile row (cols / P) in the correlations
  int parts = 0;        // threads per owner in backward_weights
  int threads = 0;      // block size, a multiple of 32
  long long tiles = 0;  // n * tiles_per_sample
};

// A correlation of in[n, CIN, in_h, in_w] (zero outside) into out[n, COUT, out_h, out_w]:
// out[o, y, x] = sum over (i, r, s) of w[(i, r, s), o] * in[i, y - pad_h + r, x - pad_w + s].
struct Correlation {
  int n = 0, in_h = 0, in_w = 0, out_h = 0, out_w = 0, pad_h = 0, pad_w = 0;
};

// Output tile for a correlation with CIN inputs, `weight_floats` staged weights and P pixels per
// thread: full rows up to kMaxTileCols wide, as many rows as kMaxThreads threads and the pool
// allow. tiles_per_sample == 0 when not even one row fits.
Tiling plan_correlation(int cin, int kh, int kw, int weight_floats, int p, int out_h, int out_w) {
  Tiling t;
  const int budget = kPoolFloats - round_up4(weight_floats);
  auto fits = [&](int rows, int cols) {
    return static_cast<long long>(cin) * (rows + kh - 1) * (cols + kw - 1) <= budget;
  };
  t.cols = std::min((out_w + p - 1) / p * p, kMaxTileCols);
  while (t.cols > p && !fits(1, t.cols)) t.cols -= p;
  if (!fits(1, t.cols)) return t;
  t.strips = t.cols / p;
  t.rows = std::max(1, std::min(out_h, kMaxThreads / t.strips));
  while (t.rows > 1 && !fits(t.rows, t.cols)) --t.rows;
  t.tiles_x = ceil_div(out_w, t.cols);
  t.tiles_per_sample = t.tiles_x * ceil_div(out_h, t.rows);
  t.threads = ceil_div(t.strips * t.rows, 32) * 32;
  return t;
}

// Output tile for backward_weights: the x tile with halo plus the dy tile must fit the pool (the
// partial sums reuse it afterwards); `owners` threads per part.
Tiling plan_weights(int c, int k, int kh, int kw, int owners, int max_parts, int out_h, int out_w) {
  Tiling t;
  auto fits = [&](int rows, int cols) {
    const long long x_tile = round_up4(c * (rows + kh - 1) * (cols + kw - 1));
    return x_tile + static_cast<long long>(k) * rows * cols <= kPoolFloats;
  };
  t.cols = std::min(out_w, kMaxTileCols);
  while (t.cols > 1 && !fits(1, t.cols)) --t.cols;
  if (!fits(1, t.cols)) return t;
  t.rows = out_h;
  while (t.rows > 1 && !fits(t.rows, t.cols)) --t.rows;
  t.parts = std::min(max_parts, t.rows);
  t.tiles_x = ceil_div(out_w, t.cols);
  t.tiles_per_sample = t.tiles_x * ceil_div(out_h, t.rows);
  t.threads = ceil_div(owners * t.parts, 32) * 32;
  return t;
}

// Elements per batch of stage(): each thread issues this many loads before it stores any of them.
constexpr int kStageBatch = 4;

// e / d for 0 <= e, d < 2^16 without a division: q = floor(e * ceil(2^32 / d) / 2^32) is exact
// while e * d < 2^32. Built once per staging call (one division), used per element.
struct SmallDivisor {
  unsigned d = 1, m = 0;  // m = ceil(2^32 / d); d == 1 (m would be 2^32) is handled apart
  __host__ __device__ explicit SmallDivisor(int divisor) : d(static_cast<unsigned>(divisor)) {
    m = d > 1 ? 0xffffffffu / d + 1 : 0;
  }
  __host__ __device__ int div(int e) const {
    const unsigned u = static_cast<unsigned>(e);
    return static_cast<int>(d > 1 ? (static_cast<unsigned long long>(u) * m) >> 32 : u);
  }
};

// Fills a tile of `total` elements: element e gets value(e) at index place(e). Thread t takes
// e = t, t + blockDim.x, ... kStageBatch at a time, every value of a batch read before any is
// stored: its loads are in flight together. (Nsight Compute on an H200 put 50-70% of the
// convolution kernels' stall samples in the staging loops when each thread had one load in flight,
// the staging, not the multiply-adds, setting their time.) value() is called for e < total only,
// and must not branch around its loads for the batch to overlap them: the sources clamp their
// coordinates and select, rather than test and skip.
template <class Value, class Place>
__device__ __forceinline__ void stage(int total, const Value& value, const Place& place,
                                      float* dst) {
  const int stride = static_cast<int>(blockDim.x);
  for (int base = threadIdx.x; base < total; base += kStageBatch * stride) {
    float v[kStageBatch];
#pragma unroll
    for (int u = 0; u < kStageBatch; ++u) v[u] = value(min(base + u * stride, total - 1));
#pragma unroll
    for (int u = 0; u < kStageBatch; ++u) {
      const int e = base + u * stride;
      if (e < total) dst[place(e)] = v[u];
    }
  }
}

// Stages in[sample, 0..CIN, y0 - pad_h .., x0 - pad_w ..] as a CIN x th x tw tile, zeros outside
// the input plane. `in` is a source (conv_block_gradient.cuh): memory, or values computed where
// they are staged. Outside the plane the source is read at the nearest pixel inside and the value
// replaced by 0 (stage()'s rule: no branch around a load).
template <int CIN, class Source>
__device__ __forceinline__ void stage_input_tile(const Correlation& a, int sample, int y0, int x0,
                                                 int th, int tw, const Source& in, float* tile) {
  const SmallDivisor by_width(tw), by_plane(th * tw);
  auto value = [&](int e) {
    const int ci = by_plane.div(e), rest = e - ci * th * tw;
    const int yy = by_width.div(rest), xx = rest - yy * tw;
    const int gy = y0 - a.pad_h + yy, gx = x0 - a.pad_w + xx;
    const bool inside = gy >= 0 && gy < a.in_h && gx >= 0 && gx < a.in_w;
    const int cy = min(max(gy, 0), a.in_h - 1), cx = min(max(gx, 0), a.in_w - 1);
    const std::size_t offset =
        ((static_cast<std::size_t>(sample) * CIN + ci) * a.in_h + cy) * a.in_w + cx;
    const float v = in(sample, ci, cy, cx, offset);
    return inside ? v : 0.0f;
  };
  stage(
      CIN * th * tw, value, [](int e) { return e; }, tile);
}

// The input of a network's first convolution gathered from the device-resident dataset where the
// convolution stages it (direct_conv2d_forward_gathered): the value at (sample, 0, y, x) is
// pixel (y, x) of the sample's image / 255, the bits gather_batch assigns. One input channel.
struct GatherSource {
  BatchGather b;
  int n = 0, width = 0;
  const int32_t* indices = nullptr;  // the slice's, from prepare()
  __device__ void prepare(ApplyTerms*) {
    indices = b.ring + (b.step ? static_cast<std::size_t>(b.step->step % b.ring_steps) * n : 0);
  }
  __device__ float operator()(int sample, int, int y, int x_, std::size_t) const {
    const std::size_t image = static_cast<std::size_t>(indices[sample]);
    return static_cast<float>(b.images[image * b.pixels + y * width + x_]) / 255.0f;
  }
};

// What a block does with its staged input tile before the correlation: nothing, except for a
// GatherSource, whose gathered values also go to memory (the backward pass reads them). The input
// pixels under the tile's output pixels are the block's to write: with the output the size of the
// input (direct_conv2d_forward_gathered's rule) the tiles cover every input pixel exactly once.
// The sample's first tile writes its label.
template <class Source>
__device__ __forceinline__ void after_staging(const Source&, const Correlation&, const Tiling&, int,
                                              int, int, int, int, const float*) {}
__device__ __forceinline__ void after_staging(const GatherSource& in, const Correlation& a,
                                              const Tiling& t, int sample, int tile_index, int y0,
                                              int x0, int tw, const float* tile) {
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rows = min(t.rows, a.in_h - y0), cols = min(t.cols, a.in_w - x0);
  for (int yy = warp; yy < rows; yy += warps) {
    float* dst = in.b.x + (static_cast<std::size_t>(sample) * a.in_h + y0 + yy) * a.in_w + x0;
    const float* src = tile + (yy + a.pad_h) * tw + a.pad_w;
    for (int xx = lane; xx < cols; xx += 32) dst[xx] = src[xx];
  }
  if (tile_index == 0 && threadIdx.x == 0) in.b.y[sample] = in.b.labels[in.indices[sample]];
}

// The block's share of a correlation; the weights are already in pool()[0, CIN*KH*KW*COUT) as
// [(i, r, s)][o]. `block` is the block's tile (blockIdx.x, unless the kernel runs other work in
// its first blocks). Every thread of the block must call it (it holds barriers). When stats is not
// nullptr the block also writes the sum and the sum of squares of its outputs per channel to
// stats[block][2 * COUT] (sums first): fp32 per thread, a fixed butterfly of shuffles per
// warp, then the warps in order in double.
template <int CIN, int COUT, int KH, int KW, class Source>
__device__ __forceinline__ void correlate_tile(const Correlation& a, const Tiling& t,
                                               const Source& in, const float* bias, float* out,
                                               double* stats, int block) {
  constexpr int P = pixels_per_thread(COUT);
  constexpr int kWeightFloats = round_up4(CIN * KH * KW * COUT);
  float* weights = pool();
  float* tile = pool() + kWeightFloats;
  const int sample = block / t.tiles_per_sample;
  const int tile_index = block % t.tiles_per_sample;
  const int y0 = tile_index / t.tiles_x * t.rows, x0 = tile_index % t.tiles_x * t.cols;
  const int th = t.rows + KH - 1, tw = t.cols + KW - 1;
  stage_input_tile<CIN>(a, sample, y0, x0, th, tw, in, tile);
  __syncthreads();
  after_staging(in, a, t, sample, tile_index, y0, x0, tw, tile);

  const int sx = threadIdx.x % t.strips, sy = threadIdx.x / t.strips;
  const bool active = sy < t.rows;  // the block's last warp may have threads past the tile
  float acc[P][COUT] = {};
#pragma unroll 1
  for (int ci = 0; ci < (active ? CIN : 0); ++ci) {
#pragma unroll
    for (int r = 0; r < KH; ++r) {
      const float* row = tile + (ci * th + sy + r) * tw + sx * P;
      float v[P + KW - 1];
#pragma unroll
      for (int j = 0; j < P + KW - 1; ++j) v[j] = row[j];
#pragma unroll
      for (int s = 0; s < KW; ++s) {
        float w[COUT];
        load_row<COUT>(weights + ((ci * KH + r) * KW + s) * COUT, w);
#pragma unroll
        for (int o = 0; o < COUT; ++o) {
#pragma unroll
          for (int q = 0; q < P; ++q) acc[q][o] = fmaf(v[q + s], w[o], acc[q][o]);
        }
      }
    }
  }
  const int oy = y0 + sy;
  float sum[COUT] = {}, sumsq[COUT] = {};
  if (active && oy < a.out_h) {
    const std::size_t plane = static_cast<std::size_t>(a.out_h) * a.out_w;
    float* dst = out + static_cast<std::size_t>(sample) * COUT * plane +
                 static_cast<std::size_t>(oy) * a.out_w;
    const int ox0 = x0 + sx * P, valid = min(P, a.out_w - ox0);
#pragma unroll
    for (int q = 0; q < P; ++q) {
      if (q >= valid) break;
#pragma unroll
      for (int o = 0; o < COUT; ++o) {
        acc[q][o] += bias ? bias[o] : 0.0f;
        sum[o] += acc[q][o];
        sumsq[o] += acc[q][o] * acc[q][o];
      }
    }
    // A strip past the output's right edge (the tile's last columns) stores nothing, and forms
    // no pointer past the buffer.
    if (valid > 0) {
#pragma unroll
      for (int o = 0; o < COUT; ++o) {
        float run[P];
#pragma unroll
        for (int q = 0; q < P; ++q) run[q] = acc[q][o];
        store_run<P>(dst + o * plane + ox0, run, valid);
      }
    }
  }
  if (!stats) return;  // the same for the whole block

  // Batch-norm statistics of the tile. The weights and the tile are dead: the pool takes the
  // warps' sums, [warp][2 * COUT].
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
#pragma unroll
  for (int o = 0; o < COUT; ++o) {
    for (int offset = 16; offset > 0; offset /= 2) {
      sum[o] += __shfl_xor_sync(0xffffffffu, sum[o], offset);
      sumsq[o] += __shfl_xor_sync(0xffffffffu, sumsq[o], offset);
    }
  }
  __syncthreads();
  float* warp_sums = pool();
  if (lane == 0) {
#pragma unroll
    for (int o = 0; o < COUT; ++o) {
      warp_sums[warp * 2 * COUT + o] = sum[o];
      warp_sums[warp * 2 * COUT + COUT + o] = sumsq[o];
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < 2 * COUT; e += blockDim.x) {
    double total = 0.0;
    for (int w = 0; w < warps; ++w) total += warp_sums[w * 2 * COUT + e];
    stats[static_cast<std::size_t>(block) * 2 * COUT + e] = total;
  }
}

// The fixed order of direct_conv2d_partials_reduce_kernel, for one block: column i's total is the
// sum over w = 0..7, in order, of (the sum over rows b = w, w + 8, ... of partial[b, i]), all in
// double; the block's threads take (w, i) pairs. Writes totals[i] for i < columns (shared memory,
// at least kReduceWarps * columns doubles at `slots`). Every thread of the block calls it.
constexpr int kReduceWarps = 8;
__device__ void add_rows_in_fixed_order(int columns, int rows, const volatile double* partial,
                                        double* slots, double* totals) {
  for (int item = threadIdx.x; item < kReduceWarps * columns; item += blockDim.x) {
    const int w = item / columns, i = item - w * columns;
    double sum = 0.0;
    for (int b = w; b < rows; b += kReduceWarps)
      sum += partial[static_cast<std::size_t>(b) * columns + i];
    slots[item] = sum;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < columns; i += blockDim.x) {
    double total = 0.0;
    for (int w = 0; w < kReduceWarps; ++w) total += slots[w * columns + i];
    totals[i] = total;
  }
  __syncthreads();
}

// What forward_stats' last block does with the blocks' sums: sum[K], sumsq[K] (as float) and, when
// bn.mean is not nullptr, batch_norm_finalize of them.
struct StatsEpilogue {
  unsigned* counter = nullptr;
  float *sum = nullptr, *sumsq = nullptr;
  BatchNormFinalize bn;
};

// x: a source of the input (PlainSource, or GatherSource to gather the batch on the way).
template <class S, class Source>
__global__ void __launch_bounds__(kMaxThreads)
    direct_conv2d_forward_kernel(S, Correlation a, Tiling t, Source x, const float* weight,
                                 const float* bias, float* y, double* stats, StatsEpilogue e) {
  x.prepare(nullptr);
  // weight[k, c, r, s] -> pool[(c, r, s)][k]
  constexpr int kTaps = S::C * S::KH * S::KW;
  stage(
      S::kWeights, [&](int i) { return weight[i]; },
      [](int i) { return (i % kTaps) * S::K + i / kTaps; }, pool());
  correlate_tile<S::C, S::K, S::KH, S::KW>(a, t, x, bias, y, stats, blockIdx.x);
  if (!stats || !arrive_last(e.counter, last_block)) return;

  // The last block: every tile's sums, added in the reduce kernel's fixed order (so the bits are
  // those of the two-launch path), rounded to float as batch_norm_stats stores them, then
  // finalized from those floats exactly as batch_norm_finalize_kernel does.
  constexpr int kColumns = 2 * S::K;
  static_assert((kReduceWarps + 1) * kColumns * 2 <= kPoolFloats, "the sums fit the pool");
  double* slots = reinterpret_cast<double*>(pool());
  double* totals = slots + kReduceWarps * kColumns;
  add_rows_in_fixed_order(kColumns, static_cast<int>(gridDim.x), stats, slots, totals);
  for (int o = threadIdx.x; o < S::K; o += blockDim.x) {
    const float sum = static_cast<float>(totals[o]), sumsq = static_cast<float>(totals[S::K + o]);
    e.sum[o] = sum;
    e.sumsq[o] = sumsq;
    if (e.bn.mean)
      batch_norm_finalize_channel(e.bn.count, static_cast<double>(sum), static_cast<double>(sumsq),
                                  e.bn.epsilon, e.bn.decay, e.bn.mean[o], e.bn.invstd[o],
                                  e.bn.running_mean[o], e.bn.running_var[o]);
  }
  depart_last(e.counter);
}

// backward_data's tile `block`: the correlation of dy with the weights transposed and flipped.
template <class S, class Source>
__device__ __forceinline__ void backward_data_block(const Correlation& a, const Tiling& t,
                                                    const Source& dy, const float* weight,
                                                    float* dx, int block) {
  // weight[k, c, r, s] -> pool[(k, KH-1-r, KW-1-s)][c]: transposed and flipped
  constexpr int kTaps = S::KH * S::KW;
  auto place = [](int i) {
    const int s = i % S::KW, r = i / S::KW % S::KH, ci = i / kTaps % S::C, ko = i / (kTaps * S::C);
    return ((ko * S::KH + S::KH - 1 - r) * S::KW + S::KW - 1 - s) * S::C + ci;
  };
  stage(
      S::kWeights, [&](int i) { return weight[i]; }, place, pool());
  correlate_tile<S::K, S::C, S::KH, S::KW>(a, t, dy, nullptr, dx, nullptr, block);
}

template <class S>
__global__ void __launch_bounds__(kMaxThreads)
    direct_conv2d_backward_data_kernel(S, Correlation a, Tiling t, const float* dy,
                                       const float* weight, float* dx) {
  backward_data_block<S>(a, t, PlainSource{dy}, weight, dx, blockIdx.x);
}

// backward_weights' block `block` of `blocks`: tiles block, block + blocks, ..., in that order,
// then the block's row of partial sums, partial[block][weights].
template <class S, class Source>
__device__ __forceinline__ void backward_weights_block(const Correlation& a, const Tiling& t,
                                                       const float* x, const Source& dy,
                                                       double* partial, int block, int blocks) {
  constexpr int C = S::C, K = S::K, KH = S::KH, KW = S::KW;
  constexpr int KB = filters_per_thread(K), kGroups = K / KB, kOwners = C * KH * kGroups;
  // Thread = part * kOwners + owner; owner = (c * KH + r) * kGroups + group.
  const int owner = threadIdx.x % kOwners, part = threadIdx.x / kOwners;
  const int group = owner % kGroups, r = owner / kGroups % KH, ci = owner / (kGroups * KH);
  const bool active = part < t.parts;
  const int th = t.rows + KH - 1, tw = t.cols + KW - 1;
  float* x_tile = pool();
  float* dy_tile = pool() + round_up4(C * th * tw);  // [rows][cols][K]
  const std::size_t out_plane = static_cast<std::size_t>(a.out_h) * a.out_w;

  float acc[KB][KW] = {};
  for (long long tile = block; tile < t.tiles; tile += blocks) {
    const int sample = static_cast<int>(tile / t.tiles_per_sample);
    const int tile_index = static_cast<int>(tile % t.tiles_per_sample);
    const int y0 = tile_index / t.tiles_x * t.rows, x0 = tile_index % t.tiles_x * t.cols;
    stage_input_tile<C>(a, sample, y0, x0, th, tw, PlainSource{x}, x_tile);
    // dy tile, [pixel][K]: zeros past the output plane so the sums need no bounds checks; read in
    // dy's order (channel, row, column), the source clamped inside the plane (stage()'s rule).
    const int tile_pixels = t.rows * t.cols;
    const SmallDivisor by_cols(t.cols), by_pixels(tile_pixels);
    auto dy_value = [&](int e) {
      const int ko = by_pixels.div(e), rest = e - ko * tile_pixels;
      const int yy = by_cols.div(rest), xx = rest - yy * t.cols;
      const int oy = y0 + yy, ox = x0 + xx;
      const int cy = min(oy, a.out_h - 1), cx = min(ox, a.out_w - 1);
      const std::size_t offset = (static_cast<std::size_t>(sample) * K + ko) * out_plane +
                                 static_cast<std::size_t>(cy) * a.out_w + cx;
      const float v = dy(sample, ko, cy, cx, offset);
      return oy < a.out_h && ox < a.out_w ? v : 0.0f;
    };
    auto dy_place = [&](int e) {
      const int ko = by_pixels.div(e);
      return (e - ko * tile_pixels) * K + ko;
    };
    stage(K * tile_pixels, dy_value, dy_place, dy_tile);
    __syncthreads();
    if (active) {
      for (int yy = part; yy < t.rows; yy += t.parts) {
        const float* in_row = x_tile + (ci * th + yy + r) * tw;
        const float* dy_row = dy_tile + yy * t.cols * K + group * KB;
        float window[KW];
#pragma unroll
        for (int s = 0; s < KW - 1; ++s) window[s] = in_row[s];
        for (int xx = 0; xx < t.cols; ++xx) {
          window[KW - 1] = in_row[xx + KW - 1];
          float d[KB];
          load_row<KB>(dy_row + xx * K, d);
#pragma unroll
          for (int b = 0; b < KB; ++b) {
#pragma unroll
            for (int s = 0; s < KW; ++s) acc[b][s] = fmaf(d[b], window[s], acc[b][s]);
          }
#pragma unroll
          for (int s = 0; s < KW - 1; ++s) window[s] = window[s + 1];
        }
      }
    }
    __syncthreads();  // the next tile (or the partial sums) overwrites the pool
  }

  // The block's parts, added in part order in double; the tiles are dead, the pool holds them.
  float* sums = pool();  // [parts][kWeights]
  if (active) {
#pragma unroll
    for (int b = 0; b < KB; ++b) {
      const int ko = group * KB + b;
#pragma unroll
      for (int s = 0; s < KW; ++s)
        sums[part * S::kWeights + ((ko * C + ci) * KH + r) * KW + s] = acc[b][s];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < S::kWeights; i += blockDim.x) {
    double sum = 0.0;
    for (int p = 0; p < t.parts; ++p) sum += sums[p * S::kWeights + i];
    partial[static_cast<std::size_t>(block) * S::kWeights + i] = sum;
  }
}

// The blocks' rows of partial sums, added in two fixed-order levels inside the launch: the last
// block of each group of kWeightGroup consecutive blocks adds its group's rows in block order into
// group_sums[group] (counted on counters[1 + group]); the last of those adds the groups in group
// order into dweight (counted on counters[0]). A group's sum overlaps the other groups' tiles, so
// only the last group's and the final sum (~32 rows each: sqrt(kWeightBlocks)) run after the grid's
// work.
constexpr int kWeightGroup = 32;
static_assert(1 + (kWeightBlocks + kWeightGroup - 1) / kWeightGroup <= kBlockCounters,
              "a counter per group and one for the groups");
template <class S>
__device__ __forceinline__ void add_weight_partials(const double* partial, double* group_sums,
                                                    float* dweight, unsigned* counters, int block,
                                                    int blocks) {
  const int group = block / kWeightGroup, first = group * kWeightGroup;
  const int rows = min(kWeightGroup, blocks - first);
  if (!arrive_last(counters + 1 + group, last_block, static_cast<unsigned>(rows))) return;
  const volatile double* rows_of_group = partial + static_cast<std::size_t>(first) * S::kWeights;
  for (int i = threadIdx.x; i < S::kWeights; i += blockDim.x) {
    double sum = 0.0;
    for (int r = 0; r < rows; ++r)
      sum += rows_of_group[static_cast<std::size_t>(r) * S::kWeights + i];
    group_sums[static_cast<std::size_t>(group) * S::kWeights + i] = sum;
  }
  depart_last(counters + 1 + group);
  const int groups = (blocks + kWeightGroup - 1) / kWeightGroup;
  if (!arrive_last(counters, last_block, static_cast<unsigned>(groups))) return;
  const volatile double* all = group_sums;
  for (int i = threadIdx.x; i < S::kWeights; i += blockDim.x) {
    double sum = 0.0;
    for (int g = 0; g < groups; ++g) sum += all[static_cast<std::size_t>(g) * S::kWeights + i];
    dweight[i] = static_cast<float>(sum);
  }
  depart_last(counters);
}

template <class S>
__global__ void __launch_bounds__(kMaxThreads)
    direct_conv2d_backward_weights_kernel(S, Correlation a, Tiling t, const float* x,
                                          const float* dy, double* partial /* [grid, weights] */,
                                          double* group_sums, float* dweight, unsigned* counters) {
  backward_weights_block<S>(a, t, x, PlainSource{dy}, partial, blockIdx.x, gridDim.x);
  add_weight_partials<S>(partial, group_sums, dweight, counters, blockIdx.x, gridDim.x);
}

// Both backward directions in one grid: blocks [0, weight_blocks) are backward_weights' blocks,
// the rest backward_data's tiles. Neither reads what the other writes, so they share the launch
// and the GPU (the two are of similar size for the seed network's conv2) instead of queueing.
// The block size is the larger of the two plans'; each body leaves its extra threads idle.
// dy comes from a source (conv_block_gradient.cuh): memory, or a conv block's batch-norm gradient
// computed as it is staged (FusedKernels::conv_block_backward), never stored.
template <class S, class Source>
__global__ void __launch_bounds__(kMaxThreads)
    direct_conv2d_backward_kernel(S, Correlation forward, Tiling weight_tiles, int weight_blocks,
                                  Correlation data, Tiling data_tiles, const float* x, Source dy,
                                  const float* weight, double* partial, double* group_sums,
                                  float* dweight, unsigned* counters, float* dx) {
  dy.prepare(source_terms);
  const int block = static_cast<int>(blockIdx.x);
  if (block < weight_blocks) {
    backward_weights_block<S>(forward, weight_tiles, x, dy, partial, block, weight_blocks);
    add_weight_partials<S>(partial, group_sums, dweight, counters, block, weight_blocks);
  } else {
    backward_data_block<S>(data, data_tiles, dy, weight, dx, block - weight_blocks);
  }
}

// out[i] = sum over blocks b of partial[b, i] for i < columns (out_hi[i - split] from i = split
// on, when out_hi is not nullptr), in a fixed order: a block takes 32 columns; its 8 warps each
// add every 8th block (warp w: blocks w, w + 8, ...), then warp 0 adds the 8 sums
// (add_rows_in_fixed_order's order).
__global__ void __launch_bounds__(32 * kReduceWarps)
    direct_conv2d_partials_reduce_kernel(int columns, int blocks,
                                         const double* partial /* [blocks, columns] */, int split,
                                         float* out, float* out_hi) {
  __shared__ double warp_sums[kReduceWarps][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int i = blockIdx.x * 32 + lane;
  double sum = 0.0;
  if (i < columns) {
    for (int b = warp; b < blocks; b += kReduceWarps)
      sum += partial[static_cast<std::size_t>(b) * columns + i];
  }
  warp_sums[warp][lane] = sum;
  __syncthreads();
  if (warp == 0 && i < columns) {
    double total = 0.0;
    for (int w = 0; w < kReduceWarps; ++w) total += warp_sums[w][lane];
    if (i < split) {
      out[i] = static_cast<float>(total);
    } else {
      out_hi[i - split] = static_cast<float>(total);
    }
  }
}

void reduce_partials(cudaStream_t stream, int columns, int blocks, const double* partial, int split,
                     float* out, float* out_hi) {
  MNIST_LAUNCH(direct_conv2d_partials_reduce_kernel, ceil_div(columns, 32), 32 * kReduceWarps, 0,
               stream)
  (columns, blocks, partial, split, out, out_hi);
  MNIST_CUDA_LAUNCH_CHECK(stream, "direct_conv2d_partials_reduce_kernel");
}

void check_workspace(const float* workspace, const char* what) {
  MNIST_CHECK(reinterpret_cast<std::uintptr_t>(workspace) % alignof(double) == 0,
              "{}: workspace {} is not {}-byte aligned (it holds doubles)", what,
              static_cast<const void*>(workspace), alignof(double));
}

// The compiled shapes, tried in order; calls f(Shape<...>{}) for the one matching g.
constexpr const char* kShapesText = "1->6 5x5, 6->12 5x5, 1->12 5x5, 12->24 3x3";
template <class F>
bool with_shape(const Conv2dGeom& g, F&& f) {
  auto is = [&](int c, int k, int kh, int kw) {
    return g.c == c && g.k == k && g.kh == kh && g.kw == kw;
  };
  if (is(1, 6, 5, 5)) return f(Shape<1, 6, 5, 5>{}), true;
  if (is(6, 12, 5, 5)) return f(Shape<6, 12, 5, 5>{}), true;
  if (is(1, 12, 5, 5)) return f(Shape<1, 12, 5, 5>{}), true;
  if (is(12, 24, 3, 3)) return f(Shape<12, 24, 3, 3>{}), true;
  return false;
}

// The three plans for g (shape S).
struct Plans {
  Correlation forward, backward_data;
  Tiling forward_tiles, backward_data_tiles, weight_tiles;
  int weight_blocks = 0;
};

template <class S>
Plans make_plans(const Conv2dGeom& g) {
  Plans p;
  p.forward = Correlation{g.n, g.h, g.w, g.out_h, g.out_w, g.pad_h, g.pad_w};
  // dx[iy] = sum over r of dy[iy + pad_h - r] w[r] = sum over r' of dy[iy - (KH-1-pad_h) + r']
  // w[KH-1-r']: a correlation of dy padded by KH-1-pad_h (negative pads just shift the window).
  p.backward_data =
      Correlation{g.n, g.out_h, g.out_w, g.h, g.w, S::KH - 1 - g.pad_h, S::KW - 1 - g.pad_w};
  p.forward_tiles =
      plan_correlation(S::C, S::KH, S::KW, S::kWeights, pixels_per_thread(S::K), g.out_h, g.out_w);
  p.backward_data_tiles =
      plan_correlation(S::K, S::KH, S::KW, S::kWeights, pixels_per_thread(S::C), g.h, g.w);
  constexpr int kOwners = S::C * S::KH * (S::K / filters_per_thread(S::K));
  constexpr int kMaxParts = std::min(kMaxThreads / kOwners, kPoolFloats / S::kWeights);
  p.weight_tiles = plan_weights(S::C, S::K, S::KH, S::KW, kOwners, kMaxParts, g.out_h, g.out_w);
  p.forward_tiles.tiles = static_cast<long long>(g.n) * p.forward_tiles.tiles_per_sample;
  p.backward_data_tiles.tiles =
      static_cast<long long>(g.n) * p.backward_data_tiles.tiles_per_sample;
  p.weight_tiles.tiles = static_cast<long long>(g.n) * p.weight_tiles.tiles_per_sample;
  p.weight_blocks = static_cast<int>(std::min<long long>(p.weight_tiles.tiles, kWeightBlocks));
  return p;
}

// Why the planned shape cannot run g; nullptr when it can.
template <class S>
const char* plan_problem(const Conv2dGeom& g) {
  static_assert(S::kWeights + 4 <= kPoolFloats, "weights must fit the shared-memory pool");
  static_assert(S::C * S::KH * (S::K / filters_per_thread(S::K)) <= kMaxThreads,
                "backward_weights needs one thread per (c, r, filter group)");
  const Plans p = make_plans<S>(g);
  if (p.forward_tiles.tiles_per_sample == 0 || p.backward_data_tiles.tiles_per_sample == 0 ||
      p.weight_tiles.tiles_per_sample == 0)
    return "no tile of one output row fits the shared-memory pool";
  if (std::max(p.forward_tiles.tiles, p.backward_data_tiles.tiles) > INT_MAX)
    return "more tiles than a grid has blocks (2^31 - 1)";
  return nullptr;
}

}  // namespace

// Formats the reason only when asked: the dispatcher calls this on every convolution.
bool direct_conv_supports(const Conv2dGeom& g, std::string* why_not) {
  if (g.stride_h != 1 || g.stride_w != 1) {
    if (why_not)
      *why_not =
          fmt::format("stride {}x{}: the direct kernels are stride 1 only", g.stride_h, g.stride_w);
    return false;
  }
  if (g.n < 0 || g.h < 1 || g.w < 1 || g.out_h < 1 || g.out_w < 1 || g.pad_h < 0 || g.pad_w < 0) {
    if (why_not)
      *why_not = fmt::format(
          "batch {}, input {}x{}, output {}x{}, padding {}x{}: the direct kernels need sizes >= 1 "
          "(batch >= 0) and padding >= 0",
          g.n, g.h, g.w, g.out_h, g.out_w, g.pad_h, g.pad_w);
    return false;
  }
  const char* problem = nullptr;
  if (!with_shape(g, [&](auto shape) { problem = plan_problem<decltype(shape)>(g); })) {
    if (why_not)
      *why_not = fmt::format("{}->{} channels with a {}x{} kernel: the compiled shapes are {}", g.c,
                             g.k, g.kh, g.kw, kShapesText);
    return false;
  }
  if (problem) {
    if (why_not)
      *why_not = fmt::format("{}->{} channels, {}x{} kernel, output {}x{}: {}", g.c, g.k, g.kh,
                             g.kw, g.out_h, g.out_w, problem);
    return false;
  }
  if (why_not) why_not->clear();
  return true;
}

std::size_t direct_conv_workspace_floats(const Conv2dGeom& g) {
  if (!direct_conv_supports(g)) return 0;
  std::size_t floats = 0;
  with_shape(g, [&](auto shape) {
    using S = decltype(shape);
    const Plans p = make_plans<S>(g);
    // backward_weights' partials and group sums (weight_blocks grows with n up to
    // kWeightBlocks) or forward_stats' (one per forward tile): neither decreases with n.
    const std::size_t groups = (p.weight_blocks + kWeightGroup - 1) / kWeightGroup;
    floats = 2 * std::max((p.weight_blocks + groups) * S::kWeights,
                          static_cast<std::size_t>(p.forward_tiles.tiles) * 2 * S::K);
  });
  return floats;
}

void direct_conv2d_forward(cudaStream_t stream, const Conv2dGeom& g, const float* x,
                           const float* weight, const float* bias, float* y) {
  std::string why_not;
  MNIST_CHECK(direct_conv_supports(g, &why_not), "direct_conv2d_forward: {}", why_not);
  if (g.n == 0) return;
  with_shape(g, [&](auto shape) {
    const Plans p = make_plans<decltype(shape)>(g);
    MNIST_LAUNCH(direct_conv2d_forward_kernel, static_cast<unsigned>(p.forward_tiles.tiles),
                 p.forward_tiles.threads, 0, stream)
    (shape, p.forward, p.forward_tiles, PlainSource{x}, weight, bias, y, nullptr, StatsEpilogue{});
  });
  MNIST_CUDA_LAUNCH_CHECK(stream, "direct_conv2d_forward_kernel");
}

namespace {

// direct_conv2d_forward_stats with the input from `x`, a source (what `what` names in errors).
template <class Source>
void forward_stats(cudaStream_t stream, const char* what, const Conv2dGeom& g, const Source& x,
                   const float* weight, const float* bias, float* y, float* sum, float* sumsq,
                   const BatchNormFinalize* bn, unsigned* counter, float* workspace) {
  std::string why_not;
  MNIST_CHECK(direct_conv_supports(g, &why_not), "{}: {}", what, why_not);
  check_workspace(workspace, what);
  MNIST_CHECK(counter, "{}: no block counter", what);
  with_shape(g, [&](auto shape) {
    using S = decltype(shape);
    const Plans p = make_plans<S>(g);
    double* partial = reinterpret_cast<double*>(workspace);
    if (g.n > 0) {
      StatsEpilogue e;
      e.counter = counter;
      e.sum = sum;
      e.sumsq = sumsq;
      if (bn) e.bn = *bn;
      MNIST_LAUNCH(direct_conv2d_forward_kernel, static_cast<unsigned>(p.forward_tiles.tiles),
                   p.forward_tiles.threads, 0, stream)
      (shape, p.forward, p.forward_tiles, x, weight, bias, y, partial, e);
      MNIST_CUDA_LAUNCH_CHECK(stream, "direct_conv2d_forward_kernel (with statistics)");
      return;
    }
    // n == 0: no block runs; the reduce over zero blocks assigns zero sums, and the finalize takes
    // them as batch_norm_finalize would.
    reduce_partials(stream, 2 * S::K, 0, partial, S::K, sum, sumsq);
    if (bn)
      batch_norm_finalize(stream, S::K, bn->count, sum, sumsq, bn->epsilon, bn->decay, bn->mean,
                          bn->invstd, bn->running_mean, bn->running_var);
  });
}

}  // namespace

void direct_conv2d_forward_stats(cudaStream_t stream, const Conv2dGeom& g, const float* x,
                                 const float* weight, const float* bias, float* y, float* sum,
                                 float* sumsq, const BatchNormFinalize* bn, unsigned* counter,
                                 float* workspace) {
  forward_stats(stream, "direct_conv2d_forward_stats", g, PlainSource{x}, weight, bias, y, sum,
                sumsq, bn, counter, workspace);
}

bool direct_conv_gathers(const Conv2dGeom& g) {
  return g.c == 1 && g.out_h == g.h && g.out_w == g.w && direct_conv_supports(g);
}

void direct_conv2d_forward_gathered(cudaStream_t stream, const Conv2dGeom& g,
                                    const BatchGather& batch, const float* weight,
                                    const float* bias, float* y, float* sum, float* sumsq,
                                    const BatchNormFinalize* bn, unsigned* counter,
                                    float* workspace) {
  MNIST_CHECK(direct_conv_gathers(g),
              "direct_conv2d_forward_gathered: a {}->{} convolution of {}x{} into {}x{}: gathering "
              "needs one input channel and an output of the input's size",
              g.c, g.k, g.h, g.w, g.out_h, g.out_w);
  MNIST_CHECK(batch.pixels == g.h * g.w && batch.ring_steps >= 1,
              "direct_conv2d_forward_gathered: images of {} pixels for a {}x{} input, a ring of {} "
              "steps",
              batch.pixels, g.h, g.w, batch.ring_steps);
  GatherSource source;
  source.b = batch;
  source.n = g.n;
  source.width = g.w;
  forward_stats(stream, "direct_conv2d_forward_gathered", g, source, weight, bias, y, sum, sumsq,
                bn, counter, workspace);
}

void direct_conv2d_backward_data(cudaStream_t stream, const Conv2dGeom& g, const float* dy,
                                 const float* weight, float* dx) {
  std::string why_not;
  MNIST_CHECK(direct_conv_supports(g, &why_not), "direct_conv2d_backward_data: {}", why_not);
  if (g.n == 0) return;
  with_shape(g, [&](auto shape) {
    const Plans p = make_plans<decltype(shape)>(g);
    MNIST_LAUNCH(direct_conv2d_backward_data_kernel,
                 static_cast<unsigned>(p.backward_data_tiles.tiles), p.backward_data_tiles.threads,
                 0, stream)
    (shape, p.backward_data, p.backward_data_tiles, dy, weight, dx);
  });
  MNIST_CUDA_LAUNCH_CHECK(stream, "direct_conv2d_backward_data_kernel");
}

namespace {

// Both directions (dx nullptr: the weights alone) in one launch, dy from `source`.
template <class Source>
void backward_both(cudaStream_t stream, const Conv2dGeom& g, const float* x, const Source& dy,
                   const float* weight, float* dweight, float* dx, unsigned* counters,
                   float* workspace, const char* what) {
  std::string why_not;
  MNIST_CHECK(direct_conv_supports(g, &why_not), "{}: {}", what, why_not);
  check_workspace(workspace, what);
  with_shape(g, [&](auto shape) {
    using S = decltype(shape);
    const Plans p = make_plans<S>(g);
    double* partial = reinterpret_cast<double*>(workspace);
    if (g.n > 0) {
      const long long data_tiles = dx ? p.backward_data_tiles.tiles : 0;
      const long long blocks = p.weight_blocks + data_tiles;
      MNIST_CHECK(blocks <= INT_MAX, "{}: {} blocks exceed a grid's {}", what, blocks, INT_MAX);
      const int threads = dx ? std::max(p.weight_tiles.threads, p.backward_data_tiles.threads)
                             : p.weight_tiles.threads;
      MNIST_LAUNCH(direct_conv2d_backward_kernel, static_cast<unsigned>(blocks), threads, 0, stream)
      (shape, p.forward, p.weight_tiles, p.weight_blocks, p.backward_data, p.backward_data_tiles, x,
       dy, weight, partial, partial + static_cast<std::size_t>(p.weight_blocks) * S::kWeights,
       dweight, counters, dx);
      MNIST_CUDA_LAUNCH_CHECK(stream, what);
      return;
    }
    // n == 0: no block runs; the reduce over zero blocks assigns zeros.
    reduce_partials(stream, S::kWeights, 0, partial, S::kWeights, dweight, nullptr);
  });
}

}  // namespace

void direct_conv2d_backward(cudaStream_t stream, const Conv2dGeom& g, const float* x,
                            const float* dy, const float* weight, float* dweight, float* dx,
                            unsigned* counters, float* workspace) {
  backward_both(stream, g, x, PlainSource{dy}, weight, dweight, dx, counters, workspace,
                "direct_conv2d_backward");
}

void direct_conv2d_backward_block(cudaStream_t stream, const Conv2dGeom& g,
                                  const ConvBlockGradient& block, const float* x,
                                  const float* weight, float* dweight, float* dx,
                                  unsigned* counters, float* workspace) {
  const PoolGeom& pg = block.pool;
  MNIST_CHECK(pg.n == g.n && pg.c == g.k && pg.h == g.out_h && pg.w == g.out_w,
              "direct_conv2d_backward_block: the block's pooling (batch {}, {} channels, {}x{}) "
              "does not pool the convolution's output (batch {}, {} channels, {}x{})",
              pg.n, pg.c, pg.h, pg.w, g.n, g.k, g.out_h, g.out_w);
  // The conv blocks' own rule (2x2, stride 2, out = in / 2 >= 1): the staged gradient reads the
  // pooled gradient at clamped windows, so it needs at least one.
  MNIST_CHECK(conv_block_supports(pg),
              "direct_conv2d_backward_block: the block's pooling of {}x{} into {}x{} is not a conv "
              "block's (2x2 windows, stride 2, no padding, output in / 2 of at least 1x1)",
              pg.h, pg.w, pg.out_h, pg.out_w);
  MNIST_CHECK(pg.c <= kBlockGradientChannels,
              "direct_conv2d_backward_block: {} channels; the staged gradient takes at most {}",
              pg.c, kBlockGradientChannels);
  BlockGradientSource source;
  source.b = block;
  backward_both(stream, g, x, source, weight, dweight, dx, counters, workspace,
                "direct_conv2d_backward_block");
}

void direct_conv2d_backward_weights(cudaStream_t stream, const Conv2dGeom& g, const float* x,
                                    const float* dy, float* dweight, unsigned* counters,
                                    float* workspace) {
  std::string why_not;
  MNIST_CHECK(direct_conv_supports(g, &why_not), "direct_conv2d_backward_weights: {}", why_not);
  check_workspace(workspace, "direct_conv2d_backward_weights");
  with_shape(g, [&](auto shape) {
    using S = decltype(shape);
    const Plans p = make_plans<S>(g);
    double* partial = reinterpret_cast<double*>(workspace);
    if (p.weight_blocks > 0) {
      MNIST_LAUNCH(direct_conv2d_backward_weights_kernel, p.weight_blocks, p.weight_tiles.threads,
                   0, stream)
      (shape, p.forward, p.weight_tiles, x, dy, partial,
       partial + static_cast<std::size_t>(p.weight_blocks) * S::kWeights, dweight, counters);
      MNIST_CUDA_LAUNCH_CHECK(stream, "direct_conv2d_backward_weights_kernel");
      return;
    }
    // n == 0: no block runs; the reduce over zero blocks assigns zeros.
    reduce_partials(stream, S::kWeights, 0, partial, S::kWeights, dweight, nullptr);
  });
}

}  // namespace mnist::cuda
