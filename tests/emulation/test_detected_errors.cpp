// Errors the emulator detects: each is a failed launch (or call) whose message names the kernel,
// the launch's file and line, and what was wrong, so CI reports the bug instead of a wrong number
// far away. Also: the poisoned memory that makes reads before writes visible, sticky errors, and
// the emulated devices.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/launch.cuh"

namespace {

constexpr int kFirstBarrierLine = __LINE__ + 4;  // the two __syncthreads of the next kernel
constexpr int kSecondBarrierLine = __LINE__ + 5;
__global__ void divergent_barrier_kernel(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

constexpr int kShuffleLine = __LINE__ + 3;
__global__ void shuffle_after_return_kernel(float* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.0f, 1);
}

__global__ void barrier_after_some_returned_kernel(int* out) {
  if (threadIdx.x % 2) return;  // returned threads do not hold a barrier up (as on Volta and later)
  __syncthreads();
  out[threadIdx.x / 2] = 1;
}

__global__ void write_index_kernel(int* out) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = static_cast<int>(threadIdx.x);
}

__global__ void unwritten_shared_kernel(float* out) {
  __shared__ float scratch[64];
  if (threadIdx.x < 32) scratch[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = scratch[threadIdx.x];  // 32..63 were never written in this block
}

__global__ void block_sum_kernel(const double* x, double* out) {
  __shared__ double shared[mnist::cuda::kThreads / 32];
  const double total = mnist::cuda::block_sum(x[threadIdx.x], shared);
  if (threadIdx.x == 0) *out = total;
}

template <class T>
T* device_array(std::size_t n) {
  T* p = nullptr;
  REQUIRE(cudaMalloc(&p, n * sizeof(T)) == cudaSuccess);
  return p;
}

// The error of the launch just made, with its text; resets the device when it is a kernel failure.
std::string launch_error(cudaError_t expected) {
  const cudaError_t status = cudaGetLastError();
  const std::string text = cudaGetErrorString(status);
  CHECK(status == expected);
  if (status == cudaErrorLaunchFailure) cudaDeviceReset();
  return text;
}

const std::string kThisFile = "test_detected_errors.cpp";

}  // namespace

TEST_CASE("threads at two different __syncthreads fail the launch, naming both lines",
          "[emulation][errors]") {
  cudaGetLastError();
  int* out = device_array<int>(64);
  const int launch_line = __LINE__ + 1;
  MNIST_LAUNCH(divergent_barrier_kernel, 1, 64, 0, nullptr)(out);
  const std::string text = launch_error(cudaErrorLaunchFailure);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("divergent_barrier_kernel") &&
                       Catch::Contains(kThisFile + ":" + std::to_string(launch_line)) &&
                       Catch::Contains("different __syncthreads") &&
                       Catch::Contains(kThisFile + ":" + std::to_string(kFirstBarrierLine)) &&
                       Catch::Contains(kThisFile + ":" + std::to_string(kSecondBarrierLine)));
}

TEST_CASE("a failed kernel's error is sticky until the device is reset", "[emulation][errors]") {
  cudaGetLastError();
  int* out = device_array<int>(64);
  MNIST_LAUNCH(divergent_barrier_kernel, 1, 64, 0, nullptr)(out);
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);  // still there: sticky
  int host = 0;
  CHECK(cudaMemcpy(&host, out, sizeof host, cudaMemcpyDeviceToHost) == cudaErrorLaunchFailure);
  CHECK(cudaDeviceReset() == cudaSuccess);
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("a shuffle naming a lane that returned fails the launch", "[emulation][errors]") {
  cudaGetLastError();
  float* out = device_array<float>(32);
  MNIST_LAUNCH(shuffle_after_return_kernel, 1, 32, 0, nullptr)(out);
  const std::string text = launch_error(cudaErrorLaunchFailure);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("shuffle_after_return_kernel") &&
                       Catch::Contains("lane 5, which has already returned") &&
                       Catch::Contains(kThisFile + ":" + std::to_string(kShuffleLine)));
}

TEST_CASE("a barrier waits only for the threads that have not returned", "[emulation][errors]") {
  cudaGetLastError();
  int* out = device_array<int>(32);
  MNIST_LAUNCH(barrier_after_some_returned_kernel, 1, 64, 0, nullptr)(out);
  CHECK(cudaGetLastError() == cudaSuccess);
  std::vector<int> host(32);
  REQUIRE(cudaMemcpy(host.data(), out, 32 * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(std::count(host.begin(), host.end(), 1) == 32);
  cudaFree(out);
}

TEST_CASE("launch configurations CUDA refuses are refused, naming the launch",
          "[emulation][errors]") {
  cudaGetLastError();
  int* out = device_array<int>(2048);
  const int line = __LINE__ + 1;
  MNIST_LAUNCH(write_index_kernel, 1, 1025, 0, nullptr)(out);
  std::string text = launch_error(cudaErrorInvalidConfiguration);
  CHECK_THAT(text, Catch::Contains("write_index_kernel launched at") &&
                       Catch::Contains(kThisFile + ":" + std::to_string(line)) &&
                       Catch::Contains("at most 1024"));
  MNIST_LAUNCH(write_index_kernel, 1, dim3(1, 1, 65), 0, nullptr)(out);
  launch_error(cudaErrorInvalidConfiguration);
  MNIST_LAUNCH(write_index_kernel, dim3(1, 65536), 1, 0, nullptr)(out);
  text = launch_error(cudaErrorInvalidConfiguration);
  CHECK_THAT(text, Catch::Contains("grid of 1x65536x1"));
  MNIST_LAUNCH(write_index_kernel, 0, 32, 0, nullptr)(out);
  launch_error(cudaErrorInvalidConfiguration);
  MNIST_LAUNCH(write_index_kernel, 1, 32, (48 << 10) + 1, nullptr)(out);
  text = launch_error(cudaErrorInvalidValue);
  CHECK_THAT(text, Catch::Contains("dynamic shared memory"));
  // A configuration error is not sticky: the next launch runs.
  MNIST_LAUNCH(write_index_kernel, 2, 1024, 0, nullptr)(out);
  CHECK(cudaGetLastError() == cudaSuccess);
  int last = 0;
  REQUIRE(cudaMemcpy(&last, out + 2047, sizeof last, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(last == 1023);
  cudaFree(out);
}

TEST_CASE("device memory and shared memory start as NaN", "[emulation][memory]") {
  cudaGetLastError();
  float* out = device_array<float>(64);
  std::vector<float> host(64);
  REQUIRE(cudaMemcpy(host.data(), out, 64 * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(std::isnan(host[0]));
  CHECK(std::isnan(host[63]));
  MNIST_LAUNCH(unwritten_shared_kernel, 2, 64, 0, nullptr)(out);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  REQUIRE(cudaMemcpy(host.data(), out, 64 * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(host[31] == 1.0f);
  CHECK(std::isnan(host[32]));
  CHECK(std::isnan(host[63]));
  cudaFree(out);
}

TEST_CASE("copies outside an allocation are refused", "[emulation][memory]") {
  cudaGetLastError();
  float* buffer = device_array<float>(10);
  std::vector<float> host(11, 0.0f);
  CHECK(cudaMemcpy(buffer, host.data(), 10 * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cudaMemcpy(buffer, host.data(), 11 * sizeof(float), cudaMemcpyHostToDevice) ==
        cudaErrorInvalidValue);
  CHECK(cudaMemcpy(host.data(), buffer + 1, 10 * sizeof(float), cudaMemcpyDeviceToHost) ==
        cudaErrorInvalidValue);
  CHECK(cudaMemcpy(buffer, host.data(), sizeof(float), cudaMemcpyDeviceToHost) ==
        cudaErrorInvalidValue);  // the "device" source is host memory
  cudaGetLastError();
  cudaFree(buffer);
}

TEST_CASE("the project's block_sum adds a block of 256 values", "[emulation][intrinsics]") {
  cudaGetLastError();
  std::vector<double> x(256);
  for (int i = 0; i < 256; ++i) x[i] = i * 0.5;
  double *dx = device_array<double>(256), *dout = device_array<double>(1);
  REQUIRE(cudaMemcpy(dx, x.data(), 256 * sizeof(double), cudaMemcpyHostToDevice) == cudaSuccess);
  MNIST_LAUNCH(block_sum_kernel, 1, 256, 0, nullptr)(dx, dout);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  double total = 0;
  REQUIRE(cudaMemcpy(&total, dout, sizeof total, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(total == 255 * 256 / 4.0);
  cudaFree(dx);
  cudaFree(dout);
}

TEST_CASE("MNIST_CUDA_EMULATION_GPUS emulated GPUs, each with its own streams",
          "[emulation][devices]") {
  cudaGetLastError();
  const char* text = std::getenv("MNIST_CUDA_EMULATION_GPUS");
  const int expected = text ? std::atoi(text) : 1;
  int count = -1;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  CHECK(count == expected);
  CHECK(cudaSetDevice(count) == cudaErrorInvalidDevice);
  cudaGetLastError();
  if (count < 2) return;
  // A launch into GPU 1's stream while GPU 0 is current fails, as on a real machine.
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  cudaStream_t stream1 = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream1, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  int* out = device_array<int>(32);
  MNIST_LAUNCH(write_index_kernel, 1, 32, 0, stream1)(out);
  const std::string error = launch_error(cudaErrorInvalidResourceHandle);
  CHECK_THAT(error, Catch::Contains("stream of GPU 1 while GPU 0 is current"));
  cudaPointerAttributes where{};
  REQUIRE(cudaPointerGetAttributes(&where, out) == cudaSuccess);
  CHECK(where.type == cudaMemoryTypeDevice);
  CHECK(where.device == 0);
  cudaFree(out);
  cudaStreamDestroy(stream1);
}
