#include "backend/cuda/cuda_check.hpp"

#include <string>

#include "backend/cuda/stream_counts.cuh"

namespace mnist::cuda::detail {
namespace {

// The current device, or -1 if even that query fails (the message must still be produced).
int current_device() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return device;
}

}  // namespace

void throw_cuda_error(cudaError_t code, const char* expr, const char* file, int line) {
  // Clear a non-sticky error so the next call does not report it a second time.
  cudaGetLastError();
  throw RuntimeError(fmt::format("CUDA error {} ({}) on device {} in `{}` at {}:{}",
                                 cudaGetErrorName(code), cudaGetErrorString(code), current_device(),
                                 expr, file, line));
}

void throw_library_error(const char* library, int code, const char* name, const char* expr,
                         const char* file, int line) {
  throw RuntimeError(fmt::format("{} error {} ({}) on device {} in `{}` at {}:{}", library, name,
                                 code, current_device(), expr, file, line));
}

void check_launch(cudaStream_t stream, const char* what, const char* file, int line) {
  const cudaError_t launch = cudaGetLastError();
  if (launch != cudaSuccess) throw_cuda_error(launch, what, file, line);
#if defined(MNIST_CUDA_DEBUG_SYNC) && MNIST_CUDA_DEBUG_SYNC
  count_host_sync(stream);
  const cudaError_t run = cudaStreamSynchronize(stream);
  if (run != cudaSuccess) throw_cuda_error(run, what, file, line);
#else
  (void)stream;
#endif
}

}  // namespace mnist::cuda::detail
