#pragma once
// Shared helpers of the GPU tests: one CPU backend (the oracle) and one CUDA backend per engine,
// identical inputs uploaded to both, NaN-poisoned outputs, and a comparison that reports the worst
// elements with the tolerance rule |gpu - cpu| <= atol + rtol * |cpu|.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "build_info.hpp"

namespace gpu_test {

// The sizes every grid must handle: each leaves a tail in any block or tile size.
inline const std::vector<int> kSizes{1, 7, 33, 255, 257, 1000};

// The largest convolution batch: 1000 on a GPU. The CPU emulation of CUDA (MNIST_CUDA_EMULATED)
// spends most of its time on the n=1000 convolutions (`gpu_tests -d yes`: 168 s of 212 s), so
// there it is 300: still above 257, with a tail in every tile, and several tiles per grid row.
constexpr int kLargestConvBatch = MNIST_CUDA_EMULATED ? 300 : 1000;

mnist::Backend& cpu();
mnist::Backend& gpu(const std::string& engine = "native");
std::vector<std::string> engines();  // cuda_engines(): native, cublas, cudnn (with cuDNN), fused
void release_backends();

std::vector<float> random_floats(std::size_t n, uint32_t seed, float lo, float hi);
std::vector<int32_t> random_ints(std::size_t n, uint32_t seed, int lo, int hi);  // [lo, hi]

// The same data on the CPU backend and on one CUDA backend.
template <class T>
struct Twin {
  mnist::DeviceBuffer<T> cpu, gpu;
  T* c() const { return cpu.data(); }
  T* g() const { return gpu.data(); }
};

template <class T>
Twin<T> upload(mnist::Backend& gpu_backend, const std::vector<T>& host) {
  Twin<T> t{mnist::DeviceBuffer<T>(cpu(), host.size()),
            mnist::DeviceBuffer<T>(gpu_backend, host.size())};
  if (!host.empty()) {
    cpu().copy_to_device(t.cpu.data(), host.data(), host.size() * sizeof(T));
    gpu_backend.copy_to_device(t.gpu.data(), host.data(), host.size() * sizeof(T));
  }
  return t;
}

// Outputs filled with NaN (floats) or a sentinel (ints) on both sides, so an element a kernel
// forgets to write fails the comparison.
Twin<float> poisoned(mnist::Backend& gpu_backend, std::size_t n);
Twin<int32_t> poisoned_ints(mnist::Backend& gpu_backend, std::size_t n);

template <class T>
std::vector<T> download(mnist::Backend& backend, const mnist::DeviceBuffer<T>& buffer) {
  std::vector<T> host(buffer.size());
  if (!host.empty()) backend.copy_to_host(host.data(), buffer.data(), buffer.bytes());
  return host;
}

// True when both hold the same elements bit for bit (NaNs included). memcmp never sees the null
// data() of an empty vector, even for 0 bytes (UBSan).
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// CHECKs that every element satisfies |gpu - cpu| <= atol + rtol * |cpu| (NaN anywhere fails) and
// reports the count of violations and the worst few with their indices.
void expect_close(mnist::Backend& gpu_backend, const Twin<float>& out, double atol, double rtol,
                  const std::string& what);
void expect_equal(mnist::Backend& gpu_backend, const Twin<int32_t>& out, const std::string& what);

}  // namespace gpu_test
