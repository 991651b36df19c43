#pragma once
// The "cudnn" engine's convolution: cuDNN's legacy convolution API with FMA-only math (no TF32, so
// results stay within float tolerance of the CPU oracle), direct algorithms only (sums of products
// like the CPU's; transform_domain() in the .cu says why not FFT or Winograd), and
// deterministic ones where cuDNN offers one. Compiled only when cuDNN is found
// (lib/CMakeLists.txt builds cudnn_*.cu only then). Shapes and assign semantics are those of
// conv2d.hpp.

#include <cudnn.h>

#include <array>
#include <cstddef>
#include <map>
#include <memory>

#include "backend/backend.hpp"
#include "backend/kernel_args.hpp"

namespace mnist::cuda {

class CudnnConv2d {
 public:
  explicit CudnnConv2d(cudaStream_t stream);  // creates the cuDNN handle bound to `stream`
  ~CudnnConv2d();
  CudnnConv2d(const CudnnConv2d&) = delete;
  CudnnConv2d& operator=(const CudnnConv2d&) = delete;

  // False when the next call for `g` would not run cuDNN: a geometry whose out_h/out_w needs one
  // more bottom/right row than top/left (SAME with an even kernel; cuDNN pads symmetrically), an
  // empty batch, or no algorithm within the workspace promised for g's shape (below). The backend
  // then runs the native kernels.
  bool supports(const Conv2dGeom& g);
  // Plans `g` with no workspace limit, so the algorithm is the best cuDNN offers at this batch
  // size whatever smaller batches were sized before, and returns the largest workspace (in
  // floats) returned so far for g's shape (g without n). It is a promise: every later call for
  // this shape at any batch size runs within that workspace; batch sizes planned earlier under a
  // smaller promise are re-planned on their next call. 0 when cuDNN does not support `g`.
  std::size_t workspace_floats(const Conv2dGeom& g);
  // What each direction of the next call for `g` runs (cuDNN's algorithm or "native (why)").
  Conv2dAlgorithms algorithms(const Conv2dGeom& g);

  void forward(const Conv2dGeom& g, const float* x, const float* weight, const float* bias,
               float* y, float* workspace);
  void backward_data(const Conv2dGeom& g, const float* dy, const float* weight, float* dx,
                     float* workspace);
  void backward_weights(const Conv2dGeom& g, const float* x, const float* dy, float* dweight,
                        float* dbias, float* workspace);

 private:
  struct Plan;
  // The plan the next call for `g` runs: made under the workspace promised for g's shape (no limit
  // before any promise), and re-made when the promise has changed since.
  Plan& plan(const Conv2dGeom& g);
  std::unique_ptr<Plan> make_plan(const Conv2dGeom& g, std::size_t limit_bytes);
  std::size_t limit_bytes(const Conv2dGeom& g) const;

  cudaStream_t stream_ = nullptr;
  cudnnHandle_t handle_ = nullptr;
  std::map<std::array<int, 13>, std::unique_ptr<Plan>> plans_;
  // Shape without n -> the largest workspace (bytes) workspace_floats() returned for it.
  std::map<std::array<int, 12>, std::size_t> promised_bytes_;
};

}  // namespace mnist::cuda
