// Dense layers as three variants of the tiled SGEMM in tiled_gemm.cuh (64 x 64 tile per block of
// 256 threads, 4 x 4 per thread); only the operand index maps differ:
//   forward          y[n, out]  = x[n, in]      . weight^T[in, out]   grid: out/64 x n/64
//   backward_data    dx[n, in]  = dy[n, out]    . weight[out, in]     grid: in/64  x n/64
//   backward_weights dW[out,in] = dy^T[out, n]  . x[n, in]            grid: in/64  x out/64
// backward (both) runs the weights' tiles and the data's tiles as one grid (a block is one tile of
// either), since neither reads what the other writes: one launch where the two calls take two.
// The bias gradient is a per-column sum, done by channel_reduce.cuh with hw = 1.
#include "backend/cuda/dense.hpp"

#include <climits>

#include "core/error.hpp"

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/tiled_gemm.cuh"

namespace mnist::cuda {
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

// Blocks [0, weight_tiles) are dense_backward_weights_kernel's tiles (row-major over its grid of
// ceil(in/64) columns), the rest dense_backward_data_kernel's (over ceil(in/64) columns too).
__global__ void __launch_bounds__(kGemmThreads)
    dense_backward_kernel(int n, int in, int out, const float* x, const float* dy,
                          const float* weight, float* dweight, float* dx, int weight_tiles) {
  const int tiles_in = (in + kTileN - 1) / kTileN;
  const int block = static_cast<int>(blockIdx.x);
  if (block < weight_tiles) {
    auto load_a = [&](int o, int row) { return dy[static_cast<std::size_t>(row) * out + o]; };
    auto load_b = [&](int row, int j) { return x[static_cast<std::size_t>(row) * in + j]; };
    auto store = [&](int o, int j, float v) { dweight[static_cast<std::size_t>(o) * in + j] = v; };
    gemm_tile(out, in, 0, n, block / tiles_in, block % tiles_in, load_a, load_b, store);
  } else {
    const int tile = block - weight_tiles;
    auto load_a = [&](int row, int o) { return dy[static_cast<std::size_t>(row) * out + o]; };
    auto load_b = [&](int o, int j) { return weight[static_cast<std::size_t>(o) * in + j]; };
    auto store = [&](int row, int j, float v) { dx[static_cast<std::size_t>(row) * in + j] = v; };
    gemm_tile(n, in, 0, out, tile / tiles_in, tile % tiles_in, load_a, load_b, store);
  }
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
  MNIST_LAUNCH(dense_backward_kernel, static_cast<unsigned>(blocks), kGemmThreads, 0, stream)
  (n, in, out, x, dy, weight, dweight, dx, static_cast<int>(weight_tiles));
  MNIST_CUDA_LAUNCH_CHECK(stream, "dense_backward_kernel");
  if (dbias) dense_backward_bias(stream, n, out, dy, dbias, scratch);
}

void dense_backward_bias(cudaStream_t stream, int n, int out, const float* dy, float* dbias,
                         const ReduceScratch& scratch) {
  channel_reduce(stream, ChannelGeom{n, out, 1}, scratch, ColumnValue{dy}, StoreSum{dbias},
                 "dense_backward_bias");
}

}  // namespace mnist::cuda
