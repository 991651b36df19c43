#pragma once
// What a CudaBackend's engine is made of, chosen once when the backend is built: which kernels run
// the convolutions and the dense layers, and which fused kernels (backend/fused.hpp,
// fused_blocks.hpp) the backend's fused() is. The backend's methods forward to these parts and
// never ask which engine they belong to:
//
//   engine  | convolutions                          | dense layers | fused kernels
//   native  | hand-written (direct or tiled GEMM)   | hand-written | EngineFusedKernels
//   cublas  | hand-written                          | cuBLAS       | EngineFusedKernels
//   cudnn   | cuDNN (hand-written where it cannot)  | cuBLAS       | EngineFusedKernels
//   fused   | hand-written                          | hand-written | FusedBlocks
//   (docs/gpu_speed.md)
//
// EngineFusedKernels: a convolution takes its batch norm's sums where the convolutions can and a
// dense layer's backward is one launch where the dense layers fuse it, every other block is the
// reference chain; FusedBlocks: every block of fused.hpp as its kernels.
// Each part implements only what differs between its variants; the backend keeps the reference
// chains (backend.cpp, fused.cpp) and runs them where a part says it does not fuse a pair of
// calls.

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "backend/cuda/channel_reduce.cuh"
#include "backend/fused.hpp"
#include "backend/kernel_args.hpp"
#include "build_info.hpp"
#include "core/engine.hpp"

namespace mnist::cuda {

// The backend's stream and the scratch its kernels share, made once by the backend and lent to
// each part for the backend's lifetime.
struct StreamResources {
  int device = 0;  // the CUDA ordinal the stream belongs to
  cudaStream_t stream = nullptr;
  unsigned* block_counter = nullptr;  // [kBlockCounters], 0 between kernels (launch.cuh)
  ReduceScratch scratch;
};

// The convolutions' kernels. Contracts: Backend's conv2d_* methods (backend.hpp).
class Convolutions {
 public:
  virtual ~Convolutions() = default;
  virtual std::size_t workspace_floats(const Conv2dGeom& g) = 0;
  virtual Conv2dAlgorithms algorithms(const Conv2dGeom& g) = 0;
  virtual void forward(const Conv2dGeom& g, const float* x, const float* weight, const float* bias,
                       float* y, float* workspace) = 0;
  virtual void backward_data(const Conv2dGeom& g, const float* dy, const float* weight, float* dx,
                             float* workspace) = 0;
  virtual void backward_weights(const Conv2dGeom& g, const float* x, const float* dy,
                                float* dweight, float* dbias, float* workspace) = 0;
  // Whether forward_stats and backward below run `g` in fewer launches than the backend's chains
  // (forward then batch_norm_stats (then finalize); backward_weights then backward_data). Where
  // they say false the backend runs the chain and never calls them.
  virtual bool fuses(const Conv2dGeom& g) = 0;
  // forward, the batch norm's sums of y and, when bn is not nullptr, their finalize.
  virtual void forward_stats(const Conv2dGeom& g, const float* x, const float* weight,
                             const float* bias, float* y, float* sum, float* sumsq,
                             const BatchNormFinalize* bn, float* workspace) = 0;
  virtual void backward(const Conv2dGeom& g, const float* x, const float* dy, const float* weight,
                        float* dweight, float* dbias, float* dx, float* workspace) = 0;
};

// The dense layers' products. Contracts: Backend's dense_* methods (backend.hpp).
class DenseLayers {
 public:
  virtual ~DenseLayers() = default;
  virtual void forward(int n, int in, int out, const float* x, const float* weight,
                       const float* bias, float* y) = 0;
  virtual void backward_data(int n, int in, int out, const float* dy, const float* weight,
                             float* dx) = 0;
  virtual void backward_weights(int n, int in, int out, const float* x, const float* dy,
                                float* dweight, float* dbias) = 0;
  // Whether backward runs both products in one launch (FusedKind::dense_backward); where false
  // the block plan runs the two products as their own calls.
  virtual bool fuses_backward() const = 0;
  virtual void backward(int n, int in, int out, const float* x, const float* dy,
                        const float* weight, float* dweight, float* dbias, float* dx) = 0;
};

// The parts' variants. The cuBLAS and cuDNN parts make their library handle bound to the stream
// (the device must be current) and release it when destroyed.
std::unique_ptr<Convolutions> make_hand_written_convolutions(const StreamResources& r);
std::unique_ptr<DenseLayers> make_hand_written_dense_layers(const StreamResources& r);
std::unique_ptr<DenseLayers> make_cublas_dense_layers(const StreamResources& r);
#if MNIST_HAVE_CUDNN
std::unique_ptr<Convolutions> make_cudnn_convolutions(const StreamResources& r);  // cudnn_*.cu
#endif

// The table above, as the backend reads it.
struct EngineParts {
  std::unique_ptr<Convolutions> convolutions;
  std::unique_ptr<DenseLayers> dense;
  std::unique_ptr<FusedKernels> fused;
  EngineParts();
  EngineParts(EngineParts&&) noexcept;
  EngineParts& operator=(EngineParts&&) noexcept;
  ~EngineParts();
};
// backend: the one the parts are made for (its name, for messages; the fused kernels' chains).
EngineParts make_engine_parts(Engine engine, Backend& backend, const StreamResources& r);

}  // namespace mnist::cuda
