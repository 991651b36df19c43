#pragma once
// One shared-memory tiled SGEMM body that the convolution (implicit GEMM) and dense kernels reuse.
//
// C[m, n] = sum over k in [k_begin, k_end) of A(m, k) * B(k, n). A block of kGemmThreads = 256
// threads computes one kTileM x kTileN = 64 x 64 tile of C; each thread owns a 4 x 4 micro-tile
// whose rows are ty + 16 i and columns tx + 16 j (strided, so the shared-memory reads of a warp hit
// distinct banks). The K dimension advances kTileK = 16 at a time: all 256 threads stage a 16 x 64
// slab of A and of B into shared memory (zero outside the matrix, so every tail is handled by the
// loaders' bounds check), then each thread does 16 x 16 FMAs from registers.
//
// The operands are functors, not pointers: load_a(m, k) and load_b(k, n) compute the address (an
// im2col index for convolution, a transposed index for the backward passes) and are only called
// in bounds; store(m, n, value) writes the result and is only called in bounds.

#include <cuda_runtime.h>

namespace mnist::cuda {

constexpr int kTileM = 64, kTileN = 64, kTileK = 16, kGemmThreads = 256;

// The tile's sums without the store: acc[i][j] is C at row tile_m * kTileM + threadIdx.x / 16 +
// 16 i, column tile_n * kTileN + threadIdx.x % 16 + 16 j (zero outside the matrix), for an
// epilogue that needs the whole micro-tile (column sums, say).
template <class LoadA, class LoadB>
__device__ __forceinline__ void gemm_accumulate(int m_dim, int n_dim, int k_begin, int k_end,
                                                int tile_m, int tile_n, const LoadA& load_a,
                                                const LoadB& load_b, float (&acc)[4][4]) {
  __shared__ float a_tile[kTileK][kTileM + 1];
  __shared__ float b_tile[kTileK][kTileN + 1];
  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const int m0 = tile_m * kTileM, n0 = tile_n * kTileN;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  for (int k0 = k_begin; k0 < k_end; k0 += kTileK) {
#pragma unroll
    for (int r = 0; r < (kTileM * kTileK) / kGemmThreads; ++r) {
      const int l = tid + r * kGemmThreads;
      // A is usually contiguous along k, B along n: consecutive threads take consecutive k / n.
      const int ak = l % kTileK, am = l / kTileK;
      const int gm = m0 + am, gka = k0 + ak;
      a_tile[ak][am] = (gm < m_dim && gka < k_end) ? load_a(gm, gka) : 0.0f;
      const int bn = l % kTileN, bk = l / kTileN;
      const int gn = n0 + bn, gkb = k0 + bk;
      b_tile[bk][bn] = (gn < n_dim && gkb < k_end) ? load_b(gkb, gn) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = a_tile[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = b_tile[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
}

template <class LoadA, class LoadB, class Store>
__device__ __forceinline__ void gemm_tile(int m_dim, int n_dim, int k_begin, int k_end, int tile_m,
                                          int tile_n, const LoadA& load_a, const LoadB& load_b,
                                          const Store& store) {
  float acc[4][4];
  gemm_accumulate(m_dim, n_dim, k_begin, k_end, tile_m, tile_n, load_a, load_b, acc);
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int m0 = tile_m * kTileM, n0 = tile_n * kTileN;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int gm = m0 + ty + 16 * i, gn = n0 + tx + 16 * j;
      if (gm < m_dim && gn < n_dim) store(gm, gn, acc[i][j]);
    }
  }
}

// Grid for a GEMM with C of m_dim x n_dim: x over column tiles (can be large), y over row tiles.
inline dim3 gemm_grid(int m_dim, int n_dim, int k_splits = 1) {
  return dim3(static_cast<unsigned>((n_dim + kTileN - 1) / kTileN),
              static_cast<unsigned>((m_dim + kTileM - 1) / kTileM),
              static_cast<unsigned>(k_splits));
}

}  // namespace mnist::cuda
