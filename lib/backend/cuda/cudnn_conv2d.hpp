#pragma once
// The "cudnn" engine's convolution: cuDNN's legacy convolution API with FMA-only math (no TF32, so
// results stay within float tolerance of the CPU oracle) and deterministic algorithms where cuDNN
// offers one. Compiled only when cuDNN is found (lib/CMakeLists.txt builds cudnn_*.cu only then).
// Shapes and assign semantics are those of conv2d.hpp.

#include <cudnn.h>

#include <array>
#include <cstddef>
#include <map>
#include <memory>

#include "backend/geometry.hpp"

namespace mnist::cuda {

class CudnnConv2d {
 public:
  explicit CudnnConv2d(cudaStream_t stream);  // creates the cuDNN handle bound to `stream`
  ~CudnnConv2d();
  CudnnConv2d(const CudnnConv2d&) = delete;
  CudnnConv2d& operator=(const CudnnConv2d&) = delete;

  // cuDNN pads symmetrically; a geometry whose out_h/out_w needs one more bottom/right row (SAME
  // with an even kernel) is not expressible, and the backend uses the native kernels for it.
  bool supports(const Conv2dGeom& g);
  // The largest of the three algorithms' needs, and a promise: every later call for this shape at
  // any batch size n runs within the largest workspace returned for the shape (plans that would
  // need more use the native kernels instead; supports() then says false).
  std::size_t workspace_floats(const Conv2dGeom& g);

  void forward(const Conv2dGeom& g, const float* x, const float* weight, const float* bias,
               float* y, float* workspace);
  void backward_data(const Conv2dGeom& g, const float* dy, const float* weight, float* dx,
                     float* workspace);
  void backward_weights(const Conv2dGeom& g, const float* x, const float* dy, float* dweight,
                        float* dbias, float* workspace);

 private:
  struct Plan;
  Plan& plan(const Conv2dGeom& g);

  cudaStream_t stream_ = nullptr;
  cudnnHandle_t handle_ = nullptr;
  std::map<std::array<int, 13>, std::unique_ptr<Plan>> plans_;
  // Shape without n -> the largest workspace (bytes) workspace_floats() reported for it.
  std::map<std::array<int, 12>, std::size_t> promised_bytes_;
};

}  // namespace mnist::cuda
