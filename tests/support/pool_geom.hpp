#pragma once
// The pooling of a fused conv block (FusedKernels::bn_relu_pool_*): 2x2 windows, stride 2, no
// padding, odd last rows and columns dropped. Shared by the CPU twin's tests and the CUDA kernels'
// tests.

#include "backend/kernel_args.hpp"

namespace mnist::testing {

inline PoolGeom block_geom(int n, int c, int h, int w) {
  PoolGeom g;
  g.n = n, g.c = c, g.h = h, g.w = w;
  g.out_h = h / 2, g.out_w = w / 2;
  return g;
}

}  // namespace mnist::testing
