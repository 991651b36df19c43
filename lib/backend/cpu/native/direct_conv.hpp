#pragma once
// Direct 2-D convolution of the native CPU engine: no im2col, no GEMM library. Contracts as
// Backend::conv2d_* (x[n, c, h, w], weight[k, c, kh, kw], bias[k] or nullptr, y[n, k, out_h,
// out_w]); stride 1 only (direct_conv_supports); callers take the im2col path for the rest.
//
// How: every plane is copied into a zero-bordered buffer whose rows are out_w + kw - 1 wide and
// flattened, so that output position q of a flattened output plane (with kw - 1 junk columns per
// row, dropped when the result is copied out) reads input q + c*plane + i*row + j for tap
// (c, i, j). Each tap is then one unaligned vector load and one FMA per output channel: the few
// output channels (6 and 12 in the seed) and a few vectors of positions are held in registers
// (register blocking), so a tap's load feeds many FMAs. The backward-data pass is the same
// correlation over the padded output gradient with the kernel flipped and transposed; the weight
// gradient holds (6 channels x 4 taps) vector sums in registers while streaming the positions.
//
// Threads: the batch is split into contiguous chunks of samples, one per thread; each thread
// owns a slice of the workspace. Weight gradients are summed per thread and then added in a
// fixed order, so results do not depend on timing.
//
// The kernels are compiled once per instruction set (direct_conv_<isa>.cpp); isa.hpp picks one
// at run time. T is float for the engine and double for the finite-difference tests.

#include <cstddef>

#include "backend/kernel_args.hpp"

namespace mnist::cpu::native {

// True when the direct kernels handle this geometry (stride 1, padding smaller than the kernel).
bool direct_conv_supports(const Conv2dGeom& g);

// The kernels of one instruction set, as function pointers (see isa.hpp for the choice).
template <class T>
struct DirectConvKernels {
  // Workspace elements (of T) a call with this geometry and `threads` needs.
  std::size_t (*workspace)(const Conv2dGeom& g, int threads);
  // Assigns y = conv(x, weight) + bias.
  void (*forward)(const Conv2dGeom& g, const T* x, const T* weight, const T* bias, T* y,
                  T* workspace, int threads);
  // The same, and assigns sum[k], sumsq[k] = the sums of y and y^2 over (n, out_h, out_w): the
  // batch-norm statistics of the output, taken while it is in cache (double inside).
  void (*forward_stats)(const Conv2dGeom& g, const T* x, const T* weight, const T* bias, T* y,
                        T* sum, T* sumsq, T* workspace, int threads);
  // Assigns dx = gradient of sum(y * dy) with respect to x.
  void (*backward_data)(const Conv2dGeom& g, const T* dy, const T* weight, T* dx, T* workspace,
                        int threads);
  // Assigns dweight and, when not nullptr, dbias (sums over the batch).
  void (*backward_weights)(const Conv2dGeom& g, const T* x, const T* dy, T* dweight, T* dbias,
                           T* workspace, int threads);
};

}  // namespace mnist::cpu::native
