#pragma once
// Always-on checks for CUDA runtime, cuBLAS and cuDNN calls, and for kernel launches.
// Only CUDA translation units include this header (it names CUDA types).
//
// Every failure throws mnist::RuntimeError naming the expression, file, line, the library's own
// error name and the device that was current, so a report from an 8-GPU box says which card failed.

#include <cuda_runtime.h>

#include "core/error.hpp"

namespace mnist::cuda::detail {

[[noreturn]] void throw_cuda_error(cudaError_t code, const char* expr, const char* file, int line);
[[noreturn]] void throw_library_error(const char* library, int code, const char* name,
                                      const char* expr, const char* file, int line);
// After a launch: reports a launch-configuration error; with MNIST_CUDA_DEBUG_SYNC=1 also waits for
// the stream so an asynchronous fault is reported at the launch that caused it.
void check_launch(cudaStream_t stream, const char* what, const char* file, int line);

}  // namespace mnist::cuda::detail

#define MNIST_CUDA_CHECK(expr)                                                                \
  do {                                                                                        \
    const cudaError_t mnist_cuda_status_ = (expr);                                            \
    if (mnist_cuda_status_ != cudaSuccess) {                                                  \
      ::mnist::cuda::detail::throw_cuda_error(mnist_cuda_status_, #expr, __FILE__, __LINE__); \
    }                                                                                         \
  } while (0)

// cuBLAS status names come from cublasGetStatusName (cuBLAS >= 11.4); include cublas_v2.h before
// use.
#define MNIST_CUBLAS_CHECK(expr)                                                                   \
  do {                                                                                             \
    const cublasStatus_t mnist_cublas_status_ = (expr);                                            \
    if (mnist_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                           \
      ::mnist::cuda::detail::throw_library_error("cuBLAS", static_cast<int>(mnist_cublas_status_), \
                                                 cublasGetStatusName(mnist_cublas_status_), #expr, \
                                                 __FILE__, __LINE__);                              \
    }                                                                                              \
  } while (0)

// Include cudnn.h before use (only the cudnn_*.cu files and the backend under MNIST_HAVE_CUDNN do).
#define MNIST_CUDNN_CHECK(expr)                                                                   \
  do {                                                                                            \
    const cudnnStatus_t mnist_cudnn_status_ = (expr);                                             \
    if (mnist_cudnn_status_ != CUDNN_STATUS_SUCCESS) {                                            \
      ::mnist::cuda::detail::throw_library_error("cuDNN", static_cast<int>(mnist_cudnn_status_),  \
                                                 cudnnGetErrorString(mnist_cudnn_status_), #expr, \
                                                 __FILE__, __LINE__);                             \
    }                                                                                             \
  } while (0)

// MNIST_CUDA_LAUNCH_CHECK(stream, "relu_forward_kernel") right after every <<<...>>>.
#define MNIST_CUDA_LAUNCH_CHECK(stream, what) \
  ::mnist::cuda::detail::check_launch((stream), (what), __FILE__, __LINE__)
